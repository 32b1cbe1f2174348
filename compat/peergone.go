package compat

import (
	"io"
	"time"

	"github.com/hotpath-go/hotpath/wsframe"
)

// What the other end of a WebSocket sent before it went during an inflate
// pause, seen by the hang-up watch (watchHangUp, Linux only). The paused
// read loop has not read it, and must not handle it: the pause ended for
// good (endPauses), so reading on would inflate it all unpaced. But a
// close frame among it is the other end's word on why it went (1000,
// 1001 going away): without it OnDisconnect and Metrics.Closes had 1006
// for a client that closed properly during a pause. So the bytes the
// socket still holds are read, bounded, and walked frame header by frame
// header for a close frame, every other frame's payload skipped: nothing
// is inflated and no handler runs.

// maxUnread bounds what readUnread reads from a socket whose other end
// went during a pause: a close frame behind more than that of unread
// frames (bombs, most likely) is not looked for, and the connection ends
// with 1006. The bytes are held only until the read loop ends, once per
// connection, and the watches under way at once are bounded
// (maxHangUpWatches).
const maxUnread = 64 << 10

// unreadTimeout bounds readUnread. After the other end's FIN or reset
// nothing more arrives and every read returns at once, with bytes, an
// EOF or an error; the bound is for what should not: over TLS a read may
// have to write (an answer to a key update the other end asked for),
// and wait for a writer of the outbox stuck on a peer that reads nothing.
const unreadTimeout = time.Second

// peerGone is the error of a connection dropped because its other end
// went during an inflate pause (pauseTurn): err, 1006, as the next read
// would have met, and unread, what the socket still held then, which
// readError walks for the other end's close (closeUnread).
type peerGone struct {
	err    error
	unread []byte
}

func (g *peerGone) Error() string { return g.err.Error() }
func (g *peerGone) Unwrap() error { return g.err }

// dropGone drops the connection, its other end gone (gone: errPeerClosed
// or errPeerReset) while the read loop is paused, keeping what the
// socket still holds for readError. On the read loop, which reads nothing
// else meanwhile.
func (c *wsConn) dropGone(gone error) {
	var err error = &peerGone{err: gone, unread: c.readUnread()}
	c.dropErr.CompareAndSwap(nil, &err)
	c.abort()
}

// readUnread reads what the socket holds, at most maxUnread bytes, over
// TLS what its records decrypt to. Only once the other end has gone: its
// FIN or reset ends the reads at what the kernel already holds. The
// deadline, for writes too, is the connection's last: it is dropped
// next.
func (c *wsConn) readUnread() []byte {
	c.nc.SetDeadline(time.Now().Add(unreadTimeout))
	b, _ := io.ReadAll(io.LimitReader(c.nc, maxUnread))
	return b
}

// closeUnread returns the close frame the other end sent before it went
// during an inflate pause, as handle would have returned it (Remote), or
// g's 1006 when there is none among what g holds. On the read loop, once
// it has handled what it had read: the frames begin with the partial one
// its queue holds, if any, and go on in g.unread. The bytes are walked
// once, and let go; a later call returns the same.
func (c *wsConn) closeUnread(g *peerGone) error {
	unread := g.unread
	g.unread = nil
	if len(unread) == 0 {
		return g.err
	}
	segs, err := c.q.Segments(c.q.Len(), nil)
	if err != nil {
		return g.err
	}
	ext := wsframe.Flags(0)
	if c.pmd != nil {
		ext = wsframe.Rsv1
	}
	if ce := findClose(append(segs, unread), !c.client, ext, frameLimit(c.limits, c.pmd != nil)); ce != nil {
		c.markNoticed(ce)
		g.err = ce
	}
	return g.err
}

// findClose walks the frames in segs, a stream's bytes from the start of
// a frame, to the first close frame, and returns its close (Remote); nil
// when the bytes end before one is whole, or at a frame the Decoder
// would refuse for what its header tells: the masking of the wrong
// direction (masked: the frames must be), a reserved opcode or bit (ext:
// the bit an extension uses), a control frame fragmented or over 125
// bytes, a frame over maxFrame, or a close frame whose body is not a
// valid close. The payloads of other frames are skipped, not read.
func findClose(segs [][]byte, masked bool, ext wsframe.Flags, maxFrame int64) *CloseError {
	var total int64
	for _, s := range segs {
		total += int64(len(s))
	}
	var hdr [wsframe.MaxHeaderSize]byte
	for off := int64(0); off < total; {
		h, hn, err := wsframe.ParseHeader(gather(segs, off, hdr[:]))
		switch {
		case err != nil, h.Masked != masked, h.Opcode.IsReserved(),
			h.Length > maxFrame, h.Length > total: // bytes end inside it
			return nil
		}
		allowed := wsframe.Fin
		if h.Opcode.IsControl() {
			// RFC 6455 §5.5: "All control frames MUST have a payload
			// length of 125 bytes or less and MUST NOT be fragmented."
			if !h.Fin() || h.Length > 125 {
				return nil
			}
		} else if h.Opcode != wsframe.OpContinuation {
			allowed |= ext // RFC 7692 §6: RSV1 on a message's first frame
		}
		if h.Flags&^allowed != 0 {
			return nil
		}
		body := off + int64(hn)
		if h.Opcode != wsframe.OpClose {
			off = body + h.Length
			continue
		}
		if body+h.Length > total {
			return nil
		}
		var pb [125]byte
		p := gather(segs, body, pb[:h.Length])
		if h.Masked {
			wsframe.Mask(p, h.Key, 0)
		}
		code, reason, err := wsframe.ParseClosePayload(p)
		if err != nil {
			return nil
		}
		return &CloseError{Code: code, Reason: string(reason), Remote: true}
	}
	return nil
}

// gather copies into dst the bytes of segs from offset off on, as many as
// dst holds or segs has, and returns them.
func gather(segs [][]byte, off int64, dst []byte) []byte {
	n := 0
	for _, s := range segs {
		if n == len(dst) {
			break
		}
		if off >= int64(len(s)) {
			off -= int64(len(s))
			continue
		}
		n += copy(dst[n:], s[off:])
		off = 0
	}
	return dst[:n]
}

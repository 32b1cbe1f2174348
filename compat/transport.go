package compat

import (
	"crypto/tls"
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hotpath-go/hotpath/corkwriter"
	"github.com/hotpath-go/hotpath/segmentqueue"
	"github.com/hotpath-go/hotpath/wsframe"
)

// wsConn is the WebSocket engine under a server connection and under the
// client: frames decoded by wsframe from the bytes of each read, partial
// frames kept in a segmentqueue, and everything written through a
// corkwriter.Outbox so that the frames produced by one read leave in one
// writev.
//
// An idle wsConn holds no read buffer: the read loop waits for the socket to
// become readable before it takes a buffer from a pool, and gives the buffer
// back as soon as the bytes read have been handled.
type wsConn struct {
	nc     net.Conn
	rc     syscall.RawConn // nil when nc has no file descriptor
	client bool            // this end is the client: it masks what it sends
	dec    wsframe.Decoder
	q      segmentqueue.Queue
	asm    []byte // assembly buffer of a fragmented message
	out    *corkwriter.Outbox
	pmd    *pmdConn // nil unless permessage-deflate was negotiated
	limits Limits

	// closeHandshake's wmu also guards the handshake's read deadline.
	// The outbox keeps the close frame after every data frame: sendClose
	// queues it with Outbox.SendLast, after which the outbox refuses every
	// frame with Closed, so senders take no lock of the connection's.
	// RFC 6455 §5.5.1: "The application MUST NOT send any more data frames
	// after sending a Close frame."
	closeHandshake

	// closeRequest holds a close that another goroutine asked for
	// (shutdown, idle timeout): the read loop sends it between two reads,
	// after the answers of the turn in progress.
	closeRequest atomic.Pointer[CloseError]
	// closeUnawaited: the close asked for ends the connection once its
	// frame is written, without waiting for the peer's (closeNow).
	closeUnawaited atomic.Bool

	live  liveness
	early []byte // bytes that arrived with the upgrade, handled first

	// The result of the last read on rc, set by readReady, which
	// onReadable holds as a method value so that a read allocates nothing.
	onReadable func(fd uintptr) bool
	rbuf       *[]byte
	rn         int
	rerr       error

	// shared is set on a client's connection, whose callers may read their
	// answers themselves (sharedread.go).
	shared *sharedReads

	// idleDeadline is the read deadline of the idle handoff, in monoNow
	// nanoseconds; 0 when none is set (see readLoop).
	idleDeadline int64

	closeOnce sync.Once
	done      chan struct{}
	// lingerOnClose: this end failed the connection; finish lingers
	// (lingerClose). Set by the read loop before finish.
	lingerOnClose bool
	// closeExpired: the closing handshake's deadline ended the reading,
	// the peer silent for closeTimeout. Set by the read loop (readError).
	closeExpired bool

	// dropErr is why this end dropped nc (abort), when the read that the
	// drop then fails would only say "use of closed network connection":
	// a write that failed (onWriteError), or the other end gone during an
	// inflate pause (pauseTurn: a *peerGone, with what the socket still
	// held, which readError walks for the other end's close).
	dropErr atomic.Pointer[error]

	// pauseWake ends the read loop's inflate pause while one is under
	// way (pauseTurn); nil otherwise. abort and requestClose call it
	// (wakePause); aborted, set by abort before, is for a pause that
	// begins after the drop.
	pauseWake atomic.Pointer[func()]
	aborted   atomic.Bool
}

// readBufSize is the size of the pooled buffer one read fills: large enough
// for a burst of small calls, small enough that a pool of them is cheap.
const readBufSize = 16 << 10

// pushInQueue is how many bytes a partial message must reach before a
// read buffer joins the queue as it is rather than copied into it. A read
// buffer the queue takes is lost to the pool: with messages of 10 KiB
// straddling most reads, pushing every read cost a new 16 KiB buffer per
// read and the collections that go with it (BenchmarkCall64x10KiB).
const pushInQueue = 64 << 10

// largeReadSize is the most a single read asks for while a large frame is
// being received on a stream carrier.
const largeReadSize = 256 << 10

// deflateSlack is how far over a limit of n bytes a permessage-deflate
// message of n bytes may arrive. An incompressible message is sent in
// stored blocks of 5 bytes of framing each, and the block size is the
// sender's: zlib at memLevel 5 (Python's websockets) stores 2 KiB blocks
// with some 16 KiB of pending output, 40,961 bytes over at 16 MiB; a
// sixteenth covers blocks down to 80 bytes.
func deflateSlack(n int64) int64 { return n/16 + 64 }

var readBufs = sync.Pool{New: func() any { b := make([]byte, readBufSize); return &b }}

// scratchBufs hold the frames a turn encodes before they are queued.
var scratchBufs = sync.Pool{New: func() any { b := make([]byte, 0, 4096); return &b }}

// closeTimeout bounds the closing handshake: how long an end that sent a
// close frame waits for the peer's before it drops the connection.
const closeTimeout = 3 * time.Second

// newWSConn returns the engine of a WebSocket connection on nc. early
// holds bytes that arrived with the upgrade, if any.
func newWSConn(nc net.Conn, client bool, limits Limits, pmd *pmdConn, early []byte) *wsConn {
	c := &wsConn{nc: nc, client: client, pmd: pmd, limits: limits, early: early, done: make(chan struct{})}
	if sc, ok := nc.(syscall.Conn); ok {
		if rc, err := sc.SyscallConn(); err == nil {
			if canReadRaw {
				c.rc = rc
				c.onReadable = c.readReady
			}
		}
	}
	role := wsframe.Server
	if client {
		role = wsframe.Client
	}
	cfg := wsframe.Config{
		Role:           role,
		MaxFrameSize:   frameLimit(limits, pmd != nil),
		MaxMessageSize: limits.MaxMessageSize,
		MaxFragments:   limits.MaxFragments,
	}
	if pmd != nil {
		cfg.Extensions = wsframe.Rsv1
		cfg.MaxMessageSize += deflateSlack(cfg.MaxMessageSize)
	}
	c.dec.Reset(cfg)
	c.q = *segmentqueue.New(segmentqueue.Limits{MaxBytes: int(cfg.MaxMessageSize) + readBufSize})
	c.out = corkwriter.NewOutbox(nc, &corkwriter.OutboxOptions{
		MaxQueued: limits.MaxOutboxBytes,
		Overflow:  corkwriter.DropOnBackpressure,
		OnError:   c.onWriteError,
	})
	c.live.touch()
	return c
}

// frameLimit is the most one frame's payload may take as it arrives on a
// connection with limits, with permessage-deflate or not (pmd). The
// decoder counts compressed bytes. DEFLATE stores an incompressible
// message with a few bytes of framing per 64 KiB, so a message of
// exactly the limit arrives a little larger; the inflater holds the
// message itself to MaxMessageSize.
func frameLimit(limits Limits, pmd bool) int64 {
	if pmd {
		return limits.MaxFrameSize + deflateSlack(limits.MaxFrameSize)
	}
	return limits.MaxFrameSize
}

// onWriteError is the outbox's report that a write failed: the connection
// cannot be written to any more, so it ends, with a reset (see abort):
// the failed write may have left a frame cut short, so nothing the kernel
// still holds is worth delivering. The write's error is kept as
// why (readError): the read that the close then fails would only say
// "use of closed network connection".
func (c *wsConn) onWriteError(err error) {
	c.dropErr.CompareAndSwap(nil, &err)
	c.abort()
}

// readLoop reads and handles messages until the connection ends, and
// returns why it ended. Handlers run on this goroutine; what they queue on
// the outbox during one read leaves in one writev at the end of that read.
// Bytes that arrived with the upgrade request are handled first.
//
// With handoff, the loop returns errIdle once the connection has been
// silent for about idleHandoff, and the caller continues on a fresh
// goroutine, whose small stack is all an idle connection then holds (see
// start). The silence is noticed by a read deadline that the loop moves
// at most every idleHandoff/2, so a busy connection keeps its goroutine
// and pays no goroutine start per read.
func (c *wsConn) readLoop(h messageHandler, handoff bool) error {
	if handoff {
		// A fresh goroutine parks without a deadline until bytes arrive.
		c.setIdleDeadline(time.Time{})
	}
	if early := c.early; len(early) > 0 {
		c.early = nil
		if _, err := c.turn(early, h); err != nil {
			return err
		}
	}
	for {
		n, herr, err := c.readOnce(h)
		if herr != nil {
			return herr
		}
		if handoff && n > 0 {
			c.moveIdleDeadline()
		}
		if err != nil {
			if c.takeCloseRequest(err) {
				continue
			}
			// A close request left untaken is closeNow's, which readError
			// ends the connection with.
			if handoff && c.idleDeadline != 0 && errors.Is(err, os.ErrDeadlineExceeded) && !c.isClosing() && c.closeRequest.Load() == nil {
				if monoNow()-c.live.lastRead.Load() >= int64(idleHandoff/2) {
					return errIdle
				}
				c.moveIdleDeadline()
				continue
			}
			return c.readError(err)
		}
	}
}

// readOnce reads once and handles what arrived: n is how many bytes the
// read returned, herr the handlers' error and err the read's.
func (c *wsConn) readOnce(h messageHandler) (n int, herr, err error) {
	if c.q.Len() == 0 {
		c.q.Release()
	}
	bp, n, err := c.read()
	kept := false
	if n > 0 {
		kept, herr = c.turn((*bp)[:n], h)
	}
	if bp != nil && !kept {
		readBufs.Put(bp)
	}
	return n, herr, err
}

// idleHandoff is how long a connection stays silent, give or take a half,
// before its goroutine hands over to a fresh one.
const idleHandoff = 100 * time.Millisecond

// moveIdleDeadline pushes the idle deadline idleHandoff past the last read
// when less than half of it is left.
func (c *wsConn) moveIdleDeadline() {
	last := c.live.lastRead.Load()
	if c.idleDeadline-last < int64(idleHandoff/2) {
		c.setIdleDeadline(monoTime(last + int64(idleHandoff)))
	}
}

// setIdleDeadline sets the read deadline of the idle handoff (zero: none)
// unless a closing handshake owns the deadline, without losing the wake-up
// of a close request that set it meanwhile.
func (c *wsConn) setIdleDeadline(t time.Time) {
	if c.isClosing() {
		return
	}
	c.nc.SetReadDeadline(t)
	c.idleDeadline = 0
	if !t.IsZero() {
		c.idleDeadline = int64(t.Sub(clockBase))
	}
	if c.closeRequest.Load() != nil {
		c.nc.SetReadDeadline(time.Now())
	}
}

// read waits for bytes and returns them in a pooled buffer (nil when the
// read failed before taking one). On a socket it takes the buffer only
// once bytes have arrived (see readReady), so a connection parked here
// holds none.
func (c *wsConn) read() (bp *[]byte, n int, err error) {
	if c.rc == nil {
		bp = readBufs.Get().(*[]byte)
		n, err = c.nc.Read(*bp)
		return bp, n, err
	}
	if err := c.rc.Read(c.onReadable); err != nil {
		return nil, 0, err
	}
	bp, n, err = c.rbuf, c.rn, c.rerr
	c.rbuf, c.rerr = nil, nil
	if n == 0 && err == nil {
		err = io.EOF
	}
	return bp, n, err
}

// turn handles the bytes of one read, corked: everything the handlers send
// meanwhile leaves in one writev when it ends.
func (c *wsConn) turn(b []byte, h messageHandler) (kept bool, err error) {
	c.live.touch()
	c.out.Cork()
	kept, err = c.consume(b, h)
	if werr := uncork(c.out, c.client); err == nil && werr != nil {
		err = c.readError(werr) // as the next read would have ended it
	}
	return kept, err
}

// requestClose asks the read loop to close the connection with code after
// the turn in progress; it is how goroutines other than the read loop end
// a connection. The read loop is woken by a read deadline in the past.
//
// A turn waits for the socket to take its answers, so a peer that sends
// and never reads could hold the read loop, and the connection, forever:
// the turn's writes get closeTimeout, after which the connection is
// dropped (TestCallerThatNeverReads).
//
// The read loop may take the request before the wake-up lands (woken by
// its idle deadline, say) and start the closing handshake, whose deadline
// then must stay: a wake-up after it would end the connection before the
// peer's close frame (RFC 6455 §7.1.2). So the wake-up is set under wmu,
// as sendClose sets that deadline, and only while the handshake has not
// begun (TestCloseRequestTakenEarly).
func (c *wsConn) requestClose(code wsframe.CloseCode, reason string) {
	if !c.closeRequest.CompareAndSwap(nil, &CloseError{Code: code, Reason: reason}) {
		return
	}
	c.nc.SetWriteDeadline(time.Now().Add(closeTimeout))
	if hook := testHookCloseRequested.Load(); hook != nil {
		(*hook)(c)
	}
	c.wmu.RLock()
	if !c.closing {
		c.nc.SetReadDeadline(time.Now())
	}
	c.wmu.RUnlock()
	if c.shared != nil {
		c.shared.wakeLoop() // nobody may be reading: the loop lingers (sharedread.go)
	}
	// The read loop paused for the inflate budget reads no deadline.
	c.wakePause()
}

// testHookCloseRequested, when set, runs between a close request and its
// wake-up.
var testHookCloseRequested atomic.Pointer[func(*wsConn)]

// closeNow is requestClose whose close, once taken, ends the read loop as
// a protocol violation does: the reader that the wake-up reaches, the
// loop or a caller (sharedread.go), leaves the request to readError, and
// end sends the close frame, after the answers of the turn in progress,
// and closes the socket once it is written (finish), with a FIN and
// without lingering. Run by the read loop, the close cannot race with its
// reads, its deadlines or its closing handshake. A closing handshake
// already under way keeps its bound. (RFC 6455 §7.1.1 has the server
// close TCP first "in most normal cases"; an end that must not wait for
// the other is not one of them.)
func (c *wsConn) closeNow(code wsframe.CloseCode, reason string) {
	c.closeUnawaited.Store(true)
	c.requestClose(code, reason)
}

// takeCloseRequest reports whether err is the wake-up of requestClose, and
// then sends the close frame asked for; the read loop goes on reading until
// the peer's close frame. closeNow's is not taken: readError ends the
// connection with it.
func (c *wsConn) takeCloseRequest(err error) bool {
	req := c.closeRequest.Load()
	if req == nil || !errors.Is(err, os.ErrDeadlineExceeded) || c.isClosing() || c.closeUnawaited.Load() {
		return false
	}
	c.sendClose(req.Code, req.Reason)
	return true
}

func (c *wsConn) isClosing() bool {
	c.wmu.RLock()
	defer c.wmu.RUnlock()
	return c.closing
}

// consume decodes and handles every message in b, the bytes of one read,
// and keeps a trailing partial frame in the queue. With the queue empty, b
// is decoded in place and a partial frame at its end is copied into the
// queue. With a frame pending, b joins the queue: copied while what is
// pending stays small (pushInQueue), so that the read buffer goes back to
// its pool, and a peer that trickles a frame a byte at a time makes the
// queue hold what it sent, not a buffer per read; without a copy when a
// large message is being received (kept reports that the queue now owns
// b, which the garbage collector then frees).
func (c *wsConn) consume(b []byte, h messageHandler) (kept bool, err error) {
	if c.q.Len() > 0 {
		if c.q.Len()+len(b) > pushInQueue {
			err, kept = c.q.Push(b), true
		} else {
			_, err = c.q.Write(b)
		}
		if err != nil {
			return kept, err
		}
		return kept, c.drainQueue(h)
	}
	for len(b) > 0 {
		m, n, err := c.dec.DecodeMessage(b, &c.asm)
		b = b[n:]
		if errors.Is(err, wsframe.ErrNeedMore) {
			break
		}
		if err != nil {
			return false, err
		}
		if err := c.handle(m, h); err != nil {
			return false, err
		}
	}
	if len(b) > 0 {
		if _, err := c.q.Write(b); err != nil {
			return false, err
		}
	}
	return false, nil
}

// drainQueue handles every whole message in the queue.
func (c *wsConn) drainQueue(h messageHandler) error {
	for {
		m, err := c.dec.NextMessage(&c.q, &c.asm)
		if errors.Is(err, wsframe.ErrNeedMore) {
			return nil
		}
		if err != nil {
			return err
		}
		if err := c.handle(m, h); err != nil {
			return err
		}
	}
}

// handle answers control frames and passes data messages to h.
func (c *wsConn) handle(m wsframe.Message, h messageHandler) error {
	switch m.Opcode {
	case wsframe.OpPing:
		// RFC 6455 §5.5.2: "Upon receipt of a Ping frame, an endpoint MUST
		// send a Pong frame in response ... with identical Application
		// data".
		c.sendFrame(wsframe.OpPong, m.Payload, wsframe.Fin)
		return nil
	case wsframe.OpPong:
		return nil
	case wsframe.OpClose:
		// RFC 6455 §5.5.1: "If an endpoint receives a Close frame and did
		// not previously send a Close frame, the endpoint MUST send a Close
		// frame in response", typically echoing the status code it received.
		code := m.CloseCode
		if code == wsframe.CloseNoStatus {
			code = wsframe.CloseNormal
		}
		ce := &CloseError{Code: m.CloseCode, Reason: string(m.CloseReason()), Remote: true}
		c.markNoticed(ce)
		c.sendClose(code, "")
		return ce
	}
	if c.isClosing() {
		// RFC 6455 §1.4: after sending a Close frame, an endpoint discards
		// the data it receives while it waits for the peer's.
		return nil
	}
	payload := m.Payload
	if !m.Compressed && int64(len(payload)) > c.limits.MaxMessageSize {
		// With permessage-deflate the decoder admits messages a little
		// over the limit for DEFLATE's framing (deflateSlack); a message
		// that came uncompressed is held to the limit here.
		return wsframe.ErrMessageTooBig
	}
	if m.Compressed {
		im, _ := h.(inflateMeter)
		if im != nil {
			im.awaitInflate()
		}
		var err error
		payload, err = c.pmd.inflate(payload, c.limits.MaxMessageSize)
		if err != nil {
			return err
		}
		defer c.pmd.release()
		if m.Opcode == wsframe.OpText && !wsframe.ValidUTF8(payload) {
			return errInvalidInflatedUTF8
		}
		if im != nil {
			im.inflated(len(payload))
		}
	}
	return h.handleMessage(m.Opcode, payload)
}

// inflateMeter is a messageHandler that bounds how fast its connection
// inflates (Limits.MaxInflateRate: a server's Peer; a client's
// connection too, which offers no permessage-deflate), on the read loop:
// awaitInflate is called before a permessage-deflate message is
// inflated, and may pause the loop, and inflated is told what it
// inflated to.
type inflateMeter interface {
	awaitInflate()
	inflated(n int)
}

var errInvalidInflatedUTF8 = &CloseError{Code: wsframe.CloseInvalidPayload, Reason: "WS_ERR_INVALID_UTF8"}

// The other end gone without a close frame: closed (an EOF), or reset.
var (
	errPeerClosed = &CloseError{Code: wsframe.CloseAbnormal, Reason: "connection closed without a close frame", Remote: true}
	errPeerReset  = &CloseError{Code: wsframe.CloseAbnormal, Reason: "connection reset without a close frame", Remote: true}
)

// readError turns the end of the read side into the connection's error:
// a closed or timed-out socket after this end sent a close frame is a clean
// end of the closing handshake, with the close this end sent.
func (c *wsConn) readError(err error) error {
	if sent := c.sentBeforeEnd(err); sent != nil {
		// While closing, the read deadline is the handshake's (sendClose).
		c.closeExpired = errors.Is(err, os.ErrDeadlineExceeded)
		return sent
	}
	if req := c.closeRequest.Load(); req != nil && c.closeUnawaited.Load() && errors.Is(err, os.ErrDeadlineExceeded) {
		// The wake-up of closeNow: the connection ends with this end's
		// close, which end sends.
		ce := *req
		return &ce
	}
	if derr := c.dropErr.Load(); derr != nil {
		if g, ok := (*derr).(*peerGone); ok {
			// The other end went during an inflate pause, and the
			// socket was dropped: its close, if it sent one before,
			// else 1006. Whatever the read after the drop met: a
			// closed socket, or over TLS the EOF or the reset that
			// readUnread met, which the TLS connection keeps.
			return c.closeUnread(g)
		}
	}
	if errors.Is(err, io.EOF) {
		return errPeerClosed
	}
	if errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) {
		// The other end gone without a close frame, as at an EOF: 1006,
		// as the Go client and the packet carriers read it, not the
		// socket's error with no close code.
		return errPeerReset
	}
	if derr := c.dropErr.Load(); derr != nil && errors.Is(err, net.ErrClosed) {
		return *derr
	}
	if c.aborted.Load() && errors.Is(err, net.ErrClosed) {
		// This end dropped the connection (a slow consumer's drop,
		// among others) and kept no reason of its own: the read after
		// it says only "use of closed network connection", no
		// *CloseError, where the packet carriers end such a drop with
		// errDropped.
		return errDropped
	}
	return err
}

// sendFrame queues one frame with op and payload, copied, compressing a
// data message when permessage-deflate is on and the payload is worth it.
func (c *wsConn) sendFrame(op wsframe.Opcode, payload []byte, flags wsframe.Flags) corkwriter.Status {
	bp := scratchBufs.Get().(*[]byte)
	defer scratchBufs.Put(bp)
	if c.pmd != nil && !op.IsControl() && c.pmd.worthCompressing(len(payload)) {
		c.pmd.sendMu.Lock()
		if c.takeoverRoom(len(payload)) {
			frame, ok := c.pmd.dc.AppendCompressedFrame((*bp)[:0], op, payload)
			if ok {
				*bp = frame[:0]
				st := c.sendEncoded(frame)
				c.pmd.sendMu.Unlock()
				c.lostCompressed(st)
				return st
			}
		}
		c.pmd.sendMu.Unlock()
	}
	if c.client {
		*bp = wsframe.AppendMaskedFrame((*bp)[:0], op, payload, flags, wsframe.NewMaskKey())
	} else {
		*bp = wsframe.AppendFrame((*bp)[:0], op, payload, flags)
	}
	return c.sendEncoded(*bp)
}

// sendEncoded queues a complete frame, copied. After the close frame the
// outbox refuses it with Closed (see wmu).
func (c *wsConn) sendEncoded(frame []byte) corkwriter.Status { return c.out.Send(frame) }

// sendShared queues a complete, immutable frame by reference.
func (c *wsConn) sendShared(frame []byte) corkwriter.Status { return c.out.SendShared(frame) }

// queueShared queues a room broadcast's frame by reference and leaves the
// write to the connection's flusher: the goroutine that emits to a room of
// hundreds does not pay a system call per member, the members' writes run
// in parallel, and a burst of emits leaves in one writev per member. It
// takes no lock of the connection's: a read lock per member cost about 4%
// of BenchmarkRoomEmit.
func (c *wsConn) queueShared(frame []byte) corkwriter.Status { return c.out.QueueShared(frame) }

// sendClose queues a close frame, once, and from then on refuses data
// frames. It bounds the closing handshake: the read loop ends when the
// peer's close frame arrives, or at closeTimeout, and what is queued must
// be written by then.
func (c *wsConn) sendClose(code wsframe.CloseCode, reason string) {
	c.wmu.Lock()
	if !c.markSent(code, reason) {
		c.wmu.Unlock()
		return
	}
	var frame []byte
	switch {
	case c.client:
		frame = wsframe.AppendMaskedFrame(nil, wsframe.OpClose, wsframe.AppendClosePayload(nil, code, reason), wsframe.Fin, wsframe.NewMaskKey())
	case reason == "" && wsframe.CloseFrameFor(code) != nil:
		frame = wsframe.CloseFrameFor(code)
	default:
		frame = wsframe.AppendCloseFrame(nil, code, reason)
	}
	c.out.SendLast(frame)
	// Under wmu, so that a caller woken by wakeReader, which takes wmu
	// too, puts this deadline back (takeWake).
	deadline := time.Now().Add(closeTimeout)
	c.nc.SetReadDeadline(deadline)
	c.nc.SetWriteDeadline(deadline)
	if c.shared != nil {
		c.shared.closeDeadline = deadline.UnixNano()
	}
	c.wmu.Unlock()
}

// run serves the connection until it ends and returns why. A protocol
// violation fails the connection at once (RFC 6455 §7.1.7): the close frame
// is sent and the socket closed without waiting for the peer's.
func (c *wsConn) run(h messageHandler) error {
	if c.shared != nil {
		return c.end(c.runShared(h))
	}
	return c.end(c.readLoop(h, false))
}

// errIdle is how readLoop hands an idle connection to a fresh goroutine.
var errIdle = errors.New("compat: connection idle")

// start serves the connection on goroutines of its own and calls done with
// why it ended. Each time the connection falls idle (silent for about
// idleHandoff), the goroutine that handled the last read hands over to a
// new one and exits: handling a call grows a goroutine's stack (JSON
// codecs, handlers) and the runtime keeps that size while the goroutine
// lives, so an idle connection would hold 4 KiB or more of stack. A fresh
// goroutine parked on the socket holds the minimum. The price is one
// goroutine start per idle period and one deadline update per
// idleHandoff/2 of activity.
func (c *wsConn) start(h messageHandler, done func(error)) {
	go c.serveTurns(h, done)
}

func (c *wsConn) serveTurns(h messageHandler, done func(error)) {
	err := c.readLoop(h, true)
	if err == errIdle {
		go c.serveTurns(h, done)
		return
	}
	done(c.end(err))
}

// end closes the connection after its read loop ended with err, and
// returns why it closed (closeHandshake.outcome).
func (c *wsConn) end(err error) error {
	var ce *CloseError
	if !errors.As(err, &ce) || !ce.Remote {
		c.fail(err)
		// Failed by this end for what the peer sent (a message over the
		// limit, a framing error): the rest of that message may still be
		// arriving. Closed at once with it unread, the socket sent the
		// peer a TCP RST, which discarded the close frame on its side:
		// Chromium reported 1006 instead of 1009 WS_ERR_FRAME_TOO_BIG.
		// Not after a closing handshake that ran out: the peer sent
		// nothing for closeTimeout, and lingering on a dead path made
		// Close take a second more than the handshake's bound. Nor
		// after closeNow, whose caller must not wait for the peer: its
		// peer was sending nothing this end refused.
		c.lingerOnClose = c.isClosing() && !c.closeExpired && !c.closeUnawaited.Load()
	}
	c.finish()
	return c.outcome(err)
}

// fail sends the close frame an error calls for and returns the error the
// connection ends with.
func (c *wsConn) fail(err error) error {
	var ce *CloseError
	switch {
	case errors.As(err, &ce):
		if !ce.Remote {
			c.sendClose(ce.Code, ce.Reason)
		}
	case wsframe.CloseCodeOf(err) != 0:
		var pe *wsframe.ProtocolError
		reason := ""
		if errors.As(err, &pe) {
			reason = pe.Reason
		}
		c.sendClose(wsframe.CloseCodeOf(err), reason)
	default:
		var le *segmentqueue.LimitError
		if errors.As(err, &le) {
			c.sendClose(wsframe.CloseMessageTooBig, "WS_ERR_MESSAGE_TOO_BIG")
		}
	}
	return err
}

// finish closes the socket and the outbox once. It waits, bounded, for
// the close frame to be written.
func (c *wsConn) finish() {
	c.closeOnce.Do(func() {
		if c.isClosing() {
			c.drainOutbox(time.Now().Add(closeTimeout))
		}
		c.out.Close()
		// A closing handshake that ran out ends with a FIN, not a reset
		// (abort): a peer reading a backlog slowly gets the rest of it.
		if c.lingerOnClose {
			c.lingerClose()
		}
		c.nc.Close()
		c.q.Reset()
		c.asm = nil
		if c.pmd != nil {
			c.pmd.close()
		}
		close(c.done)
	})
}

// lingerClose ends the writing side (FIN after the close frame) and reads
// and discards what the peer still sends, until it closes its side, for
// at most lingerTimeout and lingerBytes (RFC 7230 §6.6's lingering close,
// as net/http does): a socket closed with unread bytes sends an RST, and
// an RST makes the peer's stack drop what it had not read yet, the close
// frame included. Only the read loop, which has ended, reads nc.
func (c *wsConn) lingerClose() {
	cw, ok := c.nc.(interface{ CloseWrite() error })
	if !ok || cw.CloseWrite() != nil {
		return
	}
	c.nc.SetReadDeadline(time.Now().Add(lingerTimeout))
	io.CopyN(io.Discard, c.nc, lingerBytes)
}

// The bounds of lingerClose: a browser that was sending a message over
// the limit sends the rest of it and its close frame, then closes.
const (
	lingerTimeout = time.Second
	lingerBytes   = 4 << 20
)

// drainOutbox waits until the outbox has written everything queued (the
// close frame last), or the deadline passes.
func (c *wsConn) drainOutbox(deadline time.Time) {
	c.nc.SetWriteDeadline(deadline)
	t := time.NewTimer(time.Until(deadline))
	defer t.Stop()
	select {
	case <-c.out.Drained():
	case <-t.C:
	}
}

// frameHeadroom is the room a frame being built keeps in front of its
// payload for the largest header, so that the header is written in place
// when the payload is done and the payload is never moved.
const frameHeadroom = wsframe.MaxHeaderSize

var zeroHeadroom [frameHeadroom]byte

// beginFrame returns buf emptied but for the headroom of a frame header;
// the caller appends the payload.
func beginFrame(buf []byte) []byte { return append(buf[:0], zeroHeadroom[:]...) }

// sendBuilt frames and queues the binary message that follows the headroom
// of b (see beginFrame). Uncompressed, the header is written in place and
// the payload masked in place for a client; compressed, the payload is
// deflated into a scratch frame.
func (c *wsConn) sendBuilt(b []byte) corkwriter.Status {
	const op = wsframe.OpBinary
	payload := b[frameHeadroom:]
	if c.pmd != nil && c.pmd.worthCompressing(len(payload)) {
		return c.sendFrame(op, payload, wsframe.Fin)
	}
	h := wsframe.Header{Flags: wsframe.Fin, Opcode: op, Length: int64(len(payload)), Masked: c.client}
	if c.client {
		h.Key = wsframe.NewMaskKey()
		wsframe.Mask(payload, h.Key, 0)
	}
	start := frameHeadroom - wsframe.HeaderSize(h.Length, h.Masked)
	wsframe.AppendHeader(b[start:start], h)
	return c.sendEncoded(b[start:])
}

// awaitRoom waits for room for b, an answer the outbox refused. With
// context takeover too: a message is compressed only when the outbox
// takes it (takeoverRoom), so the refused answer joined no window and is
// sent again as any other (before that, a reading client was disconnected
// at the first answer its outbox refused).
func (c *wsConn) awaitRoom(b []byte, inTurn bool, deadline time.Time) bool {
	n := len(b) // the header fits the headroom
	if c.pmd != nil {
		n = deflateBound(len(b))
	}
	return awaitOutboxRoom(c.out, n, inTurn, deadline)
}

// pauseTurn runs an inflate pause with the turn's answers sent
// (pauseInTurn). A paused read loop reads nothing, so neither the read
// deadline of requestClose nor the socket that abort closes reaches it:
// both call wake (wakePause), and a pause that begins after them calls
// it at once. That the other end has gone, a FIN or a reset, is seen
// without a read where the socket can be watched for it (watchHangUp:
// on Linux, and over TLS through the TCP connection under it): it
// closes ended. The connection is then dropped (dropGone), and ends with
// 1006 as at the EOF or reset the next read would meet, or with the
// other end's close frame when one is among what it sent before it went
// (closeUnread: 1001 from a client going away, not 1006). What this end
// has not read is not handled: the pause ended with endPauses
// (pauseReading), so reading on would inflate all of it, up to a
// socket's receive buffer of bombs, unpaced. It is read, up to
// maxUnread, only to be walked frame header by frame header for a
// close frame, the other frames' payloads skipped.
//
// The watch costs a goroutine and a duplicate descriptor per pause,
// nothing per message: a pause is rare, and the watches under way at
// once are bounded (maxHangUpWatches).
func (c *wsConn) pauseTurn(wake func(), wait func(ended <-chan struct{})) {
	c.pauseWake.Store(&wake)
	defer c.pauseWake.Store(nil)
	// abort and requestClose set their flag first and look for wake
	// after; the pause keeps wake first and looks at the flags after, so
	// one of the two sees the other.
	if c.aborted.Load() || c.closeRequest.Load() != nil {
		wake()
	}
	w := watchHangUp(c.nc)
	defer func() {
		if gone := w.stop(); gone != nil {
			c.dropGone(gone)
		}
	}()
	pauseInTurn(c.out, func() { wait(w.ended()) })
}

// wakePause ends the read loop's inflate pause, if one is under way.
func (c *wsConn) wakePause() {
	if w := c.pauseWake.Load(); w != nil {
		(*w)()
	}
}

// deflateBound is the most a message of n bytes takes compressed, with
// its frame header: deflate adds 5 bytes per stored block of up to 64 KiB
// to a message that does not shrink; the rest is margin.
func deflateBound(n int) int { return n + n>>12 + 64 + wsframe.MaxHeaderSize }

// sendPrepared queues a prepared broadcast message by reference: the plain
// frame, or the compressed frame shared by every connection with the same
// permessage-deflate window (built once, by the first that needs it).
func (c *wsConn) sendPrepared(bc *broadcast) corkwriter.Status {
	p := bc.prep
	if c.pmd == nil || !c.pmd.worthCompressing(len(p.Payload())) {
		return c.queueShared(p.Frame())
	}
	c.pmd.sendMu.Lock()
	defer c.pmd.sendMu.Unlock()
	if !c.takeoverRoom(len(p.Payload())) {
		return c.queueShared(p.Frame())
	}
	frame, err := c.pmd.dc.BroadcastFrame(p)
	if err != nil {
		frame = p.Frame()
	}
	st := c.queueShared(frame)
	if err == nil {
		c.lostCompressed(st)
	}
	return st
}

// takeoverRoom reports whether a message of n bytes may be compressed now
// (c.pmd.sendMu held): always without context takeover; with it, only if
// the outbox has room for it. With context takeover a message joins this
// end's window as it is compressed, and one the outbox then refused
// (Dropped: a full outbox drops events and room emits, and the connection
// stays) was missing from the peer's window: every later message that
// referred back to it inflated, on the peer, into other bytes, without an
// error (an audit: Peer.Event and Server.Emit to a client that had
// fallen behind). Without room the message is sent plain, which joins no
// window, and the outbox refuses it or not.
func (c *wsConn) takeoverRoom(n int) bool {
	if !c.pmd.sendTakeover {
		return true
	}
	select {
	case <-c.out.Room(deflateBound(n)):
		return true
	default:
		return false
	}
}

// lostCompressed ends the connection when the outbox refused a message
// compressed with context takeover after all (another sender took the
// room after takeoverRoom): the peer's window no longer matches this
// end's, and it would inflate later messages into other bytes.
func (c *wsConn) lostCompressed(st corkwriter.Status) {
	if st == corkwriter.Dropped && c.pmd.sendTakeover {
		c.abort()
	}
}

// abort closes the socket with a reset (SO_LINGER 0), not a FIN: an
// aborted connection's peer is not reading (a slow consumer, a dead path)
// or will get nothing more, and after a FIN the kernel keeps the socket
// and what it still holds for that peer (up to the send buffer, some MiB)
// for minutes, probing a closed window (on loopback, 4 MiB still held
// after 150 s; gone at once after a reset). What was queued is dropped
// either way; the peer sees the connection end without a close frame, as
// it would after a FIN.
func (c *wsConn) abort() {
	c.aborted.Store(true)
	defer c.wakePause()
	nc := c.nc
	if tc, ok := nc.(interface{ NetConn() net.Conn }); ok { // *tls.Conn
		nc = tc.NetConn()
	}
	if l, ok := nc.(interface{ SetLinger(sec int) error }); ok {
		l.SetLinger(0)
	}
	c.nc.Close()
}

// sendDatagram: a WebSocket has no datagrams.
func (c *wsConn) sendDatagram([]byte) (corkwriter.Status, bool) { return 0, false }

// ping sends a ping frame; RFC 6455 §5.5.2: the peer "MUST send a Pong
// frame in response".
func (c *wsConn) ping() {
	if c.client {
		c.sendFrame(wsframe.OpPing, nil, wsframe.Fin)
		return
	}
	c.sendShared(wsframe.FramePing)
}

// refuse sends a close frame on a connection that was never served, and
// closes it.
func (c *wsConn) refuse(code wsframe.CloseCode, reason string) {
	c.sendClose(code, reason)
	c.finish()
}

func (c *wsConn) maxPacket() int      { return 0 }
func (c *wsConn) liveness() *liveness { return &c.live }
func (c *wsConn) carrier() Carrier    { return CarrierWebSocket }

// tlsConn is a connection over TLS: a *tls.Conn, or any connection that
// reports a TLS state as one does.
type tlsConn interface{ ConnectionState() tls.ConnectionState }

// maxConnWrappers bounds how many NetConn wrappers findTLS looks through:
// a wrapper whose NetConn returns itself, or a cycle, must not loop.
const maxConnWrappers = 8

// findTLS returns the TLS connection nc runs over: nc itself, or one
// under the wrappers a listener or middleware put around it (a byte
// counter, a rate limiter), found through the NetConn method that
// *tls.Conn has and such wrappers conventionally keep. Without it, a
// wss:// client served through a wrapping listener was taken for a plain
// one by Peer.Encrypted, and Authenticate saw no r.TLS. A wrapper without
// NetConn hides what it wraps.
func findTLS(nc net.Conn) (tlsConn, bool) {
	for range maxConnWrappers {
		if tc, ok := nc.(tlsConn); ok {
			return tc, true
		}
		w, ok := nc.(interface{ NetConn() net.Conn })
		if !ok {
			return nil, false
		}
		if nc = w.NetConn(); nc == nil {
			return nil, false
		}
	}
	return nil, false
}

// encrypted reports whether the connection runs over TLS: Serve over
// tls.NewListener (with any wrappers findTLS sees through), or the
// connection ServeHTTP hijacks from an http.Server serving TLS.
func (c *wsConn) encrypted() bool {
	_, ok := findTLS(c.nc)
	return ok
}

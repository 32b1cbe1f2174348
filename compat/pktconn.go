package compat

import (
	"errors"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hotpath-go/hotpath/corkwriter"
	"github.com/hotpath-go/hotpath/segmentqueue"
	"github.com/hotpath-go/hotpath/wsframe"
)

// pktTransport is the carrier connection under a pktConn: what it offers
// beyond the control stream or channel the packets travel on.
type pktTransport interface {
	carrier() Carrier
	// encrypted reports whether the carrier connection is encrypted.
	encrypted() bool
	// closeTransport ends the carrier connection, telling the other end
	// code and reason where the carrier can (QUIC's CONNECTION_CLOSE).
	closeTransport(code wsframe.CloseCode, reason string)
	// closeErrorOf recovers the close code a carrier's error carries (a
	// QUIC application error), or returns nil.
	closeErrorOf(err error) *CloseError
	// carriesCloseCode reports whether closing the carrier tells the other
	// end the close code (QUIC's CONNECTION_CLOSE); without, the close
	// notice must be answered before closing.
	carriesCloseCode() bool
	// sendDatagram sends pkt in one datagram; ok is false when the carrier
	// has none or pkt does not fit one. pkt is the caller's no more (see
	// link.sendDatagram).
	sendDatagram(pkt []byte) (st corkwriter.Status, ok bool)
	// receiveDatagrams delivers received datagrams until the carrier
	// closes; a carrier without datagrams returns at once, and one whose
	// datagrams are read already, from before the connection existed
	// (SCTP, WebRTC), returns once it has handed them deliver.
	receiveDatagrams(deliver func(pkt []byte))
}

// keepDeliver stores deliver in slot, where a transport that reads its
// datagrams from before the connection exists (SCTP, WebRTC) looks for
// the connection's function, and reports whether the transport is still
// open. receiveDatagrams runs on a goroutine of its own (pktConn.run),
// maybe after the close, which let go of the function (see
// rtcTransport.close): then it lets go of it again and reports false.
func keepDeliver(slot *atomic.Pointer[func([]byte)], closed <-chan struct{}, deliver func([]byte)) bool {
	slot.Store(&deliver)
	select {
	case <-closed:
		slot.Store(nil)
		return false
	default:
		return true
	}
}

// strayStreamWatcher is a carrier on which the other end can open streams
// this end never takes (QUIC's unidirectional streams, and on a client any
// stream the server opens). Left unaccepted, each would hold its flow
// control window of data for the life of the connection: the first one
// closes the connection with 1002 HP_ERR_UNEXPECTED_STREAM, as on SCTP.
type strayStreamWatcher interface {
	refuseStrayStreams(c *pktConn, server bool)
}

// handshakeCloser is a carrier with quicker ways to close once the
// closing handshake is complete: closeAfterHandshake once this end's close
// notice was answered (the other end has read everything before it),
// closeClosed once this end answered the other's and the other end then
// closed the carrier (nothing is left to say on it); or once it ran out:
// closeUnanswered when this end's notice went unanswered for closeTimeout,
// which must not wait for the other end again (a dead path).
type handshakeCloser interface {
	closeAfterHandshake()
	closeClosed()
	closeUnanswered(code wsframe.CloseCode, reason string)
}

// msgChannel is a message carrier: one packet per message (a WebRTC data
// channel).
type msgChannel interface {
	// readMessage reads one message into p; io.ErrShortBuffer when p
	// cannot hold it, which it keeps for the next read (pion does).
	readMessage(p []byte) (n int, text bool, err error)
	writeMessage(p []byte) error
	// buffered is the number of bytes written and not yet sent.
	buffered() int
}

// datagramHandler receives packets that arrived as datagrams, off the
// read loop and concurrently with it: on the carrier's datagram reader
// (QUIC), or on the connection's datagram inbox (SCTP, WebRTC:
// datagramInbox).
type datagramHandler interface {
	handleDatagram(pkt []byte) error
}

// pktConn is the engine of every carrier but WebSocket: packets framed by
// a length prefix on a byte stream (QUIC, WebTransport and SCTP streams),
// or one per message on a message channel (WebRTC data channels), with the
// close notices of PROTOCOL.md §8.3 in place of WebSocket close frames.
//
// On a byte stream, writes go through a corkwriter.Outbox, as on
// WebSocket: the answers to what one read brought leave in one write, and
// room broadcasts are queued by reference to one shared length-prefixed
// packet. Reads go into pooled buffers and partial packets wait in a
// segmentqueue.
type pktConn struct {
	t pktTransport
	// The two Limits it reads, not the whole struct: a field added to
	// Limits would take every connection's pktConn up a size class.
	maxMessage int64 // Limits.MaxMessageSize
	maxOutbox  int   // Limits.MaxOutboxBytes
	client     bool  // this end is the client: its turns never wait (uncork)
	hdr        uint8 // need's prefix length: beside client, it takes no room
	// writeEnded: a turn's answers met the end of the connection; the
	// read loop reads on only for a close notice (turn). Owned by the
	// read loop; beside client too.
	writeEnded bool
	// dropped: this end dropped the carrier without a closing handshake
	// (abort, writeFailed), and with which close (dropNoNotice,
	// dropWithRequest, and dropAfterWrite): the read loop ends with it
	// (readError), not with the carrier's error that the drop left. Set
	// once, before the carrier is closed; in the padding after writeEnded.
	dropped atomic.Uint32

	// A byte stream: r and the outbox on its writer, the queue of a
	// partial packet, and its size (need, prefix included, and hdr)
	// once the prefix is read.
	r    io.Reader
	out  *corkwriter.Outbox
	q    segmentqueue.Queue
	need int
	// pauseWake ends the read loop's inflate pause while one is under
	// way (pauseTurn); nil otherwise. A close asked for off the read loop
	// calls it (wakePause): a violation in a datagram or a binary stream
	// left the pause to run its time.
	pauseWake atomic.Pointer[func()]

	// A message channel, or nil.
	ch msgChannel

	live liveness

	// closeHandshake's wmu orders the close notice after every packet:
	// senders hold it shared while they check closing and queue,
	// sendClose exclusively.
	closeHandshake
	killer *time.Timer // aborts the link when the closing handshake stalls

	closeRequest atomic.Pointer[CloseError]
	inTurn       atomic.Bool

	closeOnce sync.Once
	done      chan struct{}
}

// newStreamConn returns the engine of a connection whose packets travel
// length-prefixed on the byte stream rw.
func newStreamConn(t pktTransport, rw io.ReadWriter, limits Limits) *pktConn {
	c := &pktConn{t: t, r: rw, maxMessage: limits.MaxMessageSize, maxOutbox: limits.MaxOutboxBytes, done: make(chan struct{})}
	c.q = *segmentqueue.New(segmentqueue.Limits{MaxBytes: int(limits.MaxMessageSize) + maxPrefixLen + readBufSize + largeReadSize})
	c.out = corkwriter.NewOutbox(rw, &corkwriter.OutboxOptions{
		MaxQueued: limits.MaxOutboxBytes,
		Overflow:  corkwriter.DropOnBackpressure,
		OnError:   func(error) { c.writeFailed() },
	})
	c.live.touch()
	return c
}

// newMessageConn returns the engine of a connection whose packets travel
// one per message on ch.
func newMessageConn(t pktTransport, ch msgChannel, limits Limits) *pktConn {
	c := &pktConn{t: t, ch: ch, maxMessage: limits.MaxMessageSize, maxOutbox: limits.MaxOutboxBytes, done: make(chan struct{})}
	c.live.touch()
	return c
}

func (c *pktConn) carrier() Carrier    { return c.t.carrier() }
func (c *pktConn) encrypted() bool     { return c.t.encrypted() }
func (c *pktConn) liveness() *liveness { return &c.live }

// maxPacket is a data channel message's limit; streams have none.
func (c *pktConn) maxPacket() int {
	if c.ch != nil {
		return maxChannelMessage
	}
	return 0
}

// start serves the link on a goroutine of its own.
func (c *pktConn) start(h messageHandler, done func(error)) {
	go func() { done(c.run(h)) }()
}

// run serves the link until it ends and returns why.
func (c *pktConn) run(h messageHandler) error {
	if dh, ok := h.(datagramHandler); ok {
		deliver := func(pkt []byte) { c.onDatagram(dh, pkt) }
		if _, shared := c.t.(sharedWindowDatagrams); shared {
			deliver = c.newDatagramInbox(dh).deliver
		}
		go c.t.receiveDatagrams(deliver)
	}
	_, server := h.(*Peer)
	if sa, ok := c.t.(streamAcceptor); ok && server {
		go sa.acceptStreams(h.(*Peer))
	}
	if sw, ok := c.t.(strayStreamWatcher); ok {
		go sw.refuseStrayStreams(c, server)
	}
	var err error
	if c.ch != nil {
		err = c.readMessages(h)
	} else {
		err = c.readStream(h)
	}
	return c.outcome(c.end(h, err))
}

// readStream reads and handles packets from a byte stream until it ends.
// Handlers run on this goroutine; what they queue on the outbox during one
// read leaves in one write at the end of that read.
//
// While no packet is partly read, a read goes into a pooled buffer and is
// decoded in place. A packet left partial is finished in the queue: reads
// fill it straight after the bytes it holds (segmentqueue.Fill), in one
// buffer reserved for the whole packet when it is at most largeReadSize,
// so that a packet arriving a QUIC packet at a time costs no copy beyond
// the kernel's and no buffer per read.
func (c *pktConn) readStream(h messageHandler) error {
	for {
		if c.q.Len() > 0 {
			if c.need > 0 && c.need <= largeReadSize {
				if err := c.q.Reserve(c.need); err != nil {
					return errMessageTooBig
				}
			}
			n, err := c.q.Fill(c.r)
			var herr error
			if n > 0 {
				herr = c.turn(func() error { return c.drainQueue(h) })
			}
			if herr != nil {
				return herr
			}
			if err != nil {
				var le *segmentqueue.LimitError
				if errors.As(err, &le) {
					return errMessageTooBig
				}
				return c.readError(err)
			}
			continue
		}
		c.q.Release()
		bp := readBufs.Get().(*[]byte)
		buf := *bp
		n, err := c.r.Read(buf)
		var herr error
		if n > 0 {
			herr = c.turn(func() error { return c.consume(buf[:n], h) })
		}
		readBufs.Put(bp)
		if herr != nil {
			return herr
		}
		if err != nil {
			return c.readError(err)
		}
	}
}

// uncork ends a read loop's turn. A server's turn waits for the peer to
// take its answers, so a peer that sends and never reads stops being
// read. A client's never does: its turn also writes the calls its callers
// queued meanwhile, and a server whose own turn waits for the client to
// read them would wait for ever while the client waited for the server
// (a robustness audit: concurrent 120 KiB calls hung SCTP connections
// until the client's IdleTimeout). What the connection does not take at
// once is written by the outbox's flusher.
func uncork(out *corkwriter.Outbox, client bool) error {
	if client {
		return out.UncorkTry()
	}
	return out.Uncork()
}

// awaitOutboxRoom is awaitRoom on an outbox, for a frame of up to n
// bytes: in a turn, the outbox is uncorked so that the turn's answers so
// far leave, and corked again for the rest of the turn. They leave through
// a flusher (UncorkTry), not inline: an inline write waits for the socket
// without a bound, and a peer that reads nothing held the turn until
// IdleTimeout and closeTimeout had passed, not the deadline.
func awaitOutboxRoom(out *corkwriter.Outbox, n int, inTurn bool, deadline time.Time) bool {
	if inTurn {
		out.UncorkTry()
		defer out.Cork()
	}
	t := time.NewTimer(time.Until(deadline))
	defer t.Stop()
	select {
	case <-out.Room(n):
		return out.Err() == nil
	case <-t.C:
		return false
	}
}

// pauseInTurn runs wait in a read loop's turn with the outbox, if any,
// uncorked: the turn's answers so far leave meanwhile, through a flusher
// as in awaitOutboxRoom, and the outbox is corked again for the rest of
// the turn. A message channel sends at once: nothing waits for the turn.
func pauseInTurn(out *corkwriter.Outbox, wait func()) {
	if out != nil {
		out.UncorkTry()
		defer out.Cork()
	}
	wait()
}

// pauseTurn runs an inflate pause (pauseInTurn), which wake ends should
// the link be closed off the read loop meanwhile, and the end of the
// carrier connection, where the carrier tells of it (transportEnd). A
// close asked for before wake was kept ends it at once: the close stores
// first and looks for wake after, the pause keeps wake first and looks
// for the close after, so one of the two sees the other.
func (c *pktConn) pauseTurn(wake func(), wait func(ended <-chan struct{})) {
	c.pauseWake.Store(&wake)
	defer c.pauseWake.Store(nil)
	if c.closeRequest.Load() != nil || c.isClosing() {
		wake()
	}
	var ended <-chan struct{}
	if e, ok := c.t.(transportEnd); ok {
		ended = e.ended()
	}
	pauseInTurn(c.out, func() { wait(ended) })
}

// wakePause ends the read loop's inflate pause, if one is under way: the
// link is closing, or dropped, off the read loop.
func (c *pktConn) wakePause() {
	if w := c.pauseWake.Load(); w != nil {
		(*w)()
	}
}

// transportEnd is a carrier that tells when its connection ends, closed
// by either end or dead, without a read: the QUIC connection's or the
// WebTransport session's context, the SCTP association's or the WebRTC
// peer connection's end. An inflate pause ends with it.
type transportEnd interface {
	ended() <-chan struct{}
}

// turn runs the handling of one read, corked: everything the handlers send
// meanwhile leaves in one write when it ends. A close asked for by another
// goroutine meanwhile is sent after the turn's answers.
func (c *pktConn) turn(handle func() error) error {
	c.live.touch()
	c.inTurn.Store(true)
	if c.out != nil {
		c.out.Cork()
	}
	err := handle()
	if c.out != nil {
		if werr := uncork(c.out, c.client); err == nil && werr != nil {
			// The turn's answers met the end of the connection, whose
			// carrier the outbox's failure dropped (OnError). What the
			// other end sent before it went is read still, for its close
			// notice, which says why; nothing else of it is handled
			// (deliver). An SCTP client that closed before the server's
			// capabilities (Client.Close, link.closeNow) sent its notice
			// and shut the association down: the answer to its
			// capabilities met the shutdown, and the server ended with
			// that write's error, the notice unread
			// (TestCloseWhileAwaitingCapabilitiesSendsItsClose). Without
			// a notice the reading ends as the write did (readError).
			c.writeEnded = true
		}
	}
	c.inTurn.Store(false)
	if req := c.closeRequest.Load(); req != nil {
		c.sendClose(req.Code, req.Reason)
	}
	return err
}

// consume handles every packet in b, read into an empty queue, in place,
// and copies a trailing partial packet into the queue, so the caller may
// reuse b.
func (c *pktConn) consume(b []byte, h messageHandler) error {
	for len(b) > 0 {
		length, n, err := parsePrefix(b)
		if err != nil {
			return err
		}
		if n == 0 {
			break
		}
		if length > uint64(c.maxMessage) {
			return errMessageTooBig
		}
		total := n + int(length)
		if len(b) < total {
			c.need, c.hdr = total, uint8(n)
			break
		}
		if err := c.deliver(b[n:total], h); err != nil {
			return err
		}
		b = b[total:]
	}
	if len(b) > 0 {
		if _, err := c.q.Write(b); err != nil {
			return errMessageTooBig
		}
	}
	return nil
}

// drainQueue handles the packets complete in the queue.
func (c *pktConn) drainQueue(h messageHandler) error {
	for {
		if c.need == 0 {
			k := min(c.q.Len(), maxPrefixLen)
			if k == 0 {
				return nil
			}
			var scratch [maxPrefixLen]byte
			head, err := c.q.Peek(k, scratch[:])
			if err != nil {
				return err
			}
			length, n, err := parsePrefix(head)
			if err != nil {
				return err
			}
			if n == 0 {
				return nil
			}
			if length > uint64(c.maxMessage) {
				return errMessageTooBig
			}
			c.need, c.hdr = n+int(length), uint8(n)
		}
		if c.q.Len() < c.need {
			return nil
		}
		m, err := c.q.Next(c.need)
		if err != nil {
			return err
		}
		hdr := c.hdr
		c.need, c.hdr = 0, 0
		if err := c.deliver(m[hdr:], h); err != nil {
			return err
		}
	}
}

// readMessages reads and handles packets from a message channel, one per
// message, until it ends.
func (c *pktConn) readMessages(h messageHandler) error {
	// A message is read whole, up to the largest the channel takes, so
	// that a packet over MaxMessageSize is read, and so consumed, before
	// it is refused: the channel then still carries the close notices.
	small := make([]byte, channelReadSize)
	for {
		buf, n, text, release, err := readChannelMessage(c.ch.readMessage, small)
		switch {
		case errors.Is(err, io.ErrShortBuffer):
			err = errMessageTooBig
		case err != nil:
			err = c.readError(err)
		case text:
			err = errTextOnChannel
		case int64(n) > c.maxMessage:
			err = errMessageTooBig
		default:
			// Handlers keep nothing of buf past the turn (a raw request
			// is valid until its handler returns; Async copies).
			err = c.turn(func() error { return c.deliver(buf[:n], h) })
		}
		release()
		if err != nil {
			return err
		}
	}
}

// maxChannelMessage bounds a packet on a message channel: 256 KiB, the
// largest SCTP message Chromium's data channels accept
// (a=max-message-size).
const maxChannelMessage = 256 << 10

// channelReadSize is the buffer a message channel's reader holds, waiting
// for a message, for the life of the channel; a larger message is read
// into a pooled buffer of maxChannelMessage (readChannelMessage). Every
// WebRTC connection held two buffers of maxChannelMessage instead (the
// control and the unreliable channel's), 512 KiB, idle or not.
const channelReadSize = readBufSize

// channelBufs are buffers of maxChannelMessage bytes, for messages larger
// than channelReadSize.
var channelBufs = sync.Pool{New: func() any { b := make([]byte, maxChannelMessage); return &b }}

func noRelease() {}

// readChannelMessage reads one message with read into small or, when
// small cannot hold it (read keeps it then), into a buffer of
// maxChannelMessage from channelBufs, which release gives back once the
// message is no longer used. io.ErrShortBuffer is a message over
// maxChannelMessage.
func readChannelMessage(read func([]byte) (int, bool, error), small []byte) (buf []byte, n int, text bool, release func(), err error) {
	n, text, err = read(small)
	if !errors.Is(err, io.ErrShortBuffer) {
		return small, n, text, noRelease, err
	}
	bp := channelBufs.Get().(*[]byte)
	n, text, err = read(*bp)
	return *bp, n, text, func() { channelBufs.Put(bp) }, err
}

// deliver handles one packet: a close notice here, anything else in h.
func (c *pktConn) deliver(pkt []byte, h messageHandler) error {
	if isCloseNotice(pkt) {
		return c.onCloseNotice(pkt)
	}
	if c.isClosing() || c.writeEnded {
		// As after a WebSocket close frame (RFC 6455 §1.4), an end that
		// sent its close notice discards what it receives meanwhile; so
		// does one that can no longer answer.
		return nil
	}
	return h.handleMessage(wsframe.OpBinary, pkt)
}

// onCloseNotice answers the other end's close notice with one of its own,
// echoing the code as RFC 6455 §5.5.1 has it for close frames, and ends the
// read loop.
func (c *pktConn) onCloseNotice(pkt []byte) error {
	ce, err := parseCloseNotice(pkt)
	if err != nil {
		return err
	}
	c.markNoticed(ce)
	code := ce.Code
	if code == wsframe.CloseNoStatus {
		code = wsframe.CloseNormal
	}
	c.sendClose(code, "")
	return ce
}

// onDatagram handles a packet that arrived as a datagram; a malformed one
// closes the connection, as on the control stream.
func (c *pktConn) onDatagram(h datagramHandler, pkt []byte) {
	c.live.touch()
	if c.isClosing() {
		return
	}
	// Held to MaxMessageSize as a control-stream packet is: the carrier
	// bounds a datagram too (about 1,200 bytes on QUIC, 256 KiB on a data
	// channel), but not to a smaller limit set here.
	if int64(len(pkt)) > c.maxMessage {
		c.failAsync(errMessageTooBig)
		return
	}
	if err := h.handleDatagram(pkt); err != nil {
		c.failAsync(err)
	}
}

// sharedWindowDatagrams is a carrier whose datagrams share the control
// stream's receive window: SCTP's unreliable stream and WebRTC's
// unreliable channel are streams of the control stream's association.
type sharedWindowDatagrams interface {
	datagramsShareWindow()
}

func (t *sctpTransport) datagramsShareWindow() {}
func (t *rtcTransport) datagramsShareWindow()  {}

// datagramInbox is the datagram reader's deliver for a connection whose
// carrier's datagrams share the control stream's window: it hands each
// packet, copied, to a goroutine of the connection's, and drops it when
// that goroutine is maxQueuedDatagrams behind. A client's listeners and a
// server's event handlers for Events that came as datagrams run on that
// goroutine (handleDatagram); run on the reader, one that held it left
// the unreliable stream unread, whose bytes then filled the association's
// window, and every call waited behind them (calls timed out on SCTP and
// WebRTC while a room listener, or on the server an event handler, held
// an unreliable packet, and went on on QUIC, whose unread datagrams are
// dropped). PROTOCOL.md §8.4: datagrams never delay the control stream.
// It costs a connection that sends datagrams a goroutine, a channel of
// 1024 slots (24 KiB) and a copy per datagram, made at its first
// datagram: most connections send none, and should not hold them idle.
// What waits is bounded by maxQueuedDatagrams, a quarter of the window
// it keeps free.
type datagramInbox struct {
	c *pktConn
	h datagramHandler
	// ch is nil until the first datagram. Only the carrier's one datagram
	// reader calls deliver, so it is made without a lock.
	ch      chan []byte
	queued  atomic.Int64 // bytes in ch
	dropped func()
}

func (c *pktConn) newDatagramInbox(h datagramHandler) *datagramInbox {
	ib := &datagramInbox{c: c, h: h, dropped: func() {}}
	// A server counts what it drops as the client's events and emits it
	// drops for other reasons (Metrics.DroppedEvents); a client, in
	// ClientMetrics.DroppedDatagrams.
	if d, ok := h.(datagramDropCounter); ok {
		ib.dropped = d.datagramDropped
	}
	return ib
}

func (ib *datagramInbox) deliver(pkt []byte) {
	ib.c.live.touch()
	if ib.ch == nil {
		ib.ch = make(chan []byte, 1024)
		go ib.run(ib.ch)
	}
	n := int64(len(pkt))
	if ib.queued.Add(n) > maxQueuedDatagrams {
		ib.queued.Add(-n) // dropped, as a datagram may be
		ib.dropped()
		return
	}
	select {
	case ib.ch <- append([]byte(nil), pkt...):
	default:
		ib.queued.Add(-n)
		ib.dropped()
	}
}

// run handles what the inbox holds until the connection ends.
func (ib *datagramInbox) run(ch chan []byte) {
	for {
		select {
		case pkt := <-ch:
			ib.queued.Add(-int64(len(pkt)))
			ib.c.onDatagram(ib.h, pkt)
		case <-ib.c.done:
			return
		}
	}
}

// datagramDropCounter is a datagram handler that counts the datagrams a
// full inbox drops.
type datagramDropCounter interface {
	datagramDropped()
}

func (p *Peer) datagramDropped() { p.srv.metrics.droppedEvents.Add(1) }

// failAsync closes the connection for an error found off the read loop.
func (c *pktConn) failAsync(err error) {
	var ce *CloseError
	if !errors.As(err, &ce) {
		ce = &CloseError{Code: wsframe.CloseInternalError, Reason: "HP_ERR_INTERNAL"}
	}
	c.violate(ce.Code, ce.Reason)
}

// datagramTooBig ends the connection of a carrier whose datagram reader
// met a message larger than it reads (over the size this end announced):
// pion keeps such a message at the head of its stream or channel, which
// would come back at once on every read, for ever, and hold the
// association's receive window. A violation (1009) once link, the
// connection's pktConn, exists; before, the carrier is closed.
func datagramTooBig(link *pktConn, t pktTransport) {
	if link != nil {
		link.violate(wsframe.CloseMessageTooBig, "HP_ERR_MESSAGE_TOO_BIG")
	} else {
		t.closeTransport(wsframe.CloseAbnormal, "")
	}
}

// violate closes the connection for a protocol violation found off the
// read loop, as end does for one the read loop finds (PROTOCOL.md §8.3):
// the close notice and then, on a carrier whose close carries the code
// (QUIC), the carrier at once. Waiting for the answer held a
// peer that never gave one for closeTimeout.
func (c *pktConn) violate(code wsframe.CloseCode, reason string) {
	c.sendClose(code, reason)
	c.wakePause()
	if c.t.carriesCloseCode() {
		c.t.closeTransport(code, reason)
	}
}

func (c *pktConn) isClosing() bool {
	c.wmu.RLock()
	defer c.wmu.RUnlock()
	return c.closing
}

// sendBuilt queues the packet that follows the headroom of b: on a stream
// with its length prefix written in place in the headroom.
func (c *pktConn) sendBuilt(b []byte) corkwriter.Status {
	pkt := b[frameHeadroom:]
	if c.ch != nil {
		return c.sendMessage(pkt)
	}
	start := frameHeadroom - prefixLen(len(pkt))
	putPrefix(b[start:frameHeadroom], len(pkt))
	c.wmu.RLock()
	if c.closing {
		c.wmu.RUnlock()
		return corkwriter.Closed
	}
	// Off the read loop (a client's call, an Async answer) the packet is
	// tried on the sender's goroutine, as a WebSocket's is: every
	// carrier's stream is a corkwriter.TryWriter (deadlineTried), so the
	// sender never waits for a peer that stopped reading.
	st := c.out.Send(b[start:])
	c.wmu.RUnlock()
	return st
}

func (c *pktConn) awaitRoom(b []byte, inTurn bool, deadline time.Time) bool {
	if c.out != nil {
		return awaitOutboxRoom(c.out, len(b), inTurn, deadline) // its length prefix fits the headroom
	}
	// A message channel (WebRTC): pion's writes never wait and tell no
	// one when its queue shrinks but one callback, which is the
	// application's to set; this rare path polls it, a millisecond at
	// least each time, so that a retry that fails again cannot spin.
	for {
		time.Sleep(time.Millisecond)
		if c.channelHasRoom(len(b)) {
			return true
		}
		if time.Now().After(deadline) || c.isClosing() {
			return false
		}
	}
}

// putPrefix writes n as a uvarint filling dst, which is prefixLen(n) long.
func putPrefix(dst []byte, n int) {
	for i := range dst[:len(dst)-1] {
		dst[i] = byte(n) | 0x80
		n >>= 7
	}
	dst[len(dst)-1] = byte(n)
}

// sendPrepared queues a room broadcast: on a stream by reference to the
// length-prefixed packet all stream members share, with QueueShared, as
// the WebSocket path does, so the write runs on this connection's flusher
// and never on the broadcaster's goroutine. (A stream's outbox cannot try
// a write, so SendShared would hand it over too; QueueShared says so and
// stays so if a stream writer ever can.)
func (c *pktConn) sendPrepared(bc *broadcast) corkwriter.Status {
	if c.ch != nil {
		return c.sendMessage(bc.pkt)
	}
	frame := bc.streamFrame()
	c.wmu.RLock()
	defer c.wmu.RUnlock()
	if c.closing {
		return corkwriter.Closed
	}
	return c.out.QueueShared(frame)
}

// sendMessage writes one packet as one message. A channel that has more
// than MaxOutboxBytes waiting refuses it (Dropped), as a full outbox does.
func (c *pktConn) sendMessage(pkt []byte) corkwriter.Status {
	c.wmu.RLock()
	defer c.wmu.RUnlock()
	if c.closing {
		return corkwriter.Closed
	}
	return c.writeMessage(pkt)
}

func (c *pktConn) writeMessage(pkt []byte) corkwriter.Status {
	if len(pkt) > maxChannelMessage {
		return corkwriter.Dropped
	}
	if !c.channelHasRoom(len(pkt)) {
		return corkwriter.Dropped
	}
	if err := c.ch.writeMessage(pkt); err != nil {
		go c.writeFailed()
		return corkwriter.Closed
	}
	return corkwriter.Sent
}

// channelHasRoom reports whether a message channel takes n more bytes:
// it holds nothing, or at most MaxOutboxBytes with them, as an outbox
// would (which always takes a frame when empty).
func (c *pktConn) channelHasRoom(n int) bool {
	b := c.ch.buffered()
	return b == 0 || b+n <= c.maxOutbox
}

func (c *pktConn) sendDatagram(pkt []byte) (corkwriter.Status, bool) {
	if c.isClosing() {
		return corkwriter.Closed, true
	}
	return c.t.sendDatagram(pkt)
}

// ping sends a Ping packet, which the other end answers with a Pong
// (PROTOCOL.md §4.8): these carriers have no ping frame. It never writes
// on the caller's goroutine, the keepalive's of every connection: a write
// to a peer that stopped answering may wait until the connection ends
// (an SCTP association has no timeout of its own), and the keepalive that
// would end it would wait with it.
func (c *pktConn) ping() {
	if c.ch != nil {
		c.sendMessage(pingPacket) // never waits: a full channel drops it
		return
	}
	c.wmu.RLock()
	defer c.wmu.RUnlock()
	if !c.closing {
		c.out.QueueShared(pingFrame)
	}
}

var (
	pingPacket = []byte{8}
	pingFrame  = []byte{1, 8} // length-prefixed on a stream
)

// requestClose closes the link with code after the answers of the turn in
// progress, if any: the read loop sends the close notice when the turn
// ends, or this goroutine does when no turn is in progress.
func (c *pktConn) requestClose(code wsframe.CloseCode, reason string) {
	if !c.closeRequest.CompareAndSwap(nil, &CloseError{Code: code, Reason: reason}) {
		return
	}
	c.wakePause()
	if !c.inTurn.Load() {
		c.sendClose(code, reason)
		return
	}
	// A turn waits for the carrier to take its answers, so a peer that
	// sends and never reads could hold it, and the connection, forever
	// (TestQUICCallerThatNeverReads): the turn gets closeTimeout, then the
	// carrier is closed, with the code where it carries one.
	time.AfterFunc(closeTimeout, func() {
		select {
		case <-c.done: // ended meanwhile
		default:
			if !c.isClosing() {
				c.t.closeTransport(code, reason)
			}
		}
	})
}

// closeNow sends the close notice after what is queued, waits, bounded,
// for the outbox to write it, and closes the carrier with code, without
// waiting for the answer, as a violation does on a carrier whose close
// carries the code (violate). The carrier's close delivers the notice
// where its close carries no code: SCTP's graceful shutdown delivers
// what was written, and a WebRTC close waits for the control channel's
// delivery (rtcTransport.close). The read loop then ends at the closed
// carrier, with this end's close (outcome).
func (c *pktConn) closeNow(code wsframe.CloseCode, reason string) {
	c.sendClose(code, reason)
	c.wakePause()
	if c.out != nil {
		drainOutbox(c.out, time.Now().Add(closeTimeout))
	}
	c.t.closeTransport(code, reason)
}

// sendClose queues the close notice, once, and from then on refuses
// packets. The closing handshake is bounded: when the other end has not
// answered within closeTimeout the link is dropped.
func (c *pktConn) sendClose(code wsframe.CloseCode, reason string) {
	c.wmu.Lock()
	if !c.markSent(code, reason) {
		c.wmu.Unlock()
		return
	}
	notice := appendCloseNotice(beginFrame(nil), code, reason)
	if c.ch != nil {
		c.writeMessage(notice[frameHeadroom:])
	} else {
		pkt := notice[frameHeadroom:]
		start := frameHeadroom - prefixLen(len(pkt))
		putPrefix(notice[start:frameHeadroom], len(pkt))
		c.out.SendShared(notice[start:])
	}
	c.killer = time.AfterFunc(closeTimeout, func() { c.closeUnanswered(code, reason) })
	c.wmu.Unlock()
}

// closeUnanswered closes the carrier once this end's close notice has
// gone unanswered for closeTimeout, the closing handshake's bound: at
// once, so that Client.Close on a dead path returns after closeTimeout on
// every carrier (a graceful SCTP shutdown or a WebRTC wait for the
// notice's delivery added a second).
func (c *pktConn) closeUnanswered(code wsframe.CloseCode, reason string) {
	if hc, ok := c.t.(handshakeCloser); ok {
		hc.closeUnanswered(code, reason)
		return
	}
	c.t.closeTransport(code, reason)
}

// refuse closes a link that is not served: the close notice, then the
// carrier, without waiting for an answer.
func (c *pktConn) refuse(code wsframe.CloseCode, reason string) {
	c.sendClose(code, reason)
	c.finish(&CloseError{Code: code, Reason: reason})
}

// abort drops the carrier connection at once. On a carrier whose close
// carries the code (QUIC, a WebTransport client), a close already asked for
// (requestClose: an idle timeout, Shutdown) keeps its code: a drop that
// overtakes that close's own bound, say an answer that found no room for
// closeTimeout in a turn the close waits out (Peer.dropSlow), ended a
// peer given up for silence with 1006 instead of 1001 HP_IDLE_TIMEOUT,
// depending on whether a keepalive ping had left a flusher writing
// (TestQUICCallerThatNeverReads).
//
// The read loop then ends with the close the carrier was dropped with
// (readError): errDropped, or the close asked for. Without it, the
// carrier's error for its own close reached OnDisconnect and a client's
// calls as it was, no *CloseError: quic-go's "Application error 0x3ee
// (local)", an empty *webtransport.SessionError, pion's "sending reset
// packet in non-established state" on WebRTC
// (TestServerDropIsCloseErrorOnEveryCarrier).
func (c *pktConn) abort() { c.drop(0) }

// writeFailed drops the carrier after a write failed on it (the outbox's
// OnError, a channel's write). The write most often met an end the other
// end made, which the reading then tells better than the drop: its close
// code (closeErrorOf) or ABORT is the connection's end, though the QUIC
// connection's context, the carrier's end (markDropped), may not have
// ended yet (TestCarrierBadInput: a client whose call over the limit the
// server closed with 1009 saw this end's 1006).
func (c *pktConn) writeFailed() { c.drop(dropAfterWrite) }

func (c *pktConn) drop(flags uint32) {
	c.wakePause()
	if req := c.closeRequest.Load(); req != nil && c.t.carriesCloseCode() {
		c.markDropped(dropWithRequest | flags)
		c.t.closeTransport(req.Code, req.Reason)
		return
	}
	c.markDropped(dropNoNotice | flags)
	c.t.closeTransport(wsframe.CloseAbnormal, "")
}

// markDropped keeps how abort drops the carrier, before it closes it; the
// first drop counts. A carrier that ended already (transportEnd), closed
// by the other end or dead, is not dropped by this end: its connection
// ends with what ended it, which a write that failed on it (the outbox's
// OnError) then drops again in vain.
func (c *pktConn) markDropped(how uint32) {
	if e, ok := c.t.(transportEnd); ok {
		select {
		case <-e.ended():
			return
		default:
		}
	}
	c.dropped.CompareAndSwap(0, how)
}

// How this end dropped its carrier (pktConn.dropped).
const (
	dropNoNotice    = 1 // closed with 1006: errDropped
	dropWithRequest = 2 // closed with the code of closeRequest
	dropAfterWrite  = 4 // flag: after a write failed (writeFailed)
)

// errDropped is the end of a connection this end dropped without a
// closing handshake (pktConn.abort): a slow consumer (Peer.dropSlow), a
// write that failed, a close that found no room. No close notice was sent
// or read: 1006, as the other end sees it (PROTOCOL.md §8.3), this end's
// (Remote false), so that every carrier reports the drop alike.
var errDropped = &CloseError{Code: wsframe.CloseAbnormal, Reason: "connection dropped by this end without a close notice"}

// dropError is the close this end dropped the carrier with (abort), or
// nil when it did not drop it; deliberate unless a write failed first.
func (c *pktConn) dropError() (ce *CloseError, deliberate bool) {
	d := c.dropped.Load()
	switch d &^ dropAfterWrite {
	case dropNoNotice:
		ce = errDropped
	case dropWithRequest:
		ce = c.closeRequest.Load()
	}
	return ce, d&dropAfterWrite == 0
}

// readError turns the end of reading into the connection's error: the
// close code the carrier brought, a clean end of a closing handshake, the
// close this end dropped the carrier with (abort), or an abnormal
// closure.
func (c *pktConn) readError(err error) error {
	if c.writeEnded {
		// Read on for a close notice that was not there: the connection
		// ends as the write that met its end did (a QUIC close without a
		// notice is 1006, not QUIC's own error; an SCTP write's, 1006
		// too: sctpWriteEndError), unless the reading brought the other
		// end's SCTP ABORT: its causes say why, where the write's error
		// says only that the association was no longer up.
		if ce := sctpAbortError(err); ce != nil {
			return ce
		}
		err = c.out.Err()
	} else if ce, deliberate := c.dropError(); ce != nil && deliberate && !c.isClosing() {
		// This end dropped a live carrier (abort, markDropped), no
		// handshake begun: whatever the reading met came of the drop. The other
		// end's close that a drop provokes is not why: a WebTransport
		// client answers the server's session close by closing its QUIC
		// connection with 1006, which closeErrorOf reads from the
		// connection, the session's close being the server's own.
		return ce
	}
	if ce := c.t.closeErrorOf(err); ce != nil {
		return ce
	}
	if sent := c.sentBeforeEnd(err); sent != nil {
		return sent
	}
	if ce := sctpAbortError(err); ce != nil {
		return ce
	}
	if ce, _ := c.dropError(); ce != nil {
		// A drop after a write failed or after a close notice, which
		// nothing above explained.
		return ce
	}
	if errors.Is(err, io.EOF) {
		return &CloseError{Code: wsframe.CloseAbnormal, Reason: "connection closed without a close notice", Remote: true}
	}
	return err
}

// end closes the link after its read loop ended with err, and returns
// err. A protocol violation is answered with a close notice first.
func (c *pktConn) end(h messageHandler, err error) error {
	var ce *CloseError
	violation := false // this end closes for what the other end sent
	switch {
	case errors.As(err, &ce):
		if dropped, _ := c.dropError(); !ce.Remote && ce != dropped { // a drop sends no notice
			c.sendClose(ce.Code, ce.Reason)
			violation = true
		}
	default:
		var le *segmentqueue.LimitError
		if errors.As(err, &le) {
			c.sendClose(wsframe.CloseMessageTooBig, "HP_ERR_MESSAGE_TOO_BIG")
			violation = true
		}
	}
	if violation && !c.t.carriesCloseCode() {
		// The close notice is the only word of the code on this carrier
		// (SCTP, WebRTC): closing at once could lose it. Read on, dropping
		// packets, until the other end answers it or closeTimeout passes.
		// After a length over the limit or a bad prefix the stream's
		// framing is lost: what follows is only discarded.
		code := wsframe.CloseMessageTooBig
		if ce != nil {
			code = ce.Code
		}
		c.readRest(h, code == wsframe.CloseMessageTooBig || code == wsframe.CloseProtocolError)
	}
	c.finish(err)
	return err
}

// readRest reads after this end sent its close notice, until the answer,
// an error, or the handshake's timeout.
// framingLost: the stream's framing is lost (a length over the limit, a
// bad prefix), so what follows cannot be parsed.
func (c *pktConn) readRest(h messageHandler, framingLost bool) {
	if c.ch != nil {
		c.readMessages(h)
		return
	}
	if framingLost || c.q.Len() > 0 {
		// The stream broke mid-packet: nothing more to parse, but
		// closing now would reset the stream under the close notice
		// before the other end read it (a WebTransport session's close
		// does). Discard what comes until the other end closes the
		// carrier, having read the notice, or the handshake's timeout
		// (the killer) closes it.
		var scratch [4096]byte
		for {
			if _, err := c.r.Read(scratch[:]); err != nil {
				return
			}
		}
	}
	c.readStream(h)
}

// finish ends the link once: it waits, bounded, for the close notice to
// be written, and closes the carrier. The end that answered a close notice
// lets the other end close the carrier first (RFC 6455 §7.1.1 has the
// server close TCP first; here the initiator of the handshake does, so
// that its close notice's answer is surely read).
func (c *pktConn) finish(err error) {
	c.closeOnce.Do(func() {
		code, reason := wsframe.CloseAbnormal, ""
		var ce *CloseError
		if errors.As(err, &ce) {
			code, reason = ce.Code, ce.Reason
		}
		c.wmu.Lock()
		closing := c.closing
		answered := closing && !c.initiated
		completed := closing && c.initiated && c.noticed // this end's notice was answered
		c.wmu.Unlock()
		if closing && c.out != nil {
			drainOutbox(c.out, time.Now().Add(closeTimeout))
		}
		carrierClosed := false // by the other end
		if answered && ce != nil && ce.Remote {
			carrierClosed = c.awaitCarrierClose(time.Now().Add(closeTimeout))
		}
		if c.killer != nil {
			c.killer.Stop()
		}
		if c.out != nil {
			c.out.Close()
		}
		hc, quick := c.t.(handshakeCloser)
		switch {
		case quick && carrierClosed:
			hc.closeClosed()
		case quick && completed:
			hc.closeAfterHandshake()
		default:
			c.t.closeTransport(code, reason)
		}
		c.q.Reset()
		close(c.done)
	})
}

// awaitCarrierClose reads and discards until the other end closes the
// carrier, or the deadline passes and this end aborts it. It reports
// whether the other end closed it.
func (c *pktConn) awaitCarrierClose(deadline time.Time) (closedByOther bool) {
	t := time.AfterFunc(time.Until(deadline), c.abort)
	defer func() { closedByOther = t.Stop() }()
	if c.ch != nil {
		buf := make([]byte, maxChannelMessage)
		for {
			if _, _, err := c.ch.readMessage(buf); err != nil {
				return
			}
		}
	}
	var scratch [512]byte
	for {
		if _, err := c.r.Read(scratch[:]); err != nil {
			return
		}
	}
}

// drainOutbox waits until out has written everything queued, or the
// deadline passes.
func drainOutbox(out *corkwriter.Outbox, deadline time.Time) {
	t := time.NewTimer(time.Until(deadline))
	defer t.Stop()
	select {
	case <-out.Drained():
	case <-t.C:
	}
}

package compat

import (
	"context"
	"errors"
	"fmt"
	"io"
	"reflect"
	"runtime/debug"
	"sync"
	"time"

	"github.com/hotpath-go/hotpath/compat/wire"
	"github.com/hotpath-go/hotpath/dispatch"
	"github.com/quic-go/quic-go"
)

// ErrStreamsUnsupported is returned by OpenStream on a carrier without
// streams of its own (WebSocket, SCTP, WebRTC): there a large transfer
// would queue the connection's calls behind it.
var ErrStreamsUnsupported = errors.New("hotpath: this carrier has no binary streams")

// rawStream is a carrier stream under a binary Stream.
type rawStream interface {
	io.Reader
	io.Writer
	// CloseWrite ends this side; the other end reads io.EOF.
	CloseWrite() error
	// Close abandons both directions.
	Close() error
	// Reset aborts both directions with an error code.
	Reset(code uint32)
	// resetCode returns the code with which the other end reset the
	// stream, when err says it did.
	resetCode(err error) (uint32, bool)
	SetReadDeadline(t time.Time) error
	SetWriteDeadline(t time.Time) error
	// Context ends when this side's writing ends: closed or reset here,
	// or stopped by the other end (its cause then says so:
	// peerStoppedReading).
	Context() context.Context
}

// peerStoppedReading reports whether cause, that of a rawStream's Context,
// is the other end's STOP_SENDING (its Stream.Close, or a reset). A
// WebTransport stream's context is its QUIC stream's, so on both carriers
// the cause is a remote *quic.StreamError.
func peerStoppedReading(cause error) bool {
	var se *quic.StreamError
	return errors.As(cause, &se) && se.Remote
}

// streamOpener is a transport on which a client opens binary streams;
// streamAcceptor one on which a server accepts them.
type (
	streamOpener interface {
		openStream(ctx context.Context) (rawStream, error)
	}
	streamAcceptor interface {
		acceptStreams(p *Peer)
	}
)

// Stream is a binary stream: raw bytes both ways, on a carrier stream of
// its own beside the connection's control stream, so an upload or a
// download never holds up a call (PROTOCOL.md §8.2), as long as its
// reader reads: unread bytes of all streams count against the
// connection's window (see QUICConfig). A client opens one
// with Client.OpenStream; the server runs the handler registered with
// HandleStream. Read and Write are those of an io.ReadWriter; a handler
// that fails resets the stream, and the other end's Read or Write then
// returns an *Error with the handler's code. When the connection ends under
// a stream, its Read and Write return what the connection's calls get:
// ErrDisconnected with the close (CloseStatus) on the client, ErrClosed on
// the server.
//
// A Stream is used by one reader and one writer at a time; Close and the
// deadlines may be set at any time, from any goroutine.
type Stream struct {
	raw rawStream
	// connectionEnded turns the carrier's error for a connection that
	// ended under the stream into the error its end reports to calls:
	// ErrClosed or ErrDisconnected with the close on the client, ErrClosed
	// on the server.
	connectionEnded func(err error) error

	mu      sync.Mutex
	writing bool // a Write is under way
	closed  bool // Close was called
}

// Read reads bytes the other end wrote; io.EOF once it called CloseWrite
// or its handler returned.
func (s *Stream) Read(p []byte) (int, error) {
	n, err := s.raw.Read(p)
	return n, s.streamError(err)
}

// Write writes bytes to the other end. It waits while the other end has
// not read enough of what came before; Close interrupts it.
func (s *Stream) Write(p []byte) (int, error) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return 0, ErrClosed
	}
	s.writing = true
	s.mu.Unlock()
	n, err := s.raw.Write(p)
	s.mu.Lock()
	s.writing = false
	s.mu.Unlock()
	return n, s.streamError(err)
}

// SetReadDeadline sets when a Read waiting for bytes gives up, with an
// error that matches os.ErrDeadlineExceeded (a net.Error whose Timeout is
// true); the zero time removes it. The stream stays usable: with a later
// deadline, or none, Read goes on where it stopped.
func (s *Stream) SetReadDeadline(t time.Time) error { return s.raw.SetReadDeadline(t) }

// SetWriteDeadline sets when a Write waiting for the other end to read
// gives up, as SetReadDeadline does for Read; the Write returns how many
// bytes it had written.
func (s *Stream) SetWriteDeadline(t time.Time) error { return s.raw.SetWriteDeadline(t) }

// SetDeadline sets both deadlines.
func (s *Stream) SetDeadline(t time.Time) error {
	return errors.Join(s.raw.SetReadDeadline(t), s.raw.SetWriteDeadline(t))
}

// CloseWrite ends this side of the stream: the other end reads io.EOF
// after the bytes written so far. After Close it returns ErrClosed, as
// Read and Write do; once the other end has stopped reading, the error a
// Write gets.
func (s *Stream) CloseWrite() error {
	if s.isClosed() {
		return ErrClosed
	}
	if err := s.raw.CloseWrite(); err != nil {
		if writeSideReset(s.raw) {
			// A Write says why: the other end's code, or the end of
			// the connection.
			if _, werr := s.raw.Write(nil); werr != nil {
				err = werr
			}
		}
		return s.streamError(err)
	}
	return nil
}

// writeSideReset reports whether raw's write side was reset, by this end
// or by the other end's STOP_SENDING (its Close, its handler returning).
// quic-go refuses to close such a side with an error of its own, "close
// called for canceled stream", that Close and CloseWrite do not pass on.
func writeSideReset(raw rawStream) bool {
	var se *quic.StreamError
	return errors.As(context.Cause(raw.Context()), &se)
}

func (s *Stream) isClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

// Close ends this side and stops reading the other. A Write under way is
// abandoned (the other end reads Canceled) rather than waited for: the
// carrier's FIN would leave it waiting as long as the other end does not
// read. The Read or Write it interrupts, and those after it, return
// ErrClosed. Closing a stream the other end has stopped reading (its
// handler returned, its Close) is not an error.
//
// Between Writes, Close ends this side as CloseWrite does: the other end
// reads io.EOF after what was written, as at the end of a whole upload.
// A writer that gives up part way (its source failed, say) calls Abort
// instead.
func (s *Stream) Close() error {
	s.mu.Lock()
	s.closed = true
	writing := s.writing
	s.mu.Unlock()
	if writing {
		s.raw.Reset(uint32(ErrCanceled.Code))
		return nil
	}
	if err := s.raw.Close(); err != nil && !writeSideReset(s.raw) {
		return err
	}
	// A side already reset has nothing left to close: the other end
	// stopped reading (a download read to its end), or an earlier Close
	// reset it.
	return nil
}

// Abort ends both sides at once, so that what was written cannot be
// taken for all there was: the other end's Read and Write return an
// *Error matching ErrCanceled (a handler's ctx ends too), never io.EOF,
// and bytes it had not read yet may be dropped. Use it for an upload or
// download cut short; Close for one that is done. The Read or Write it
// interrupts, and those after it, return ErrClosed.
func (s *Stream) Abort() { s.abort(uint32(ErrCanceled.Code)) }

// abort resets the stream with code for this end, as Close does under a
// Write: the Read or Write it interrupts, and those after it, return
// ErrClosed rather than the carrier's "canceled by local" error (which a
// handler passing it on had logged as its failure).
func (s *Stream) abort(code uint32) {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	s.raw.Reset(code)
}

func (s *Stream) streamError(err error) error {
	if err == nil || err == io.EOF {
		return err
	}
	if s.isClosed() {
		return ErrClosed
	}
	if code, ok := s.raw.resetCode(err); ok {
		return &Error{Code: code, Message: "stream reset by the other end"}
	}
	if streamConnectionEnded(err) {
		return s.connectionEnded(err)
	}
	return err
}

// streamViolation closes the connection for a server's answer to a
// stream that breaks the protocol (ce), as a malformed packet on the
// control stream or in a datagram does (PROTOCOL.md §8.5), and returns
// OpenStream's error: the one the connection's calls fail with. Such an
// answer used to leave the connection open; but the server closes a
// client's for a bad first packet on a stream, and a server that sends
// one may have lost track of the streams, or of the packets, of the rest.
func (cc *clientConn) streamViolation(pc *pktConn, ce *CloseError) error {
	pc.violate(ce.Code, ce.Reason)
	return cc.clientStreamEnded(pc)(ce)
}

// openStreamError is OpenStream's error when writing its call or reading
// the answer failed with err: ctx's, the server's reset (a handler that
// failed at once, or a stream refused unread past MaxInFlight: Overloaded),
// or the end of the connection.
func (cc *clientConn) openStreamError(ctx context.Context, pc *pktConn, raw rawStream, err error) error {
	if ctx.Err() != nil {
		return ctxError(ctx)
	}
	if code, ok := raw.resetCode(err); ok {
		return &Error{Code: code, Message: "stream reset by the server"}
	}
	if streamConnectionEnded(err) {
		return cc.clientStreamEnded(pc)(err)
	}
	return fmt.Errorf("hotpath: open stream: %w", err)
}

// clientStreamEnded is a client stream's error for the end of the
// connection under it: the error the connection's calls failed with, once
// the read loop has settled them (at once after Close, which waits for
// it), within closeTimeout.
func (cc *clientConn) clientStreamEnded(pc *pktConn) func(error) error {
	return func(err error) error {
		t := time.NewTimer(closeTimeout)
		defer t.Stop()
		select {
		case <-cc.ended:
			return cc.c.endError(cc)
		case <-t.C:
			if ce := pc.t.closeErrorOf(err); ce != nil {
				err = ce
			}
			return fmt.Errorf("%w: %w", ErrDisconnected, err)
		}
	}
}

// serverStreamEnded is a stream handler's error for the end of the
// connection under it: ErrClosed, as Peer.Event returns, with the close
// the client sent when the carrier brought one.
func serverStreamEnded(t pktTransport) func(error) error {
	return func(err error) error {
		if ce := t.closeErrorOf(err); ce != nil {
			err = ce
		}
		return fmt.Errorf("%w: %w", ErrClosed, err)
	}
}

// streamMethod is one registered stream handler, its request type erased.
type streamMethod struct {
	name string
	req  reflect.Type
	call func(ctx context.Context, codec Codec, payload []byte, s *Stream) error
}

// HandleStream registers fn as the handler of the binary streams opened
// for method name. The request is decoded as for Handle; fn then reads and
// writes the stream. When fn returns nil the stream's write side is closed
// (the client reads io.EOF) and what the client sends is no longer read
// (its Write fails: an *Error of code 0); an error resets it with the
// code a call's handler would answer for it (an *Error's, a ctx's
// deadline as Timeout, else Internal, logged). fn's ctx ends when the
// connection does, at the deadline the client opened the stream with, at
// Shutdown, and when the client stops reading the stream (its
// Stream.Close), but not once fn has closed its side (CloseWrite): what it
// does after that is not cut short. Streams count against
// Limits.MaxInFlight with Async calls, and run on goroutines of their own.
func HandleStream[Req any](r *Router, name string, fn func(ctx context.Context, req Req, s *Stream) error) {
	m := &streamMethod{
		name: name,
		req:  reflect.TypeFor[Req](),
		call: func(ctx context.Context, codec Codec, payload []byte, s *Stream) error {
			var req Req
			if err := unmarshal(codec, payload, &req); err != nil {
				return &Error{Code: ErrInvalidParams.Code, Message: "invalid params: " + err.Error()}
			}
			return fn(ctx, req, s)
		},
	}
	r.add(func() { r.streams = append(r.streams, m) })
}

// writeStreamPacket writes one length-prefixed packet to w.
func writeStreamPacket(w io.Writer, pkt []byte) error {
	b := make([]byte, 0, maxPrefixLen+len(pkt))
	b = append(appendPrefix(b, len(pkt)), pkt...)
	_, err := w.Write(b)
	return err
}

func appendPrefix(dst []byte, n int) []byte {
	l := prefixLen(n)
	dst = append(dst, make([]byte, l)...)
	putPrefix(dst[len(dst)-l:], n)
	return dst
}

// readStreamPacket reads one length-prefixed packet of at most max bytes
// from r, without reading past it: what follows is the stream's payload.
func readStreamPacket(r io.Reader, max int64) ([]byte, error) {
	var head [maxPrefixLen]byte
	for i := 0; ; i++ {
		if i == maxPrefixLen {
			return nil, errBadPrefix
		}
		if _, err := io.ReadFull(r, head[i:i+1]); err != nil {
			return nil, err
		}
		length, n, err := parsePrefix(head[:i+1])
		if err != nil {
			return nil, err
		}
		if n == 0 {
			continue
		}
		if length > uint64(max) {
			return nil, errMessageTooBig
		}
		// The buffer grows with the bytes that arrive, not with the
		// length the prefix claims: a peer that opened many streams, each
		// announcing a packet of MaxMessageSize and sending nothing more,
		// made the server allocate all of it (a gigabyte per connection
		// for 3 KB sent).
		pkt, err := io.ReadAll(io.LimitReader(r, int64(length)))
		if err == nil && uint64(len(pkt)) < length {
			err = io.ErrUnexpectedEOF
		}
		return pkt, err
	}
}

// readStreamAnswer reads the server's answer to the Call that opened a
// binary stream (PROTOCOL.md §8.5), and no byte past it: the stream's
// bytes follow. It returns nil for a Result, the server's *Error for an
// Error, a *CloseError for an answer that breaks the protocol (a bad
// length prefix 1002, a length over max 1009, a malformed or compressed
// packet, or one neither a Result nor an Error, 1008), and r's error for
// a read that failed, io.EOF or io.ErrUnexpectedEOF for a stream that
// ended first. It reads bytes alone, so FuzzStreamAnswer drives it.
func readStreamAnswer(r io.Reader, max int64) (refused *Error, err error) {
	answer, err := readStreamPacket(r, max)
	if err != nil {
		return nil, err
	}
	a, err := wire.Decode(answer)
	switch {
	case err != nil || a.Compressed || (a.Kind != dispatch.KindResult && a.Kind != dispatch.KindError):
		return nil, errMalformed
	case a.Kind == dispatch.KindError:
		return &Error{Code: a.Code, Message: string(a.Message), Data: append([]byte(nil), a.Payload...)}, nil
	}
	return nil, nil
}

// serveStream runs the handler of a binary stream the client opened. Its
// first packet is a Call naming the stream method (PROTOCOL.md §8.2); the
// answer is a Result, after which the stream is the handler's, or an
// Error, after which the stream is closed. A stream whose first packet is
// not a Call closes the whole connection, as a malformed packet does.
func (p *Peer) serveStream(t pktTransport, raw rawStream) {
	s := p.srv
	// A stream counts against MaxInFlight from the moment it is accepted,
	// before its first packet is read into memory: past the limit it is
	// reset with Overloaded unread, so that one connection's streams hold
	// at most MaxInFlight packets.
	if int(p.inflight.Add(1)) > s.opts.Limits.MaxInFlight {
		p.inflight.Add(-1)
		s.metrics.overloaded.Add(1)
		raw.Reset(uint32(ErrOverloaded.Code))
		return
	}
	defer p.inflight.Add(-1)
	raw.SetReadDeadline(time.Now().Add(handshakeTimeout))
	pkt, err := readStreamPacket(raw, s.opts.Limits.MaxMessageSize)
	raw.SetReadDeadline(time.Time{})
	if err != nil {
		raw.Reset(uint32(ErrBadRequest.Code))
		var ce *CloseError
		if errors.As(err, &ce) {
			p.closeWith(ce.Code, ce.Reason)
		}
		return
	}
	call, err := wire.Decode(pkt)
	if err != nil || call.Kind != dispatch.KindCall || call.Compressed {
		s.metrics.malformed.Add(1)
		raw.Reset(uint32(ErrBadRequest.Code))
		p.closeWith(errMalformed.Code, errMalformed.Reason)
		return
	}
	refuse := func(e *Error) {
		writeStreamPacket(raw, wire.AppendError(nil, call.ID, e.Code, e.Message, e.Data))
		raw.CloseWrite()
		raw.Close()
	}
	if s.shutting.Load() {
		refuse(ErrUnavailable)
		return
	}
	m, err := s.router.streamTable.Lookup(call.Name)
	if err != nil {
		s.metrics.unknownMethods.Add(1)
		refuse(&Error{Code: wire.CodeNotFound, Message: "stream method not found: " + string(call.Name)})
		return
	}
	if !s.admitAsync() {
		refuse(ErrUnavailable)
		return
	}
	defer s.asyncCalls.done()
	if err := writeStreamPacket(raw, wire.AppendResult(nil, call.ID, nil)); err != nil {
		raw.Close()
		return
	}
	ctx, cancel := context.WithCancel(p.ctx)
	defer cancel()
	if call.Timeout > 0 {
		ctx, cancel = context.WithTimeout(ctx, time.Duration(call.Timeout)*time.Millisecond)
		defer cancel()
	}
	// A client that stops reading (its Stream.Close) is done with the
	// stream: the handler's ctx ends, as an http.Handler's does at its
	// client's RST_STREAM, so that a handler busy with anything but the
	// stream (a query, a wait for the next chunk to send) stops too
	// rather than at its next Write.
	sctx := raw.Context()
	stopOnAbandon := context.AfterFunc(sctx, func() {
		if peerStoppedReading(context.Cause(sctx)) {
			cancel()
		}
	})
	// Shutdown ends the stream: a download or a proxied stream may last
	// as long as the connection, and Shutdown(context.Background()) waited
	// for ever for a handler that only stops on an error.
	st := &Stream{raw: raw, connectionEnded: serverStreamEnded(t)}
	stopStream := context.AfterFunc(s.stopping, func() {
		cancel()
		st.abort(uint32(ErrUnavailable.Code))
	})
	defer stopStream()
	err = p.runStream(ctx, m, call.Payload, st)
	// Stopped before this end closes the stream, which would otherwise
	// run the check on a goroutine of its own for every stream.
	stopOnAbandon()
	if err != nil {
		if errors.Is(err, ErrClosed) {
			// The connection ended under the handler, or the handler
			// closed the stream: nobody reads a code, and a handler that
			// passes its stream's error on has not failed.
			raw.Reset(uint32(ErrCanceled.Code))
			return
		}
		raw.Reset(p.handlerError(err).Code)
		return
	}
	// Close, not only CloseWrite: what the handler left unread counted
	// against the connection's flow-control window until the connection
	// ended, so that some dozens of handlers that returned without
	// reading their upload stalled every call of the connection.
	raw.Close()
}

// runStream runs a stream handler, turning a panic into ErrInternal.
func (p *Peer) runStream(ctx context.Context, m *streamMethod, payload []byte, st *Stream) (err error) {
	defer func() {
		if r := recover(); r != nil {
			p.srv.metrics.panics.Add(1)
			p.srv.opts.Logger.Error("hotpath: stream handler panicked", "method", m.name, "peer", p.id, "panic", r, "stack", string(debug.Stack()))
			err = ErrInternal
		}
	}()
	return m.call(ctx, p.codec, payload, st)
}

// OpenStream opens a binary stream for the server's stream handler of
// method, with req as its request, and returns it once the server accepted
// it. It fails with the server's *Error (NotFound, Overloaded, ...), or
// ErrStreamsUnsupported on a carrier without streams. An answer that
// breaks the protocol (malformed, compressed, neither a Result nor an
// Error, a bad length prefix or one over Limits.MaxMessageSize) closes
// the connection, as such a packet on the control stream does, and
// OpenStream fails with ErrDisconnected joined with that close (1008,
// 1002 or 1009: CloseStatus); the client reconnects by its policy.
//
// ctx bounds the opening, and so does ClientOptions.CallTimeout when ctx
// has no deadline, as they bound a call: past either, OpenStream fails
// with ErrTimeout (which matches context.DeadlineExceeded too). Canceling
// ctx later does not touch the stream. ctx's deadline,
// though, travels with the request as a call's does, and the server's
// stream handler gets it on its ctx: a handler that stops on its ctx ends
// a stream opened with a 5 s deadline after 5 s, whatever it still
// carries. Open a long transfer with a ctx without a deadline (or with one
// for the whole transfer); CallTimeout does not travel, it bounds only
// the wait for the server's answer.
func (c *Client) OpenStream(ctx context.Context, method string, req any) (*Stream, error) {
	if err := checkName("method", method); err != nil {
		return nil, err
	}
	cc, err := c.current()
	if err != nil {
		return nil, err
	}
	pc, ok := cc.link.(*pktConn)
	if !ok {
		return nil, ErrStreamsUnsupported
	}
	opener, ok := pc.t.(streamOpener)
	if !ok {
		return nil, ErrStreamsUnsupported
	}
	// The request carries ctx's own deadline only (see above); CallTimeout
	// bounds the opening alone. Without it, a server that read the call
	// and never answered held OpenStream with a ctx without deadline for
	// as long as the connection lived (a client audit).
	var timeoutMS uint32
	if d, ok := ctx.Deadline(); ok {
		timeoutMS = uint32(min(max(time.Until(d).Milliseconds(), 1), 1<<31))
	} else if c.opts.CallTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.opts.CallTimeout)
		defer cancel()
	}
	// Streams open once the server has answered on the control stream,
	// so that it cannot take a binary stream for the control stream
	// (PROTOCOL.md §8.2).
	select {
	case <-cc.ready:
	case <-cc.ended:
		return nil, c.endError(cc) // why, as a call's error says
	case <-ctx.Done():
		return nil, ctxError(ctx)
	}
	raw, err := opener.openStream(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctxError(ctx)
		}
		if streamConnectionEnded(err) {
			return nil, cc.clientStreamEnded(pc)(err)
		}
		return nil, fmt.Errorf("hotpath: open stream: %w", err)
	}
	pkt := wire.AppendCall(nil, dispatch.KindCall, 1, method, timeoutMS, nil)
	if pkt, err = marshal(c.opts.Codec, pkt, req); err != nil {
		raw.Close()
		return nil, err
	}
	stop := context.AfterFunc(ctx, func() { raw.Reset(uint32(ErrCanceled.Code)) })
	defer stop()
	if err := writeStreamPacket(raw, pkt); err != nil {
		raw.Close()
		return nil, cc.openStreamError(ctx, pc, raw, err)
	}
	refused, err := readStreamAnswer(raw, c.opts.Limits.MaxMessageSize)
	if err != nil {
		raw.Close()
		if ce, ok := errors.AsType[*CloseError](err); ok {
			return nil, cc.streamViolation(pc, ce)
		}
		return nil, cc.openStreamError(ctx, pc, raw, err)
	}
	if refused != nil {
		raw.Close()
		return nil, refused
	}
	if !stop() {
		// ctx ended after the answer came: its reset has hit the stream.
		raw.Close()
		return nil, ctxError(ctx)
	}
	return &Stream{raw: raw, connectionEnded: cc.clientStreamEnded(pc)}, nil
}

// Package wsframe encodes and decodes RFC 6455 WebSocket frames without
// owning a socket.
//
// Pick wsframe when you run your own server loop (goroutine per connection,
// an epoll event loop, a QUIC or SCTP stream) and want the framing rules of
// RFC 6455 enforced, with the close code to send on every violation, and no
// dependency beyond the standard library. It does not do the HTTP upgrade
// handshake, compression or writing: those belong to the server around it
// (deflatecache adds permessage-deflate on top of Prepared and the RSV1 bit
// the Decoder reports).
//
// # Decoding
//
// A Decoder is fed bytes and returns frames (DecodeFrame, NextFrame) or whole
// messages (DecodeMessage, NextMessage), or ErrNeedMore with Need telling how
// many more bytes the next step needs. It reads from a plain slice, or from a
// Source, the small subset of segmentqueue.Queue it needs, so an event loop
// can push its read buffers into a queue and decode from it without copying.
// Reader is the convenience for code that has an io.Reader instead.
//
// Payloads are unmasked in place. A message of one frame is returned as a
// slice of the input: no copy at all when it sits in one buffer or segment.
// The fragments of a fragmented message are copied once into an assembly
// buffer the caller passes and reuses, so a server that reuses its buffers
// allocates nothing per message. Control frames that arrive between the
// fragments of a message are returned as they come (answer a ping with
// AppendFrame(dst, OpPong, m.Payload, Fin)); a close frame is parsed and
// validated into Message.CloseCode.
//
// # Errors and limits
//
// Every violation is one of the *ProtocolError values of this package,
// carrying the close code to send (1002, 1007 or 1009) and a stable reason
// such as "WS_ERR_INVALID_UTF8"; CloseCodeOf extracts the code from any
// error, CloseFrameFor returns the precompiled close frame to write. The
// error is sticky: a connection that broke the protocol is done.
//
// Config bounds one frame, one message and the number of fragments of one
// message (a flood of tiny fragments costs CPU, not memory, so it needs its
// own limit). The defaults, 1 MiB and 1024 fragments, suit a realtime
// server; each limit is checked on the frame header, so an oversized frame
// is refused before a byte of its payload is buffered.
//
// Text is validated as UTF-8 as it arrives, even inside a frame whose end
// has not arrived yet: the connection fails at the first byte that makes the
// text invalid (what the Autobahn 6.4.x cases call fail-fast), and a
// character split across fragments is carried over.
//
// # Encoding
//
// AppendFrame, AppendMaskedFrame, AppendHeader and AppendCloseFrame append
// to the caller's buffer, like strconv: with a buffer of enough capacity
// they allocate nothing. For a payload of more than a few KiB, append only
// the header and hand header and payload to a vectored write: copying 64 KiB
// costs microseconds, the header nanoseconds. Empty pings and pongs and the
// common close frames are precompiled (FramePing, FrameCloseNormal, ...).
//
// A Prepared message is framed once, lazily, and shared read-only by any
// number of concurrent writers: the building block of a broadcast. Its
// Variants slots hold other encodings of the same message (deflatecache keeps
// one compressed frame per negotiated window there), each built once by the
// first writer that needs it and then read with two atomic loads.
//
// # Costs
//
// A Decoder is 224 bytes and holds no buffer between messages, so an idle
// connection costs only that; mid-message it holds the assembly buffer. A
// Reader adds its read buffer (4 KiB by default), grown for a larger frame
// and dropped after it. A Prepared is 88 bytes plus its frame, plus 256
// bytes of variant slots once a variant is built. Mask runs 16 bytes per
// instruction on amd64 (payloads of 256 bytes and more) and 8 bytes per
// word elsewhere: about 0.9 and 0.45 times the throughput of copy on
// 64 KiB. The UTF-8 validator matches utf8.Valid on ASCII-heavy JSON and
// stays within 10% of it on multilingual text. The README has the
// measured figures.
package wsframe

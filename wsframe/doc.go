// Package wsframe encodes and decodes RFC 6455 WebSocket frames without
// owning a socket.
//
// The decoder is sans-I/O: it is fed bytes (a slice, or the segments of a
// segmentqueue.Queue) and yields frames and whole messages, or reports how
// many more bytes it needs. Encoders follow the strconv habit of appending to
// a caller's buffer, so the hot path allocates nothing. A Prepared message is
// framed once, lazily, and then shared by any number of concurrent writers:
// the building block of a broadcast.
//
// Pick wsframe when you run your own server loop (goroutine per connection,
// an epoll event loop, a QUIC stream) and want the framing rules of RFC 6455
// enforced with the close code to send on every violation, with no
// dependency beyond the standard library.
package wsframe

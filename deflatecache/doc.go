// Package deflatecache implements RFC 7692 permessage-deflate for servers
// that broadcast: negotiation, compression with exactly the window each
// peer allowed, one compressed frame per window shared by every recipient
// of a message, inflation under a cap, and context takeover when asked
// for.
//
// Pick it when one WebSocket message goes to many peers with compression
// on. A server that compresses per recipient pays one DEFLATE run per
// recipient; with deflatecache a room of 200 members that negotiated the
// same window costs one, and two when the room is split over two windows.
// It depends on github.com/klauspost/compress (the compressor: it can
// compress with a window as small as 256 bytes, so an offer of
// server_max_window_bits=8 is honoured rather than answered with 9) and on
// wsframe.
//
// # Negotiation
//
// Negotiate reads a client's Sec-WebSocket-Extensions value and returns the
// agreed Params and the value of the response header, under a
// ServerPolicy. The zero policy turns context takeover off in both
// directions, which the server may always do (RFC 7692 §7.1.1.1 and
// §7.1.1.2 let it add server_no_context_takeover and
// client_no_context_takeover to any response), so Chromium's
//
//	permessage-deflate; client_max_window_bits
//
// is answered with
//
//	permessage-deflate; server_no_context_takeover; client_no_context_takeover
//
// A client builds its offer with AppendOffer and checks the server's answer
// with ParseResponse, which refuses what §7 obliges a client to refuse (a
// window larger than offered, unknown or repeated parameters, another
// extension beside this one).
//
// # Per connection
//
// NewConn turns Params and a role into a Conn. Its sending side makes whole
// frames (AppendCompressedFrame: RSV1 set, masked for a client) or bare
// compressed payloads (AppendCompressed), and reports false when a message
// is better sent plain: below Options.MinSize, or not shrinking. Its
// receiving side, Inflate, appends a message's inflated payload to the
// caller's buffer and stops with ErrTooLarge (close code 1009) as soon as
// the output would pass the caller's cap, before allocating past it; data
// that is not DEFLATE is ErrCorrupt (1007). Both errors unwrap to a
// *wsframe.ProtocolError, so wsframe.CloseCodeOf gives the code to send.
//
// A connection's read loop and write loop may use its Conn at the same
// time: Inflate touches only the receiving state, the sending methods only
// the sending state.
//
// # Broadcast
//
// A broadcast is a wsframe.Prepared. BroadcastFrame returns, for one
// connection, the compressed frame for that connection's window from the
// message's variant slot (slot bits-8), built by the first connection that
// needs it and then read by every other with two atomic loads; a message
// that does not shrink is recorded as such, so it is deflated once to find
// out, not once per recipient. The frame is compressed from an empty
// window, so a connection with context takeover gets the same bytes; its
// history then takes in the message, as its peer's does.
//
// # Costs
//
// A Conn without context takeover is 112 bytes and holds nothing
// between messages: compressors (klauspost writers, about 1 MiB of tables
// each) and inflaters (about 40 KiB each) come from pools for the length
// of one call, so their number follows the number of goroutines
// compressing at once, not the number of connections. With context takeover
// a Conn keeps the peer's window for Inflate (2^client_max_window_bits
// bytes, 32 KiB by default) and up to Options.TakeoverHistory (1 KiB by
// default) of its own output; the README has the measured bytes per
// connection. Each message compressed with takeover first primes a pooled
// compressor with that history, which costs about as much as compressing
// it, unless the compressor still holds the connection's stream from its
// previous message, the common case in a burst.
//
// Takeover pays off for short, similar messages: a stream of 90-byte ticks
// shrinks 5.5 to 7.5 times with it and not at all without. For messages of
// a few KiB and more, one-shot compression already finds most of the
// redundancy, and takeover adds memory for a few percent.
package deflatecache

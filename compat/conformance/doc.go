// Package conformance is hotpath's own RFC 6455 and RFC 7692 suite: about
// two hundred cases that a raw client runs against a WebSocket echo
// server, each named by the section it checks and the outcome that
// section calls for.
//
// The client writes any bytes: reserved bits and opcodes, unmasked and
// oversized frames, non-minimal lengths, text split inside a UTF-8
// sequence, a frame cut off half way, compressed control frames. It frames,
// parses and compresses with code of its own (not wsframe or deflatecache),
// so a mistake in hotpath's codecs cannot hide itself, and it inflates
// every compressed reply with a DEFLATE decoder that fails any
// back-reference past the window the server agreed to.
//
// # Groups
//
//   - framing: §5.1-§5.3, §5.5: lengths in every encoding, reserved bits
//     and opcodes, masking, control frame sizes, ping and pong.
//   - fragmentation: §5.4: continuation rules, control frames between
//     fragments, fragments written a byte at a time.
//   - utf8: §5.6, §8.1: valid and invalid text, split at every byte, and
//     fail-fast: a connection must fail when invalid bytes arrive, not
//     when the message would have ended.
//   - close: §5.5.1, §7: codes valid and invalid, reasons, the closing
//     handshake started by either end.
//   - limits: §10.4: messages and fragment counts at and past the server's
//     limits, compressed or not (close 1009).
//   - deflate: RFC 7692: every window size each way, context takeover on
//     and off, several offers in one header, offers a server must decline,
//     compressed control frames and RSV1 on continuations (close 1002).
//
// MUSTS.md lists every server-side MUST of the two RFCs with the case, or
// the test in compat, that checks it.
//
// # Outcomes
//
// Each case expects one of: the message echoed (then a clean closing
// handshake from the client), a close frame with a given code followed by
// the server closing the TCP connection, or fail-fast: that close while a
// message was deliberately left unfinished. Where the RFCs allow two
// behaviours (a pong for only the last of several pings, §5.5.3; a text
// frame validated when complete rather than as it arrives), a case
// accepts both and its Result carries a Note.
//
// # Running it
//
// Give RunAll (or Case.Run) a Target: the echo server's address, its
// message and fragment limits, whether it allows context takeover. The
// package's test runs the suite against compat's echo mode in process, on
// its own listener and behind net/http, with takeover off and on; with
// HOTPATH_BIN naming a built `hotpath` command (compat/interop/run.sh sets
// it) also against `hotpath -echo`. It logs a table per target (go test
// -v). The whole suite takes about two seconds per target on loopback.
package conformance

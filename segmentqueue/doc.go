// Package segmentqueue keeps received bytes as a queue of segments so that a
// large message arriving as many reads is reassembled with each byte copied
// at most once.
//
// Appending every read to a growing buffer copies the early bytes again on
// every growth, and re-concatenating the message with each read (the naive
// pattern) is quadratic: it turns "fine at 1 MiB" into "a stall at 100 MiB".
// A [Queue] takes ownership of each read instead ([Queue.Push]), copies it
// once into pooled chunks when the caller reuses its read buffer
// ([Queue.Write]), or reads from an io.Reader straight into pooled chunks
// ([Queue.Fill]). A parser then peeks and discards across segment
// boundaries ([Queue.Peek], [Queue.Discard]) and takes a whole message with
// [Queue.Next]: no copy when the message sits in one segment, exactly one
// copy otherwise. [Queue.Segments] exposes the bytes as [][]byte for
// in-place unmasking, vectored writes or a streaming consumer (a
// decompressor, a hash, a file), and [Queue.Read] makes the queue an
// io.Reader.
//
// Pick segmentqueue for any framed protocol read from a byte stream (TCP,
// QUIC streams, WebSocket continuation frames) where messages can be large,
// or where many connections must cost little while idle. It has no
// dependency beyond the standard library.
//
// # Lifetimes
//
// Push hands the segment to the queue until its bytes are consumed; Write
// copies; Fill reads into memory the queue owns. Slices returned by Peek,
// Next and Segments stay valid, and may be modified in place, until the
// next call to Discard, Next, Read, Release or Reset, or a Reserve that
// moves bytes. Adding bytes (Push, Write, Fill) never invalidates them.
// Next lends the pooled memory behind its result rather than copying it out
// or handing it to the garbage collector, which is what makes it
// allocation-free; the loan ends at the caller's next removing call, so a
// caller that keeps a message longer copies it (or Reads it into its own
// buffer).
//
// # Memory
//
// Chunks and reassembly buffers come from shared power-of-two pools and go
// back as soon as their last byte is consumed and no loan points into them.
// An empty queue on which Release (or Reset) has been called holds nothing
// but its own struct of about 200 bytes, which inlines room for four
// segments: a server calls Release when a connection goes idle and pays
// nothing per idle connection for buffering. While a message is partly
// buffered, the queue holds the segments it arrived in: pushed segments
// as they are, written bytes in chunks of 512 B to 64 KiB (4 KiB to 64 KiB
// for Fill) that double along a stream.
//
// # Limits
//
// Every queue bounds the bytes it buffers (Limits.MaxBytes, default 64 MiB)
// and the number of segments (Limits.MaxSegments, default 4096); a flood of
// one-byte reads is an attack on the second bound, not the first. A Push,
// Write, Fill or Reserve that would pass a bound buffers nothing and returns
// a *LimitError, which matches ErrLimit with errors.Is.
//
// # Costs
//
// Measured on a shared 2-core AMD EPYC VM (README.md has the command, the
// tables and the raw results): a 16 MiB message pushed as 1,024 reads of
// 16 KiB and taken whole runs at the speed of one 16 MiB copy, and its cost
// per byte follows the copy's from 1 MiB to 256 MiB, where re-concatenating
// the message with each read is over a thousand times slower at 16 MiB.
// 200-byte messages cut from 64 KiB reads cost 7.5 ns each through Push and
// 15 ns through Write (bytes.Buffer: 16 ns), with no allocation.
package segmentqueue

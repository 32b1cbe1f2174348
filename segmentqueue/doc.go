// Package segmentqueue keeps received bytes as a queue of segments so that a
// large message arriving as many reads is reassembled with each byte copied
// at most once.
//
// Appending every read to a growing buffer copies the early bytes again on
// every growth; the work is quadratic in the number of reads. A Queue takes
// ownership of each read segment instead, lets a parser peek and discard
// across segment boundaries, and hands out a whole message with one copy, or
// none when it already sits in one segment. The segments can also be exposed
// as [][]byte for vectored writes or streaming consumers.
//
// Pick segmentqueue for any framed protocol read from a byte stream (TCP,
// QUIC streams, WebSocket continuations) where messages can be large. It has
// no dependency beyond the standard library.
package segmentqueue

// Package corkwriter gathers the writes of one turn of a connection and sends
// them with a single writev system call.
//
// Small writes are copied into a pooled chunk; large shared buffers, such as
// a broadcast frame that hundreds of connections send, are referenced in the
// iovec and never copied. Cork and Uncork delimit a turn; the outermost
// Uncork flushes. An Outbox lets many goroutines queue frames for one
// connection, bounded in bytes, with a status for every send, and drains
// everything queued in one writev so frames coalesce under load while an
// idle connection waits for no timer.
//
// Pick corkwriter when a connection answers many requests per read or sends
// large shared frames. It depends only on golang.org/x/sys; connections
// without a file descriptor (TLS, net.Pipe, QUIC streams) use a portable
// fallback with the same API.
package corkwriter

// Package emitter provides Emitter[T], a typed event emitter whose Emit
// allocates nothing and is special-cased for zero and one listener.
//
// Listeners are kept in a copy-on-write list: On and the off function it
// returns copy the list, Emit only reads it. A listener may add or remove
// listeners, itself included, while an emit runs; that emit sees the
// listeners as they were when it began.
//
// Pick emitter for events raised on hot paths (a connection's messages, a
// room's joins and leaves) where most events have no listener or exactly
// one. It has no dependency beyond the standard library.
package emitter

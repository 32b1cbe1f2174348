// Package corkwriter gathers the writes of one turn of a connection and sends
// them with a single writev system call.
//
// A server that answers 64 pipelined calls with 64 conn.Write calls pays 64
// system calls; one that copies them into a bufio.Writer pays a copy of every
// byte, including a 16 KiB broadcast frame that hundreds of other connections
// are sending too. A Writer copies the small writes into a pooled chunk,
// references the large shared ones, and sends the lot with one writev.
//
// # Turns
//
// Cork starts a turn, Uncork ends it; turns nest and the outermost Uncork
// flushes. Outside a turn every write is sent at once, like conn.Write:
//
//	w.Cork()
//	for _, call := range calls {
//		w.Write(answer(call)) // copied: the caller may reuse its buffer
//	}
//	w.WriteShared(broadcastFrame) // referenced: never modified again
//	err := w.Uncork()             // one writev
//
// A turn that grows past Options.FlushThreshold (64 KiB by default) flushes
// on its own, so a turn never buffers without bound, and a single Write that
// large is sent straight from the caller's slice (except on a Writer from
// NewFD, which never waits for the socket and so copies it).
//
// # The system call
//
// When the connection exposes a file descriptor (*net.TCPConn, *net.UnixConn,
// *os.File), Flush calls writev on it through syscall.RawConn: a partial
// write advances the iovecs and goes on, more than IOV_MAX (1024) segments
// take several calls, EINTR is retried, and EAGAIN waits on Go's poller, so
// write deadlines work as usual. Connections without a descriptor (TLS,
// net.Pipe, QUIC and SCTP streams) get the same API with one Write per
// segment; consecutive copied writes share a segment, so a turn of small
// answers is still one Write; one that is a TryWriter (a QUIC stream) is
// tried without waiting where a descriptor would be. For an event loop that owns its non-blocking
// descriptors, NewFD returns a Writer whose Flush never waits: it returns
// ErrWouldBlock and keeps the rest for when the descriptor is writable.
//
// # Outbox
//
// An Outbox is the send queue of one connection for many goroutines: the
// connection's reader answering calls, room broadcasts, keepalive pings.
// Frames queued while a write is in progress leave together in the next
// writev, so they coalesce under load, and nothing waits for a timer when
// idle. It is bounded in bytes; every send reports a Status (Sent, Queued,
// Dropped, Closed) and a frame over the limit is dropped or closes the
// outbox, by a Policy chosen at construction, like uWebSockets' backpressure
// limit. A broadcaster is never blocked by a slow reader.
//
// There is no goroutine per connection: the goroutine that queues into an
// idle outbox writes at once, without waiting, and if the socket is full a
// short-lived flusher goroutine finishes the job and exits. The benchmarks
// in the README compare this with a dedicated flusher goroutine per
// connection, which costs about 2.5 KiB more per idle connection (7.5 times
// as much) and is no slower, often faster, on a quiet machine.
//
// The owner's Uncork waits for the socket to take its turn, so a peer that
// does not read stops being read. An owner that must go back to reading
// whatever the peer does (a client: its server may be waiting for it to
// read) ends its turn with UncorkTry instead; two ends that both wait in
// Uncork, each for the other to read, wait for ever.
//
// # Memory
//
// Nothing is held while idle. A Writer or an Outbox takes a batch and 16 KiB
// chunks from shared pools when the first byte arrives and returns them when
// the last byte has left, so an idle connection costs the struct alone
// (about 400 bytes for an Outbox with its sender, measured). References to
// shared buffers are dropped as soon as they are written, discarded or the
// outbox is closed. Buffers under 256 bytes given to WriteShared are copied,
// which is cheaper than an iovec entry.
//
// # Concurrency
//
// A Writer is for one goroutine at a time. An Outbox is safe for any number
// of goroutines; only the connection's owner should Cork it.
//
// It depends only on golang.org/x/sys.
package corkwriter

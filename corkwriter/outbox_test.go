package corkwriter

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"net"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
	"weak"
)

// waitFor polls cond until it holds or a generous deadline passes. It is a
// liveness check, not a timing assertion: the deadline only stops a hung
// test.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// waitGoroutines waits for the goroutine count to fall back to n.
func waitGoroutines(t *testing.T, n int) {
	t.Helper()
	waitFor(t, fmt.Sprintf("goroutines to return to %d", n), func() bool {
		return runtime.NumGoroutine() <= n
	})
}

// frame is the test protocol: producer id, sequence number, payload length,
// payload taken from pattern at an offset derived from the sequence.
func appendFrame(dst []byte, id byte, seq uint32, n int) []byte {
	dst = append(dst, id)
	dst = binary.BigEndian.AppendUint32(dst, seq)
	dst = binary.BigEndian.AppendUint16(dst, uint16(n))
	off := int(seq*131+uint32(id)) % patternPeriod
	return append(dst, pattern[off:off+n]...)
}

// readFrames parses frames from r until EOF and reports, per producer id,
// the sequence numbers seen, failing on a corrupt payload.
func readFrames(r io.Reader) <-chan map[byte][]uint32 {
	ch := make(chan map[byte][]uint32, 1)
	go func() {
		seen := map[byte][]uint32{}
		hdr := make([]byte, 7)
		var buf []byte
		for {
			if _, err := io.ReadFull(r, hdr); err != nil {
				ch <- seen
				return
			}
			id, seq, n := hdr[0], binary.BigEndian.Uint32(hdr[1:]), int(binary.BigEndian.Uint16(hdr[5:]))
			buf = append(append(buf[:0], hdr...), make([]byte, n)...)
			if _, err := io.ReadFull(r, buf[7:]); err != nil {
				ch <- seen
				return
			}
			if string(appendFrame(nil, id, seq, n)) != string(buf) {
				seen[0xff] = append(seen[0xff], seq) // corrupt: reported below
			}
			seen[id] = append(seen[id], seq)
		}
	}()
	return ch
}

// TestOutboxManyProducers: producers on many goroutines, the owner's corked
// turns and a broadcaster of one shared frame all write through one Outbox
// on loopback TCP. Every accepted frame arrives once, intact, and each
// producer's frames arrive in the order it sent them. Run it with -race.
func TestOutboxManyProducers(t *testing.T) {
	for _, conn := range []string{"tcp", "pipe", "trywriter"} {
		t.Run(conn, func(t *testing.T) {
			base := runtime.NumGoroutine()
			var c, peer net.Conn
			switch conn {
			case "tcp":
				c, peer = tcpPair(t)
			case "pipe":
				c, peer = net.Pipe()
			case "trywriter":
				c, peer = net.Pipe()
				c = &pipeTryWriter{Conn: c, rng: mrand.New(mrand.NewPCG(1, 2))}
			}
			got := readFrames(peer)
			o := NewOutbox(c, &OutboxOptions{MaxQueued: 64 << 20})
			const producers, perProducer = 6, 1500
			var wg sync.WaitGroup
			var accepted [producers + 2]atomic.Int64
			for id := range producers {
				wg.Go(func() {
					var scratch []byte
					for seq := range uint32(perProducer) {
						scratch = appendFrame(scratch[:0], byte(id), seq, int(seq*37)%900)
						if st := o.Send(scratch); st != Sent && st != Queued {
							t.Errorf("producer %d: status %v", id, st)
							return
						}
						accepted[id].Add(1)
					}
				})
			}
			// The owner: corked turns of several answers each.
			wg.Go(func() {
				var scratch []byte
				for seq := uint32(0); seq < perProducer; {
					o.Cork()
					for range 5 {
						scratch = appendFrame(scratch[:0], producers, seq, 64)
						o.Send(scratch)
						seq++
					}
					if err := o.Uncork(); err != nil {
						t.Errorf("Uncork: %v", err)
						return
					}
				}
			})
			// A broadcaster: shared, immutable frames, never copied.
			wg.Go(func() {
				for seq := range uint32(300) {
					o.SendShared(appendFrame(nil, producers+1, seq, 2000))
				}
			})
			wg.Wait()
			waitFor(t, "the outbox to drain", func() bool { return o.Queued() == 0 })
			st := o.Stats()
			c.Close()
			seen := <-got
			if len(seen[0xff]) > 0 {
				t.Fatalf("%d corrupt frames", len(seen[0xff]))
			}
			want := map[byte]int{producers: perProducer, producers + 1: 300}
			for id := range producers {
				want[byte(id)] = perProducer
			}
			for id, n := range want {
				seqs := seen[id]
				if len(seqs) != n {
					t.Fatalf("producer %d: %d frames arrived, want %d", id, len(seqs), n)
				}
				for i, s := range seqs {
					if s != uint32(i) {
						t.Fatalf("producer %d: frame %d has sequence %d", id, i, s)
					}
				}
			}
			if st.Referenced != 300*2007 || st.Dropped != 0 {
				t.Fatalf("stats %+v", st)
			}
			t.Logf("%s: %d frames in %d write calls, %d flusher goroutines started",
				conn, st.Accepted, st.Syscalls, st.Handoffs)
			o.mu.Lock()
			idle := o.q == nil && o.w.b == nil && !o.flushing
			o.mu.Unlock()
			if !idle {
				t.Fatal("a drained outbox still holds a batch or a flusher")
			}
			o.Close()
			waitGoroutines(t, base)
		})
	}
}

// pipeTryWriter is a TryWriter on a net.Pipe: TryWrite takes a random
// prefix of p, often nothing, as a stream whose window a slow reader opens
// bit by bit would; Write waits for the reader. The Outbox calls it from
// one goroutine at a time.
type pipeTryWriter struct {
	net.Conn
	rng *mrand.Rand
}

func (w *pipeTryWriter) TryWrite(p []byte) (int, error) {
	k := w.rng.IntN(len(p) + 1)
	if k == 0 {
		return 0, ErrWouldBlock
	}
	n, err := w.Conn.Write(p[:k])
	if err == nil && n < len(p) {
		err = ErrWouldBlock
	}
	return n, err
}

// TestOutboxSentWhenIdle: a frame into an idle outbox is written on the
// caller's goroutine before Send returns, in one system call, and leaves
// nothing behind.
func TestOutboxSentWhenIdle(t *testing.T) {
	if !isLinux {
		t.Skip("the inline write needs the raw writev path")
	}
	c, peer := tcpPair(t)
	got := readFrames(peer)
	o := NewOutbox(c, nil)
	for seq := range uint32(10) {
		if st := o.Send(appendFrame(nil, 1, seq, 100)); st != Sent {
			t.Fatalf("frame %d: %v, want sent", seq, st)
		}
	}
	if st := o.Stats(); st.Syscalls != 10 || st.Handoffs != 0 || st.Written != 10*107 || st.Copied != 0 {
		t.Fatalf("stats %+v: want 10 writes straight from the callers' buffers", st)
	}
	if o.q != nil || o.w.b != nil {
		t.Fatal("an idle outbox holds a batch")
	}
	c.Close()
	if n := len((<-got)[1]); n != 10 {
		t.Fatalf("%d frames arrived", n)
	}
}

// TestOutboxIdleSendCopiesWhatIsLeft: a frame into an idle outbox is
// written from the caller's buffer, which the caller may reuse once Send
// returns: when the socket takes only part of it (a peer that does not
// read), the rest is copied before Send returns, and the peer later reads
// the bytes as they were sent, not what the caller wrote into its buffer
// afterwards.
func TestOutboxIdleSendCopiesWhatIsLeft(t *testing.T) {
	if !isLinux {
		t.Skip("the inline write needs the raw writev path")
	}
	c, peer := tcpPair(t)
	c.(*net.TCPConn).SetWriteBuffer(16 << 10)
	peer.(*net.TCPConn).SetReadBuffer(16 << 10)
	o := NewOutbox(c, &OutboxOptions{MaxQueued: 64 << 20})
	const size = 8 << 20 // far more than the socket buffers hold
	frame := make([]byte, size)
	for i := range frame {
		frame[i] = byte(i % 251)
	}
	if st := o.Send(frame); st != Queued {
		t.Fatalf("status %v, want queued: the socket took all of %d bytes", st, size)
	}
	left := o.Queued()
	if st := o.Stats(); left == 0 || st.Copied != uint64(left) {
		t.Fatalf("%d bytes queued, stats %+v: want exactly what was left copied", left, st)
	}
	clear(frame) // the caller reuses its buffer
	got := make([]byte, size)
	if _, err := io.ReadFull(peer, got); err != nil {
		t.Fatal(err)
	}
	for i, b := range got {
		if b != byte(i%251) {
			t.Fatalf("byte %d is %d, want %d: the peer read the reused buffer", i, b, byte(i%251))
		}
	}
}

// fillUntil sends frames of n bytes to o until one is not accepted, and
// returns that status and how many were.
func fillUntil(o *Outbox, frame []byte) (Status, int) {
	for i := 0; ; i++ {
		if st := o.SendShared(frame); st != Sent && st != Queued {
			return st, i
		}
		if i > 1<<16 {
			return 0, i
		}
	}
}

// TestOutboxDropOnBackpressure: with a peer that does not read, sends are
// accepted up to the byte limit, then dropped without blocking the sender;
// once the peer reads, every accepted frame arrives, in order.
func TestOutboxDropOnBackpressure(t *testing.T) {
	c, peer := tcpPair(t)
	const limit = 256 << 10
	o := NewOutbox(c, &OutboxOptions{MaxQueued: limit})
	frame := make([]byte, 16<<10)
	st, accepted := fillUntil(o, frame)
	if st != Dropped {
		t.Fatalf("status %v after %d frames, want dropped", st, accepted)
	}
	if q := o.Queued(); q > limit || q+len(frame) <= limit {
		t.Fatalf("dropped with %d bytes queued, limit %d", q, limit)
	}
	if o.Err() != nil {
		t.Fatalf("Err = %v: dropping must not close", o.Err())
	}
	// The peer starts reading: everything accepted arrives.
	want := int64(accepted * len(frame))
	n, err := io.CopyN(io.Discard, peer, want)
	if err != nil || n != want {
		t.Fatalf("peer read %d of %d: %v", n, want, err)
	}
	waitFor(t, "the outbox to drain", func() bool { return o.Queued() == 0 })
	if s := o.Stats(); s.Dropped != 1 || s.Accepted != uint64(accepted) {
		t.Fatalf("stats %+v", s)
	}
}

// TestOutboxCloseOnBackpressure: under CloseOnBackpressure the frame over
// the limit closes the outbox, OnError hears ErrBackpressure once, every
// later send reports Closed, and the flusher goroutine ends when OnError
// closes the connection.
func TestOutboxCloseOnBackpressure(t *testing.T) {
	base := runtime.NumGoroutine()
	c, _ := tcpPair(t)
	var calls atomic.Int32
	var cause atomic.Value
	o := NewOutbox(c, &OutboxOptions{
		MaxQueued: 128 << 10,
		Overflow:  CloseOnBackpressure,
		OnError: func(err error) {
			calls.Add(1)
			cause.Store(err)
			c.Close()
		},
	})
	st, _ := fillUntil(o, make([]byte, 16<<10))
	if st != Closed {
		t.Fatalf("status %v, want closed", st)
	}
	if !errors.Is(o.Err(), ErrBackpressure) || cause.Load() != ErrBackpressure {
		t.Fatalf("Err = %v, OnError got %v", o.Err(), cause.Load())
	}
	for range 3 {
		if st := o.Send([]byte("late")); st != Closed {
			t.Fatalf("send after close: %v", st)
		}
	}
	waitFor(t, "the flusher to release its frames", func() bool { return o.Queued() == 0 })
	if n := calls.Load(); n != 1 {
		t.Fatalf("OnError called %d times", n)
	}
	waitGoroutines(t, base)
}

// TestOutboxCloseReleasesReferences: Close drops what is queued, later sends
// report Closed at once, and the outbox no longer keeps a shared frame
// alive.
func TestOutboxCloseReleasesReferences(t *testing.T) {
	c, _ := tcpPair(t)
	o := NewOutbox(c, nil)
	o.Cork()
	frame := new([4096]byte)
	alive := weak.Make(frame)
	if st := o.SendShared(frame[:]); st != Queued {
		t.Fatalf("corked send: %v", st)
	}
	o.Send([]byte("copied"))
	if err := o.Close(); err != nil {
		t.Fatal(err)
	}
	if st := o.SendShared(frame[:]); st != Closed {
		t.Fatalf("send after Close: %v", st)
	}
	if o.Queued() != 0 || !errors.Is(o.Uncork(), ErrClosed) {
		t.Fatalf("after Close: %d queued, Uncork %v", o.Queued(), o.Uncork())
	}
	frame = nil
	waitFor(t, "the shared frame to be collected", func() bool {
		runtime.GC()
		return alive.Value() == nil
	})
}

// TestOutboxWriteErrorCallsOnError: when the peer goes away the write error
// closes the outbox and reaches OnError once.
func TestOutboxWriteErrorCallsOnError(t *testing.T) {
	c, peer := tcpPair(t)
	errs := make(chan error, 4)
	o := NewOutbox(c, &OutboxOptions{OnError: func(err error) { errs <- err }})
	peer.Close()
	frame := make([]byte, 32<<10)
	waitFor(t, "a write error", func() bool {
		return o.SendShared(frame) == Closed
	})
	err := <-errs
	if !errors.Is(err, syscall.EPIPE) && !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("OnError got %T %v, want EPIPE or ECONNRESET", err, err)
	}
	if o.Err() != err {
		t.Fatalf("Err = %v, OnError got %v", o.Err(), err)
	}
	if len(errs) != 0 {
		t.Fatal("OnError called more than once")
	}
}

// TestOutboxNoGoroutineLeak: a flusher blocked on a peer that never reads
// ends when the outbox is closed and the connection with it.
func TestOutboxNoGoroutineLeak(t *testing.T) {
	base := runtime.NumGoroutine()
	c, peer := tcpPair(t)
	o := NewOutbox(c, &OutboxOptions{MaxQueued: 8 << 20})
	if st, _ := fillUntil(o, make([]byte, 64<<10)); st != Dropped {
		t.Fatalf("status %v", st)
	}
	if o.Stats().Handoffs == 0 {
		t.Fatal("no flusher goroutine was started for a full socket")
	}
	o.Close()
	c.Close()
	peer.Close()
	waitGoroutines(t, base)
	waitFor(t, "the flusher to release its frames", func() bool { return o.Queued() == 0 })
}

func TestStatusString(t *testing.T) {
	for st, s := range map[Status]string{Sent: "sent", Queued: "queued", Dropped: "dropped", Closed: "closed", 0: "invalid status"} {
		if st.String() != s {
			t.Errorf("%d: %q", st, st.String())
		}
	}
}

func TestOutboxDrained(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	o := NewOutbox(a, nil)
	select {
	case <-o.Drained():
	default:
		t.Fatal("an empty outbox is not drained")
	}
	o.Send([]byte("hello, drained"))
	ch := o.Drained()
	select {
	case <-ch:
		t.Fatal("drained before the peer read anything")
	case <-time.After(20 * time.Millisecond):
	}
	go io.Copy(io.Discard, b)
	select {
	case <-ch:
	case <-time.After(5 * time.Second):
		t.Fatal("not drained after the peer read")
	}
	o.Send([]byte("more"))
	o.Close()
	select {
	case <-o.Drained():
	case <-time.After(5 * time.Second):
		t.Fatal("a closed outbox is not drained")
	}
}

// gateWriter is a connection whose every Write waits for a release, and
// says when one began: a test can hold the flusher inside one write.
type gateWriter struct {
	entered chan int      // the length of each write, as it begins
	release chan struct{} // one receive lets one write complete
}

func (g *gateWriter) Write(p []byte) (int, error) {
	g.entered <- len(p)
	<-g.release
	return len(p), nil
}

// Room wakes a sender once a frame of its size fits, while Drained would
// wait for the queue to empty.
func TestOutboxRoom(t *testing.T) {
	g := &gateWriter{entered: make(chan int, 4), release: make(chan struct{})}
	o := NewOutbox(g, &OutboxOptions{MaxQueued: 1000})
	defer close(g.release)
	defer o.Close()
	if o.Send(make([]byte, 600)) != Queued {
		t.Fatal("the first frame was not queued")
	}
	<-g.entered // the flusher holds the first frame
	if o.Send(make([]byte, 300)) != Queued {
		t.Fatal("the second frame was not queued")
	}
	if st := o.Send(make([]byte, 200)); st != Dropped {
		t.Fatalf("a frame past MaxQueued: %v, want Dropped", st)
	}
	room, drained := o.Room(200), o.Drained()
	select {
	case <-room:
		t.Fatal("room for 200 bytes with 900 of 1000 queued")
	case <-time.After(20 * time.Millisecond):
	}
	g.release <- struct{}{} // the first frame leaves: 300 queued
	select {
	case <-room:
	case <-time.After(5 * time.Second):
		t.Fatal("no room for 200 bytes with 300 of 1000 queued")
	}
	select {
	case <-drained:
		t.Fatal("drained with 300 bytes queued")
	default:
	}
	if st := o.Send(make([]byte, 200)); st != Queued {
		t.Fatalf("the frame again once there is room: %v, want Queued", st)
	}
	<-g.entered             // the flusher writes the 300 bytes
	g.release <- struct{}{} // they leave
	<-g.entered             // and it writes the 200 bytes
	huge := o.Room(5000)
	select {
	case <-huge:
		t.Fatal("a frame larger than MaxQueued has room before the queue is empty")
	default:
	}
	g.release <- struct{}{}
	select {
	case <-huge:
	case <-time.After(5 * time.Second):
		t.Fatal("a frame larger than MaxQueued has no room in an empty outbox")
	}
	o.Close()
	select {
	case <-o.Room(5000):
	default:
		t.Fatal("Room of a closed outbox blocks")
	}
}

func TestOutboxQueueSharedWritesOnAFlusherAndCoalesces(t *testing.T) {
	a, b := tcpPair(t) // a real socket: writev carries several frames
	o := NewOutbox(a, nil)
	frame := bytes.Repeat([]byte("f"), 512)
	const n = 100
	for range n {
		if st := o.QueueShared(frame); st != Queued {
			t.Fatalf("QueueShared = %v, want Queued", st)
		}
	}
	got := make([]byte, n*len(frame))
	if _, err := io.ReadFull(b, got); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, bytes.Repeat(frame, n)) {
		t.Fatal("byte stream differs")
	}
	<-o.Drained()
	st := o.Stats()
	if st.Referenced != n*uint64(len(frame)) || st.Copied != 0 {
		t.Errorf("referenced %d, copied %d: want every frame by reference", st.Referenced, st.Copied)
	}
	if st.Syscalls >= n {
		t.Errorf("%d writes for %d frames queued back to back: no coalescing", st.Syscalls, n)
	}
}

// SendLast: while producers send as fast as they can, the frame given to
// SendLast is the last one on the wire, every frame accepted before it
// arrives, and every send after it returns Closed.
func TestOutboxSendLast(t *testing.T) {
	c, peer := tcpPair(t)
	defer peer.Close()
	order := make(chan []byte, 1)
	go func() {
		var ids []byte
		hdr := make([]byte, 7)
		for {
			if _, err := io.ReadFull(peer, hdr); err != nil {
				order <- ids
				return
			}
			if _, err := io.CopyN(io.Discard, peer, int64(binary.BigEndian.Uint16(hdr[5:]))); err != nil {
				order <- ids
				return
			}
			ids = append(ids, hdr[0])
		}
	}()
	o := NewOutbox(c, &OutboxOptions{MaxQueued: 64 << 20})
	const producers, lastID = 4, 0xfe
	var accepted [producers]atomic.Int64
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for id := range producers {
		wg.Go(func() {
			var scratch []byte
			for seq := uint32(0); ; seq++ {
				scratch = appendFrame(scratch[:0], byte(id), seq, int(seq*37)%900)
				switch st := o.Send(scratch); st {
				case Sent, Queued:
					accepted[id].Add(1)
				case Closed:
					<-stop
					return
				default:
					t.Errorf("producer %d: status %v", id, st)
					return
				}
			}
		})
	}
	time.Sleep(20 * time.Millisecond)
	if st := o.SendLast(appendFrame(nil, lastID, 0, 100)); st != Sent && st != Queued {
		t.Fatalf("SendLast: %v", st)
	}
	if st := o.Send(appendFrame(nil, 0, 0, 10)); st != Closed {
		t.Fatalf("Send after SendLast: %v, want Closed", st)
	}
	if st := o.SendLast(appendFrame(nil, lastID, 1, 10)); st != Closed {
		t.Fatalf("a second SendLast: %v, want Closed", st)
	}
	close(stop)
	wg.Wait()
	waitFor(t, "the outbox to drain", func() bool { return o.Queued() == 0 })
	o.Close()
	c.Close()
	ids := <-order
	if len(ids) == 0 || ids[len(ids)-1] != lastID {
		t.Fatalf("the last frame on the wire is not SendLast's (%d frames)", len(ids))
	}
	var arrived [producers]int64
	for _, id := range ids[:len(ids)-1] {
		if id == lastID {
			t.Fatal("SendLast's frame arrived twice")
		}
		arrived[id]++
	}
	for id := range producers {
		if arrived[id] != accepted[id].Load() {
			t.Fatalf("producer %d: %d frames accepted, %d arrived before the last", id, accepted[id].Load(), arrived[id])
		}
	}
}

// A nil writer, or an Outbox not made by NewOutbox, panics on the caller's
// goroutine, where it can be seen and recovered, instead of in the flusher
// goroutine at the first write, which ended the process.
func TestNilWriterPanicsAtTheCaller(t *testing.T) {
	panics := func(name string, f func()) {
		t.Helper()
		defer func() {
			if r := recover(); r == nil {
				t.Errorf("%s did not panic", name)
			} else if !strings.HasPrefix(fmt.Sprint(r), "corkwriter: ") {
				t.Errorf("%s panicked with %v", name, r)
			}
		}()
		f()
	}
	panics("NewOutbox(nil)", func() { NewOutbox(nil, nil) })
	panics("NewWriter(nil)", func() { NewWriter(nil, nil) })
	panics("a zero Outbox's Send", func() {
		var o Outbox
		o.Send([]byte("x"))
	})
}

// A closing frame is never refused for MaxQueued: SendLast into a full
// outbox returned Dropped and still marked the outbox finished, so the
// frame could not be sent again and was lost for good (a modules audit).
func TestOutboxSendLastPastTheLimit(t *testing.T) {
	for _, policy := range []Policy{DropOnBackpressure, CloseOnBackpressure} {
		a, b := net.Pipe() // nobody reads b yet
		o := NewOutbox(a, &OutboxOptions{MaxQueued: 1000, Overflow: policy})
		if st := o.Send(make([]byte, 900)); st != Queued {
			t.Fatalf("first frame: %v", st)
		}
		closeFrame := []byte{0x88, 0x02, 0x03, 0xe8}
		big := bytes.Repeat(closeFrame, 40) // 160 bytes: past the limit
		if st := o.SendLast(big); st != Queued {
			t.Errorf("policy %d: SendLast into a full outbox: %v, want Queued", policy, st)
		}
		if st := o.Send([]byte("data")); st != Closed {
			t.Errorf("policy %d: a send after SendLast: %v, want Closed", policy, st)
		}
		got := make(chan []byte, 1)
		go func() {
			all := make([]byte, 900+len(big))
			b.SetReadDeadline(time.Now().Add(5 * time.Second))
			_, err := io.ReadFull(b, all)
			if err != nil {
				all = nil
			}
			got <- all
		}()
		if all := <-got; !bytes.HasSuffix(all, big) {
			t.Errorf("policy %d: the peer read %d bytes without the closing frame at their end", policy, len(all))
		}
		if err := o.Err(); err != nil {
			t.Errorf("policy %d: Err %v", policy, err)
		}
		a.Close()
		b.Close()
	}
}

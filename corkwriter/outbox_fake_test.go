//go:build unix

package corkwriter

import (
	"bytes"
	"runtime"
	"testing"
)

func newFakeOutbox(fd *fakeFD, opts *OutboxOptions) *Outbox {
	return newOutbox(newFDSender(&fakeRawConn{}, -1, fd.writev), opts)
}

// TestOutboxTurnIsOneWritev: answers queued during the owner's turn and
// broadcasts queued meanwhile leave together in one writev at Uncork.
func TestOutboxTurnIsOneWritev(t *testing.T) {
	fd := newFakeFD(1, false, 0)
	o := newFakeOutbox(fd, nil)
	frame := bytes.Repeat([]byte{1}, 16<<10)
	o.Cork()
	for i := range 64 {
		if i%16 == 0 {
			if st := o.SendShared(frame); st != Queued {
				t.Fatalf("corked shared send: %v", st)
			}
		}
		if st := o.Send(make([]byte, 64)); st != Queued {
			t.Fatalf("corked send: %v", st)
		}
	}
	if err := o.Uncork(); err != nil {
		t.Fatal(err)
	}
	if fd.calls != 1 || len(fd.out) != 64*64+4*len(frame) {
		t.Fatalf("turn took %d calls for %d bytes", fd.calls, len(fd.out))
	}
	if st := o.Stats(); st.Syscalls != 1 || st.Referenced != 4<<14 || st.Copied != 64*64 || st.Handoffs != 0 {
		t.Fatalf("stats %+v", st)
	}
}

// TestOutboxResumesAfterEAGAIN: when the inline write meets a full socket,
// the flusher goroutine finishes the job and the stream is exact.
func TestOutboxResumesAfterEAGAIN(t *testing.T) {
	fd := newFakeFD(5, true, 30)
	o := newFakeOutbox(fd, &OutboxOptions{MaxQueued: 1 << 30})
	var want []byte
	for i := range 2000 {
		p := pattern[i : i+1+i%700]
		want = append(want, p...)
		if st := o.SendShared(p); st != Sent && st != Queued {
			t.Fatalf("send %d: %v", i, st)
		}
	}
	waitFor(t, "the outbox to drain", func() bool { return o.Queued() == 0 })
	o.mu.Lock()
	got := bytes.Clone(fd.out)
	o.mu.Unlock()
	if !bytes.Equal(got, want) {
		t.Fatalf("stream of %d bytes, want %d, differs at %d", len(got), len(want), mismatch(want, got))
	}
}

// FuzzOutbox drives an Outbox from one goroutine with fuzzer-chosen sends,
// shared sends, corks and uncorks, a limit and a policy, over a fake socket
// that takes random partial writes. With one goroutine and no EAGAIN the
// outcome is deterministic: every status, the queued byte count and the
// byte stream must match the model.
func FuzzOutbox(f *testing.F) {
	f.Add(uint64(1), uint16(100), false, []byte{
		byte(opCork), 0, 0, byte(opWrite), 3, 0, byte(opShared), 2, 0,
		byte(opWrite), 1, 0, byte(opUncork), 0, 0, byte(opWrite), 0, 9,
	})
	f.Add(uint64(2), uint16(10), true, []byte{
		byte(opCork), 0, 0, byte(opShared), 0, 100, byte(opShared), 0, 100,
		byte(opShared), 0, 100, byte(opUncork), 0, 0, byte(opWrite), 0, 1,
	})
	f.Fuzz(func(t *testing.T, seed uint64, limit uint16, closePolicy bool, data []byte) {
		fd := newFakeFD(seed, true, 0)
		opts := &OutboxOptions{MaxQueued: int(limit)*16 + 1}
		if closePolicy {
			opts.Overflow = CloseOnBackpressure
		}
		var onError int
		opts.OnError = func(error) { onError++ }
		o := newFakeOutbox(fd, opts)

		var want []byte
		queued, corks, closed := 0, 0, false
		for i, op := range decodeOps(data) {
			switch op.kind {
			case opCork:
				o.Cork()
				corks++
				continue
			case opUncork, opFlush:
				err := o.Uncork()
				if corks > 0 {
					corks--
				}
				if closed != (err != nil) {
					t.Fatalf("op %d: Uncork = %v, closed %v", i, err, closed)
				}
				if corks == 0 {
					queued = 0
				}
			case opWrite, opShared:
				p := pattern[i%patternPeriod:][:op.size]
				var st Status
				if op.kind == opWrite {
					st = o.Send(p)
				} else {
					st = o.SendShared(p)
				}
				var ws Status
				switch {
				case closed:
					ws = Closed
				case op.size == 0:
					ws = Sent
				case queued > 0 && queued+op.size > opts.MaxQueued && closePolicy:
					ws, closed, queued = Closed, true, 0
				case queued > 0 && queued+op.size > opts.MaxQueued:
					ws = Dropped
				case corks > 0:
					ws = Queued
					queued += op.size
					want = append(want, p...)
				default:
					ws = Sent
					want = append(want, p...)
				}
				if st != ws {
					t.Fatalf("op %d (%v): status %v, model says %v", i, op, st, ws)
				}
			}
			if q := o.Queued(); q != queued {
				t.Fatalf("op %d (%v): %d bytes queued, model says %d", i, op, q, queued)
			}
			if corks == 0 && !closed && !bytes.Equal(fd.out, want) {
				t.Fatalf("op %d (%v): stream differs at %d", i, op, mismatch(want, fd.out))
			}
		}
		if closed != (onError == 1) || onError > 1 {
			t.Fatalf("closed %v, OnError called %d times", closed, onError)
		}
		if !bytes.HasPrefix(want, fd.out) {
			t.Fatal("the stream is not a prefix of what was accepted")
		}
		if st := o.Stats(); st.Handoffs != 0 {
			t.Fatalf("%d flusher goroutines with one producer and no EAGAIN", st.Handoffs)
		}
	})
}

// TestOutboxHandoffAllocatesNothing: a broadcast queued into an idle
// outbox starts a flusher goroutine, and starting it allocates nothing. A
// go statement on the method o.drain allocated a closure each time, one
// per member whose flusher started: 2-3 of a room emit's 6-7 allocations
// in compat's BenchmarkRoomEmit.
func TestOutboxHandoffAllocatesNothing(t *testing.T) {
	if raceEnabled {
		t.Skip("sync.Pool drops items at random under the race detector")
	}
	fd := newFakeFD(1, false, 0)
	o := newFakeOutbox(fd, nil)
	frame := bytes.Repeat([]byte{1}, 512)
	handoff := func() {
		if st := o.QueueShared(frame); st != Queued {
			t.Fatalf("QueueShared into an idle outbox: %v", st)
		}
		for {
			o.mu.Lock()
			idle := !o.flushing && o.queued == 0
			if idle {
				fd.out = fd.out[:0]
			}
			o.mu.Unlock()
			if idle {
				return
			}
			runtime.Gosched()
		}
	}
	handoff()
	before := o.Stats().Handoffs
	if a := testing.AllocsPerRun(100, handoff); a > 0 {
		t.Fatalf("a hand-off to a flusher goroutine allocates %v times", a)
	}
	if n := o.Stats().Handoffs - before; n != 101 {
		t.Fatalf("%d hand-offs counted, want 101 (AllocsPerRun's warm-up run and 100)", n)
	}
}

package dictionary

import (
	"bytes"
	"errors"
	"sync"
	"testing"
	"time"
)

// Zstd is safe for concurrent use, and a server closes its codec at
// shutdown while connections may still be decoding. Close closed
// klauspost's decoder under calls in flight: a DecodeAll handing its block
// decoder back sent on the closed pool channel, one starting took a nil
// decoder from it, and either panicked the process from a connection's
// goroutine. Close now waits for the calls in flight; later ones see
// ErrClosed (or leave the message plain).
func TestZstdCloseDuringUse(t *testing.T) {
	msg := bytes.Repeat([]byte(`{"method":"chat/send","text":"hello"}`), 8)
	rounds := 40
	if raceEnabled {
		rounds = 10
	}
	for range rounds {
		z, err := NewZstd(nil, CodecOptions{})
		if err != nil {
			t.Fatal(err)
		}
		frame, ok := z.AppendCompress(nil, msg)
		if !ok {
			t.Fatal("the message did not compress")
		}
		var wg, running sync.WaitGroup
		for range 8 {
			running.Add(1)
			wg.Go(func() {
				first := true
				var buf []byte
				for {
					if first {
						running.Done()
						first = false
					}
					if _, ok := z.AppendCompress(buf[:0], msg); !ok {
						return // closed
					}
					out, err := z.AppendDecompress(buf[:0], frame)
					if errors.Is(err, ErrClosed) {
						return
					}
					if err != nil || !bytes.Equal(out, msg) {
						t.Errorf("during Close: %v", err)
						return
					}
					buf = out
				}
			})
		}
		running.Wait() // every goroutine is compressing and decompressing
		z.Close()
		done := make(chan struct{})
		go func() { wg.Wait(); close(done) }()
		// A guard against a hang, not a measure of speed: a call that
		// never returns trips it, however slow the machine.
		select {
		case <-done:
		case <-time.After(time.Minute):
			t.Fatal("calls in flight during Close never returned")
		}
	}
}

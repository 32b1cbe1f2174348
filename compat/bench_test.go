package compat

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"testing"

	"github.com/gobwas/ws"
	"github.com/gobwas/ws/wsutil"
	"github.com/hotpath-go/hotpath/compat/wire"
	"github.com/hotpath-go/hotpath/dispatch"
)

// benchServer starts a server with the test router for benchmarks.
func benchClient(b *testing.B, copts ClientOptions) *Client {
	b.Helper()
	_, addr := newTestServer(b, Options{Logger: slog.New(slog.DiscardHandler)})
	c, err := Dial(context.Background(), "ws://"+addr+"/ws", copts)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { c.Close() })
	return c
}

// BenchmarkCall is one call in flight at a time through the whole stack:
// client encode and frame, loopback TCP, server decode, dispatch, handler,
// answer, client decode.
func BenchmarkCall(b *testing.B) {
	c := benchClient(b, ClientOptions{})
	req := []byte(`{"text":"0123456789abcdef0123456789"}`)
	var resp []byte
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if err := c.Call(ctx, "echo/raw", req, &resp); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkCallCancellable is BenchmarkCall with a context that can be
// canceled, as most callers pass: a caller reading its own answer must be
// woken if that context ends (readOwnAnswer).
func BenchmarkCallCancellable(b *testing.B) {
	c := benchClient(b, ClientOptions{})
	req := []byte(`{"text":"0123456789abcdef0123456789"}`)
	var resp []byte
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	b.ReportAllocs()
	for b.Loop() {
		if err := c.Call(ctx, "echo/raw", req, &resp); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkCall10KiB is BenchmarkCall with a 10 KiB payload each way, the
// bench's large echo case: what the Go client copies, masks and allocates
// per byte.
func BenchmarkCall10KiB(b *testing.B) {
	c := benchClient(b, ClientOptions{})
	req := make([]byte, 10<<10)
	for i := range req {
		req[i] = 'a' + byte(i%26)
	}
	var resp []byte
	ctx := context.Background()
	b.SetBytes(int64(len(req)))
	b.ReportAllocs()
	for b.Loop() {
		if err := c.Call(ctx, "echo/raw", req, &resp); err != nil {
			b.Fatal(err)
		}
		if len(resp) != len(req) {
			b.Fatalf("answer of %d bytes, want %d", len(resp), len(req))
		}
	}
}

// BenchmarkCall64 keeps 64 calls in flight from 64 goroutines; concurrent
// calls leave in batches and their answers in one writev per read.
func BenchmarkCall64(b *testing.B) {
	for _, nobatch := range []bool{false, true} {
		name := "batching"
		if nobatch {
			name = "no-batching"
		}
		b.Run(name, func(b *testing.B) {
			c := benchClient(b, ClientOptions{NoBatching: nobatch})
			req := []byte(`{"text":"0123456789abcdef0123456789"}`)
			ctx := context.Background()
			b.ReportAllocs()
			b.ResetTimer()
			var wg sync.WaitGroup
			per := b.N/64 + 1
			for range 64 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					var resp []byte
					for range per {
						if err := c.Call(ctx, "echo/raw", req, &resp); err != nil {
							b.Error(err)
							return
						}
					}
				}()
			}
			wg.Wait()
		})
	}
}

// BenchmarkCallRawClient is BenchmarkCall's call made by a bare gobwas/ws
// client that writes the request and reads the answer on one goroutine:
// the round trip without the Go client, what BenchmarkCall is measured
// against. With handoff, a reader goroutine reads the answer and hands it
// to the caller over a channel, as a client with a dedicated read loop
// does: the cost of that one extra wake-up is why the Go client's callers
// read their own answers (sharedread.go).
func BenchmarkCallRawClient(b *testing.B) {
	for _, handoff := range []bool{false, true} {
		name := "same-goroutine"
		if handoff {
			name = "reader-goroutine"
		}
		b.Run(name, func(b *testing.B) {
			_, addr := newTestServer(b, Options{Logger: slog.New(slog.DiscardHandler)})
			nc, _, _, err := ws.Dialer{Protocols: []string{Subprotocol}}.Dial(context.Background(), "ws://"+addr+"/ws")
			if err != nil {
				b.Fatal(err)
			}
			defer nc.Close()
			rd := wsutil.Reader{Source: nc, State: ws.StateClientSide}
			buf := make([]byte, 4096)
			readMessage := func() error {
				h, err := rd.NextFrame()
				if err != nil {
					return err
				}
				_, err = io.ReadFull(&rd, buf[:h.Length])
				return err
			}
			if err := readMessage(); err != nil { // the capabilities
				b.Fatal(err)
			}
			answered := make(chan error, 1)
			if handoff {
				go func() {
					for {
						err := readMessage()
						answered <- err
						if err != nil {
							return
						}
					}
				}()
			}
			req := wire.AppendCall(nil, dispatch.KindCall, 1, "echo/raw", 0, []byte(`{"text":"0123456789abcdef0123456789"}`))
			b.ReportAllocs()
			for b.Loop() {
				if err := wsutil.WriteClientBinary(nc, req); err != nil {
					b.Fatal(err)
				}
				err := error(nil)
				if handoff {
					err = <-answered
				} else {
					err = readMessage()
				}
				if err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

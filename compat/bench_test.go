package compat

import (
	"context"
	"log/slog"
	"sync"
	"testing"
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

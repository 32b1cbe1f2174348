package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hotpath-go/hotpath/compat"
	"github.com/hotpath-go/hotpath/compat/wire"
	"github.com/hotpath-go/hotpath/dispatch"
)

// hotpath's rows of the echo and idle scenarios: compat's server in echo
// mode (the raw echo every other library runs), and in its normal RPC mode
// answering a call to "echo/raw" that returns its request. The RPC server
// is driven twice: by the bench's own client sending a call packet built
// once (the same client as every other row, so the difference is the
// server's), and by compat's Go client (the whole stack a user runs).
func init() {
	echoServers = append(echoServers,
		echoServer{Library: "hotpath (echo)", Role: Ours, Mode: "goroutine", Handshake: true, Serve: serveHotpathEcho},
		echoServer{Library: "hotpath RPC (bench client)", Role: Ours, Mode: "goroutine", Handshake: true, Serve: serveHotpathRPC, Request: rpcEchoRequest},
	)
	echoCallers = append(echoCallers,
		echoCaller{Library: "hotpath RPC (Go client)", Role: Ours, Open: openGoClientRow(false)},
		echoCaller{Library: "hotpath RPC (Go client, no batching)", Role: Ours, Open: openGoClientRow(true)},
	)
}

// rpcEchoMethod is the method every RPC row calls: it returns its request.
const rpcEchoMethod = "echo/raw"

// hotpathRouter is the router of every hotpath RPC server in the bench.
func hotpathRouter() *compat.Router {
	r := compat.NewRouter()
	compat.Handle(r, rpcEchoMethod, func(_ context.Context, req []byte) ([]byte, error) { return req, nil })
	return r
}

var quietLogger = slog.New(slog.DiscardHandler)

// serveCompat runs a compat server with opts on ln with its own raw
// listener loop (Serve, gobwas/ws's zero-copy upgrade); stop shuts it down.
func serveCompat(ln net.Listener, opts compat.Options) (*compat.Server, func(), error) {
	if opts.Router == nil {
		opts.Router = hotpathRouter()
	}
	opts.Logger = quietLogger
	srv, err := compat.NewServer(opts)
	if err != nil {
		return nil, nil, err
	}
	go func() { _ = srv.Serve(ln) }()
	stop := func() {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	}
	return srv, stop, nil
}

// serveHotpathEcho: compat with Options.Echo, every message sent back as it
// came through the same engine as the RPC server (wsframe decoder,
// segmentqueue, corkwriter outbox, pooled read buffers).
func serveHotpathEcho(ln net.Listener) (func(), error) {
	_, stop, err := serveCompat(ln, compat.Options{Echo: true})
	return stop, err
}

// serveHotpathRPC: compat's RPC server with the echo/raw method.
func serveHotpathRPC(ln net.Listener) (func(), error) {
	_, stop, err := serveCompat(ln, compat.Options{})
	return stop, err
}

// rpcEchoRequest wraps payload in a hotpath.v1 call of echo/raw and says
// how long the answer's packet is: a result carrying the same payload.
func rpcEchoRequest(payload []byte) (request []byte, answerSize int) {
	return wire.AppendCall(nil, dispatch.KindCall, 1, rpcEchoMethod, 0, payload),
		len(wire.AppendResult(nil, 1, payload))
}

// callRow keeps window calls in flight through call, a client's request
// that returns the length of its answer, for about d per trial: compat's
// Go client here, and the RPC frameworks of the rpc scenario. Each caller
// waits for its answer before its next call, and the calls in flight when
// the time is up finish before the trial ends.
type callRow struct {
	call    func(ctx context.Context, req []byte) (int, error)
	close   func() error
	payload []byte
	window  int
	d       time.Duration
	hists   []latencyHist
}

func newCallRow(size, window int, d time.Duration, call func(context.Context, []byte) (int, error), close func() error) *callRow {
	return &callRow{call: call, close: close, payload: callPayload(size), window: window, d: d, hists: make([]latencyHist, window)}
}

// callPayload is the request of a call row's calls: size bytes, a to z
// over and over.
func callPayload(size int) []byte {
	payload := make([]byte, size)
	for i := range payload {
		payload[i] = 'a' + byte(i%26)
	}
	return payload
}

// checkCall makes one call of a row's payload before its trials, through
// answer (a call that returns the answer's bytes), and checks that it
// answers the same bytes: a call row's timed loop checks lengths only, so
// an answer of the right length with other bytes would pass it. It is as
// checkEcho is for the rows driven by the bench's client.
func checkCall(ctx context.Context, size int, answer func(context.Context, []byte) ([]byte, error)) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	payload := callPayload(size)
	got, err := answer(ctx, payload)
	switch {
	case err != nil:
		return fmt.Errorf("the first call: %w", err)
	case !bytes.Equal(got, payload):
		return fmt.Errorf("the first call's answer differs from its request (%d bytes, want %d)", len(got), len(payload))
	}
	return nil
}

func (g *callRow) Trial(ctx context.Context) (Outcome, error) {
	for i := range g.hists {
		g.hists[i].reset()
	}
	runtime.GC()
	a0 := readAllocs()
	var (
		calls, wrong atomic.Int64
		firstErr     error
		errOnce      sync.Once
		wg           sync.WaitGroup
		start        = time.Now()
		deadline     = start.Add(g.d)
	)
	for i := range g.window {
		wg.Add(1)
		go func(h *latencyHist) {
			defer wg.Done()
			for n := 0; n < maxEchoMsgs; n++ {
				t0 := time.Now()
				// Each caller makes one call at least: a trial of a few
				// milliseconds (the tests') could otherwise end before a
				// descheduled caller began, with no call answered.
				if n > 0 && !t0.Before(deadline) {
					return
				}
				got, err := g.call(ctx, g.payload)
				if err != nil {
					errOnce.Do(func() { firstErr = err })
					return
				}
				h.add(time.Since(t0))
				if got != len(g.payload) {
					wrong.Add(1)
				}
				calls.Add(1)
			}
		}(&g.hists[i])
	}
	// The calls are made without a deadline, as the fastest path is; a
	// call still unanswered 10 s after the trial's time is up is lost, and
	// the client is closed so that the trial can end and say so.
	finished := make(chan struct{})
	go func() { wg.Wait(); close(finished) }()
	select {
	case <-finished:
	case <-time.After(g.d + 10*time.Second):
		_ = g.close()
		<-finished
		return Outcome{}, fmt.Errorf("a call was never answered (10 s after the trial; %d calls answered)", calls.Load())
	}
	elapsed := time.Since(start)
	a1 := readAllocs()
	if firstErr != nil {
		return Outcome{}, firstErr
	}
	n := calls.Load()
	if n == 0 {
		return Outcome{}, errors.New("no call was answered")
	}
	var all latencyHist
	for i := range g.hists {
		all.merge(&g.hists[i])
	}
	out := Outcome{Values: map[string]float64{
		"rate":   float64(n) / elapsed.Seconds(),
		"p50":    float64(all.quantile(0.50)) / 1e3,
		"p99":    float64(all.quantile(0.99)) / 1e3,
		"allocs": float64(a1.objects-a0.objects) / float64(n),
	}}
	if w := wrong.Load(); w > 0 {
		out.Invalid = fmt.Sprintf("%d of %d answers had the wrong length", w, n)
	}
	return out, nil
}

func (g *callRow) Close() error { return g.close() }

// openGoClientRow is compat's Go client calling echo/raw on compat's
// server: the full RPC path, client included. It is the only row of the
// echo scenario not driven by the bench's client, since the Go client is
// part of what it measures.
func openGoClientRow(noBatching bool) func(size, window int, d time.Duration) func(context.Context) (Instance, error) {
	return func(size, window int, d time.Duration) func(context.Context) (Instance, error) {
		return func(ctx context.Context) (Instance, error) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				return nil, err
			}
			_, stop, err := serveCompat(ln, compat.Options{})
			if err != nil {
				ln.Close()
				return nil, err
			}
			dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			c, err := compat.Dial(dctx, "ws://"+ln.Addr().String()+"/ws", compat.ClientOptions{
				NoBatching: noBatching,
				Reconnect:  compat.Reconnect{Disabled: true},
				Logger:     quietLogger,
			})
			if err != nil {
				stop()
				return nil, err
			}
			first := func(ctx context.Context, req []byte) ([]byte, error) {
				var resp []byte
				err := c.Call(ctx, rpcEchoMethod, req, &resp)
				return resp, err
			}
			if err := checkCall(ctx, size, first); err != nil {
				c.Close()
				stop()
				return nil, err
			}
			// Each caller passes its own answer buffer call after call, as
			// Call's doc suggests: the answer is copied into it instead of
			// a new slice per call.
			answers := sync.Pool{New: func() any { return new([]byte) }}
			call := func(ctx context.Context, req []byte) (int, error) {
				resp := answers.Get().(*[]byte)
				defer answers.Put(resp)
				err := c.Call(ctx, rpcEchoMethod, req, resp)
				return len(*resp), err
			}
			closeAll := func() error {
				err := c.Close()
				stop()
				if errors.Is(err, io.EOF) {
					err = nil
				}
				return err
			}
			return newCallRow(size, window, d, call, closeAll), nil
		}
	}
}

// merge adds the counts of o to h.
func (h *latencyHist) merge(o *latencyHist) {
	for i, c := range o.counts {
		h.counts[i] += c
	}
	h.n += o.n
}

// The goals issue 10 sets for compat's RPC path, against a raw gws echo
// driven by the bench's client. The RPC row is compat's Go client with its
// defaults (batching on), the stack a user runs.
func init() {
	const rpc, gws = "hotpath RPC (Go client)", "lxzan/gws"
	addTargets("echo",
		Target{Goal: "RPC echo call, 32 B, 1 in flight ≥ 0.9× a raw gws echo", Case: "32 B, 1 in flight", Row: rpc, Against: gws, Min: 0.9},
		Target{Goal: "64 calls in flight ≥ 2× a raw gws echo", Case: "32 B, 64 in flight", Row: rpc, Against: gws, Min: 2},
		Target{Goal: "10 KiB payload ≥ 1.0× a raw gws echo (1 in flight)", Case: "10 KiB, 1 in flight", Row: rpc, Against: gws, Min: 1},
		Target{Goal: "10 KiB payload ≥ 1.0× a raw gws echo (64 in flight)", Case: "10 KiB, 64 in flight", Row: rpc, Against: gws, Min: 1},
	)
}

// The idle-memory goal of issue 10, for compat's server in both modes:
// the RPC server is the one users run; echo mode shares its engine.
func init() {
	const goal = "idle memory ≤ 6 KiB of server RSS per idle connection at 10,000 connections"
	addTargets("idle",
		Target{Goal: goal + " (RPC server)", Case: "10,000 connections", Row: "hotpath RPC (bench client)", Bound: 6 << 10},
		Target{Goal: goal + " (echo mode)", Case: "10,000 connections", Row: "hotpath (echo)", Bound: 6 << 10},
	)
}

package compat

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Concurrency audit of the client API used as a busy program would:
// calls canceled at random moments racing their answers, listeners coming
// and going while events arrive, Close racing everything, on every carrier.

// auditCarriers are the carriers the audit runs on, WebSocket first.
var auditCarriers = []Carrier{CarrierWebSocket, CarrierQUIC, CarrierWebTransport, CarrierSCTP, carrierSCTPDTLS, CarrierWebRTC}

// auditRouter is testRouter with an echo of a unique string that may take
// a moment (async, 0-2 ms), and a call that waits for its ctx.
func auditRouter() *Router {
	r := testRouter()
	Handle(r, "audit/slowecho", func(ctx context.Context, s string) (string, error) {
		if n := rand.IntN(3); n > 0 {
			time.Sleep(time.Duration(n) * time.Millisecond)
		}
		return s, nil
	}, Async())
	Handle(r, "audit/hang", func(ctx context.Context, s string) (string, error) {
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-time.After(5 * time.Second):
			return s, nil
		}
	}, Async())
	return r
}

// auditSettle waits for the goroutines to fall back to base and the
// server's peers to zero, and fails with the goroutines left otherwise.
func auditSettle(t *testing.T, s *Server, base int, what string) {
	t.Helper()
	deadline := time.Now().Add(8 * time.Second)
	for {
		n := runtime.NumGoroutine()
		if n <= base && s.Peers() == 0 {
			return
		}
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			buf = buf[:runtime.Stack(buf, true)]
			t.Fatalf("%s: %d goroutines (baseline %d), %d peers left\n%s", what, n, base, s.Peers(), buf)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// auditBaseline dials and closes a client on c once, so that what a
// carrier starts once per process (a QUIC transport's goroutines, pion's)
// counts in the baseline, then reads it.
func auditBaseline(t *testing.T, e *carrierEnv, c Carrier) int {
	t.Helper()
	cl := e.dial(t, c, ClientOptions{})
	var out string
	if err := cl.Call(context.Background(), "audit/slowecho", "warm", &out); err != nil {
		t.Fatal(err)
	}
	cl.Close()
	deadline := time.Now().Add(5 * time.Second)
	for e.srv.Peers() > 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond)
	return runtime.NumGoroutine()
}

// Every call returns its own answer, or its ctx's error, whatever moment
// its ctx is canceled at or its deadline passes; a canceled call returns
// soon after the cancel, even while answers to other calls arrive and
// callers hand the reads to each other (WebSocket). A resp is never
// written after its Call returned (checked again at the end, and by the
// race detector).
func TestAuditCallsRaceTheirCancels(t *testing.T) {
	e := newCarrierEnv(t, Options{Router: auditRouter(), Limits: Limits{MaxInFlight: 1 << 20}})
	for _, carrier := range auditCarriers {
		t.Run(carrierName(carrier), func(t *testing.T) {
			base := auditBaseline(t, e, carrier)
			cl := e.dial(t, carrier, ClientOptions{})
			const workers = 12
			stopAt := time.Now().Add(2 * time.Second)
			var wg sync.WaitGroup
			var calls, canceled, late atomic.Int64
			errs := make(chan error, workers)
			type kept struct {
				want string
				got  *string
			}
			keep := make([][]kept, workers)
			for g := range workers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					r := rand.New(rand.NewPCG(uint64(g), uint64(time.Now().UnixNano())))
					for i := 0; time.Now().Before(stopAt); i++ {
						want := fmt.Sprintf("%d/%d/%s", g, i, strings.Repeat("x", r.IntN(40)))
						out := new(string)
						calls.Add(1)
						switch k := r.IntN(8); k {
						case 0, 1, 2: // a plain call
							method := "audit/slowecho"
							if k == 0 {
								method = "echo/raw"
							}
							var err error
							if method == "echo/raw" {
								var raw []byte
								err = cl.Call(context.Background(), method, []byte(want), &raw)
								*out = string(raw)
							} else {
								err = cl.Call(context.Background(), method, want, out)
							}
							if err != nil || *out != want {
								errs <- fmt.Errorf("call %q = %q, %v", want, *out, err)
								return
							}
						case 3, 4: // canceled at a random moment, racing its answer
							ctx, cancel := context.WithCancel(context.Background())
							time.AfterFunc(time.Duration(r.IntN(3000))*time.Microsecond, cancel)
							err := cl.Call(ctx, "audit/slowecho", want, out)
							cancel()
							switch {
							case err == nil && *out == want:
							case errors.Is(err, context.Canceled) && *out == "":
								canceled.Add(1)
							default:
								errs <- fmt.Errorf("canceled call %q = %q, %v", want, *out, err)
								return
							}
						case 5: // a deadline racing the answer
							ctx, cancel := context.WithTimeout(context.Background(), time.Duration(r.IntN(3000))*time.Microsecond)
							err := cl.Call(ctx, "audit/slowecho", want, out)
							cancel()
							switch {
							case err == nil && *out == want:
							case errors.Is(err, ErrTimeout) && *out == "":
							default:
								errs <- fmt.Errorf("timed call %q = %q, %v", want, *out, err)
								return
							}
						case 6, 7: // no answer coming: the cancel must end it
							ctx, cancel := context.WithCancel(context.Background())
							d := time.Duration(r.IntN(3000)) * time.Microsecond
							time.AfterFunc(d, cancel)
							start := time.Now()
							err := cl.Call(ctx, "audit/hang", want, out)
							took := time.Since(start)
							cancel()
							if !errors.Is(err, context.Canceled) {
								errs <- fmt.Errorf("hanging call %q = %q, %v", want, *out, err)
								return
							}
							if took > d+time.Second {
								late.Add(1)
								errs <- fmt.Errorf("hanging call %q canceled after %v returned after %v", want, d, took)
								return
							}
						}
						if len(keep[g]) < 64 {
							keep[g] = append(keep[g], kept{*out, out})
						}
					}
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Error(err)
			}
			time.Sleep(50 * time.Millisecond)
			for g := range keep {
				for _, k := range keep[g] {
					if *k.got != k.want {
						t.Errorf("a resp changed after its Call returned: %q, then %q", k.want, *k.got)
					}
				}
			}
			t.Logf("%d calls, %d canceled", calls.Load(), canceled.Load())
			cl.Close()
			auditSettle(t, e.srv, base, "after the calls")
		})
	}
}

// Callers that read their own answers (WebSocket) hand the read token to
// each other as their calls are canceled: each canceled call returns at
// once, whichever caller read before it. The server never answers these
// calls in time, so only the cancel can end them.
func TestAuditCanceledReadersHandOver(t *testing.T) {
	s, addr := newTestServer(t, Options{Router: auditRouter(), Limits: Limits{MaxInFlight: 1 << 20}})
	c := dialClient(t, addr, ClientOptions{})
	const workers = 3
	stopAt := time.Now().Add(3 * time.Second)
	var wg sync.WaitGroup
	var calls atomic.Int64
	errs := make(chan error, workers)
	for g := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(g), uint64(time.Now().UnixNano())))
			for time.Now().Before(stopAt) {
				if r.IntN(2) == 0 {
					// answered: the table empties now and then, and the
					// read loop hands the reads to the callers
					var out []byte
					if err := c.Call(context.Background(), "echo/raw", []byte("y"), &out); err != nil || string(out) != "y" {
						errs <- fmt.Errorf("echo = %q, %v", out, err)
						return
					}
				}
				ctx, cancel := context.WithCancel(context.Background())
				d := time.Duration(r.IntN(2000)) * time.Microsecond
				time.AfterFunc(d, cancel)
				start := time.Now()
				err := c.Call(ctx, "audit/hang", "x", nil)
				took := time.Since(start)
				cancel()
				calls.Add(1)
				if !errors.Is(err, context.Canceled) || took > d+time.Second {
					errs <- fmt.Errorf("call canceled after %v returned %v after %v", d, err, took)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	t.Logf("%d calls, %d read by their callers", calls.Load(), c.conn.shared.callerReads.Load())
	_ = s
}

// A caller that got its answer lets go of the read token before it stops
// watching its context (ctxWatch.end). Another caller that takes the token
// in between and begins reading must still be woken by its own context's
// cancel: the first caller's end cleared the record of who reads, and the
// second call waited for its answer (5 s here) past the cancel. The hook
// starts the second call while the first is between the two.
func TestAuditCancelOfReaderWhoTookTheTokenFromAnEndingReader(t *testing.T) {
	_, addr := newTestServer(t, Options{Router: auditRouter()})
	c := dialClient(t, addr, ClientOptions{})
	type result struct {
		err  error
		took time.Duration
	}
	var armed atomic.Bool
	var began atomic.Bool
	var cancelB context.CancelFunc
	var resB chan result
	hook := func(who int32) {
		if who != readerCaller || !armed.CompareAndSwap(true, false) {
			return
		}
		c.watch.mu.Lock()
		a := c.watch.reading
		c.watch.mu.Unlock()
		var ctx context.Context
		ctx, cancelB = context.WithCancel(context.Background())
		resB = make(chan result, 1)
		go func() {
			start := time.Now()
			err := c.Call(ctx, "audit/hang", "b", nil)
			resB <- result{err, time.Since(start)}
		}()
		// Wait until the second caller reads, the first still between
		// its release and its end.
		for deadline := time.Now().Add(200 * time.Millisecond); time.Now().Before(deadline); {
			c.watch.mu.Lock()
			now := c.watch.reading
			c.watch.mu.Unlock()
			if now.pc != nil && now != a {
				began.Store(true)
				return
			}
			time.Sleep(50 * time.Microsecond)
		}
	}
	testHookReleased.Store(&hook)
	defer testHookReleased.Store(nil)
	for attempt := 0; attempt < 50 && !began.Load(); attempt++ {
		// An answered call empties the table: the read loop hands the
		// reads to the callers, and the next one reads its own answer.
		var out []byte
		if err := c.Call(context.Background(), "echo/raw", []byte("x"), &out); err != nil {
			t.Fatal(err)
		}
		ctxA, cancelA := context.WithCancel(context.Background()) // a Done to watch
		armed.Store(true)
		err := c.Call(ctxA, "echo/raw", []byte("a"), &out)
		cancelA()
		armed.Store(false)
		if err != nil || string(out) != "a" {
			t.Fatalf("first call = %q, %v", out, err)
		}
		if resB != nil && !began.Load() {
			cancelB() // the second caller did not read in time: again
			<-resB
			resB = nil
		}
	}
	if !began.Load() {
		t.Skip("no caller took the read token from an ending reader in 50 attempts")
	}
	time.Sleep(20 * time.Millisecond) // the first caller's end is done
	cancelB()
	select {
	case r := <-resB:
		if !errors.Is(r.err, context.Canceled) {
			t.Fatalf("the canceled call returned %v after %v, want context.Canceled", r.err, r.took)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("the canceled call still waits 2 s after its cancel: its reader's context is not watched")
	}
}

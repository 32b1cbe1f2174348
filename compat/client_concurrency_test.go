package compat

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Concurrency tests of the client API used as a busy program would:
// calls canceled at random moments racing their answers, listeners coming
// and going while events arrive, Close racing everything, on every carrier.

// concurrencyCarriers are the carriers these tests run on, WebSocket first.
var concurrencyCarriers = []Carrier{CarrierWebSocket, CarrierQUIC, CarrierWebTransport, CarrierSCTP, carrierSCTPDTLS, CarrierWebRTC}

// concurrencyRouter is testRouter with an echo of a unique string that may take
// a moment (async, 0-2 ms), and a call that waits for its ctx.
func concurrencyRouter() *Router {
	r := testRouter()
	Handle(r, "cc/slowecho", func(ctx context.Context, s string) (string, error) {
		if n := rand.IntN(3); n > 0 {
			time.Sleep(time.Duration(n) * time.Millisecond)
		}
		return s, nil
	}, Async())
	Handle(r, "cc/hang", func(ctx context.Context, s string) (string, error) {
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-time.After(time.Minute): // far past hangBound
			return s, nil
		}
	}, Async())
	return r
}

// hangBound is how long a test waits for a call that its cancel or
// deadline must end, before it calls the call hung: a call that waits for
// cc/hang's answer, a minute away, does not pass it, and a canceled call on
// a loaded machine under -race does, by far. Tests tell such outcomes
// apart by bounds like this one, not by how soon the call returned.
const hangBound = 10 * time.Second

// settleGoroutines waits for the goroutines to fall back to base and the
// server's peers to zero, and fails with the goroutines left otherwise.
func settleGoroutines(t *testing.T, s *Server, base int, what string) {
	t.Helper()
	settleWithin(t, s, base, what, 8*time.Second)
}

func settleWithin(t *testing.T, s *Server, base int, what string, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
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

// goroutineBaseline dials and closes a client on c once, so that what a
// carrier starts once per process (a QUIC transport's goroutines, pion's)
// counts in the baseline, then reads it.
func goroutineBaseline(t *testing.T, e *carrierEnv, c Carrier) int {
	t.Helper()
	cl := e.dial(t, c, ClientOptions{})
	var out string
	if err := cl.Call(context.Background(), "cc/slowecho", "warm", &out); err != nil {
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
func TestCallsRaceTheirCancels(t *testing.T) {
	e := newCarrierEnv(t, Options{Router: concurrencyRouter(), Limits: Limits{MaxInFlight: 1 << 20}})
	for _, carrier := range concurrencyCarriers {
		t.Run(carrierName(carrier), func(t *testing.T) {
			base := goroutineBaseline(t, e, carrier)
			cl := e.dial(t, carrier, ClientOptions{})
			const workers = 12
			stopAt := time.Now().Add(time.Second)
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
							method := "cc/slowecho"
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
							err := cl.Call(ctx, "cc/slowecho", want, out)
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
							err := cl.Call(ctx, "cc/slowecho", want, out)
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
							err := cl.Call(ctx, "cc/hang", want, out)
							took := time.Since(start)
							cancel()
							if !errors.Is(err, context.Canceled) {
								errs <- fmt.Errorf("hanging call %q = %q, %v", want, *out, err)
								return
							}
							if took > d+hangBound {
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
			settleGoroutines(t, e.srv, base, "after the calls")
		})
	}
}

// Callers that read their own answers (WebSocket) hand the read token to
// each other as their calls are canceled: each canceled call returns at
// once, whichever caller read before it. The server never answers these
// calls in time, so only the cancel can end them.
func TestCanceledReadersHandOver(t *testing.T) {
	s, addr := newTestServer(t, Options{Router: concurrencyRouter(), Limits: Limits{MaxInFlight: 1 << 20}})
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
				err := c.Call(ctx, "cc/hang", "x", nil)
				took := time.Since(start)
				cancel()
				calls.Add(1)
				if !errors.Is(err, context.Canceled) || took > d+hangBound {
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
func TestCancelOfAReaderThatTookTheTokenFromAnEndingReader(t *testing.T) {
	_, addr := newTestServer(t, Options{Router: concurrencyRouter()})
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
			err := c.Call(ctx, "cc/hang", "b", nil)
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
	case <-time.After(hangBound):
		t.Fatalf("the canceled call still waits %v after its cancel: its reader's context is not watched", hangBound)
	}
}

// concurrencyStreamRouter is concurrencyRouter with the binary streams of
// streamRouter.
func concurrencyStreamRouter() *Router {
	r := concurrencyRouter()
	handleEchoStream(r)
	return r
}

// pumpEvents sends events and room emits to every peer until stop.
func pumpEvents(s *Server, room string, stop <-chan struct{}) *sync.WaitGroup {
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-time.After(200 * time.Microsecond):
			}
			for _, p := range s.snapshotPeers() {
				p.Event("tick", i)
			}
			s.Emit(room, "news", i)
		}
	}()
	return &wg
}

// Listeners are added and removed while events and room emits arrive and
// calls are answered; one blocks a moment now and then. Every listener
// left registered gets events, an off leaves no entry behind, and the
// client closes clean.
func TestListenersComeAndGo(t *testing.T) {
	e := newCarrierEnv(t, Options{Router: concurrencyRouter(), Limits: Limits{MaxInFlight: 1 << 20}})
	for _, carrier := range concurrencyCarriers {
		t.Run(carrierName(carrier), func(t *testing.T) {
			base := goroutineBaseline(t, e, carrier)
			cl := e.dial(t, carrier, ClientOptions{})
			if _, err := cl.Join(context.Background(), "r"); err != nil {
				t.Fatal(err)
			}
			var steady atomic.Int64
			offSteady := cl.OnRoom("r", "news", func(Message) { steady.Add(1) })
			stop := make(chan struct{})
			pump := pumpEvents(e.srv, "r", stop)
			stopAt := time.Now().Add(750 * time.Millisecond)
			var wg sync.WaitGroup
			errs := make(chan error, 16)
			for g := range 6 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					r := rand.New(rand.NewPCG(uint64(g), 7))
					for i := 0; time.Now().Before(stopAt); i++ {
						switch r.IntN(3) {
						case 0:
							var n atomic.Int64
							block := r.IntN(10) == 0
							fn := func(m Message) {
								n.Add(1)
								if block {
									time.Sleep(time.Millisecond)
								}
							}
							var off func()
							if r.IntN(2) == 0 {
								off = cl.On("tick", fn)
							} else {
								off = cl.OnRoom("r", "news", fn)
							}
							time.Sleep(time.Duration(r.IntN(3000)) * time.Microsecond)
							off()
							if r.IntN(4) == 0 {
								off() // twice does nothing
							}
						case 1: // a listener that removes itself
							var off atomic.Pointer[func()]
							var once sync.Once
							done := make(chan struct{})
							fn := cl.On("tick", func(Message) {
								if f := off.Load(); f != nil {
									once.Do(func() { (*f)(); close(done) })
								}
							})
							off.Store(&fn)
							select {
							case <-done:
							case <-time.After(2 * time.Second):
								errs <- fmt.Errorf("a listener got no tick in 2 s")
								fn()
								return
							}
						default:
							want := fmt.Sprintf("%d/%d", g, i)
							var out string
							ctx, cancel := context.WithCancel(context.Background())
							if r.IntN(3) == 0 {
								time.AfterFunc(time.Duration(r.IntN(1000))*time.Microsecond, cancel)
							}
							err := cl.Call(ctx, "cc/slowecho", want, &out)
							cancel()
							if !(err == nil && out == want) && !(errors.Is(err, context.Canceled) && out == "") {
								errs <- fmt.Errorf("call %q = %q, %v", want, out, err)
								return
							}
						}
					}
				}()
			}
			wg.Wait()
			cl.mu.Lock()
			if cc := cl.conn; cc != nil && cc.shared != nil {
				t.Logf("callers took the read token %d times", cc.shared.callerReads.Load())
			}
			cl.mu.Unlock()
			before := steady.Load()
			time.Sleep(100 * time.Millisecond)
			if steady.Load() == before {
				t.Error("the listener left registered gets no emits any more")
			}
			close(stop)
			pump.Wait()
			offSteady()
			close(errs)
			for err := range errs {
				t.Error(err)
			}
			cl.handlersMu.RLock()
			left := len(cl.handlers)
			cl.handlersMu.RUnlock()
			if left != 0 {
				t.Errorf("%d listener entries left after every off", left)
			}
			cl.Close()
			settleGoroutines(t, e.srv, base, "after the listeners")
		})
	}
}

// Close, twice and at once, races calls (answered, canceled, hanging),
// joins and leaves, emits and events, listeners, the server's asks whose
// handlers wait for their ctx, and streams (QUIC, WebTransport): every
// one returns, with its answer or an error of the client's end, soon
// after Close, and nothing is left running.
func TestCloseRacesEverything(t *testing.T) {
	r := concurrencyStreamRouter()
	Handle(r, "cc/ask", func(ctx context.Context, q string) (string, error) {
		var answer string
		err := PeerFrom(ctx).Ask(ctx, "ui/wait", q, &answer)
		return answer, err
	}, Async())
	e := newCarrierEnv(t, Options{Router: r, Limits: Limits{MaxInFlight: 1 << 20}})
	handlers := NewRouter()
	Handle(handlers, "ui/wait", func(ctx context.Context, q string) (string, error) {
		if rand.IntN(2) == 0 {
			return q, nil
		}
		<-ctx.Done()
		return "", ctx.Err()
	})
	for _, carrier := range concurrencyCarriers {
		t.Run(carrierName(carrier), func(t *testing.T) {
			base := goroutineBaseline(t, e, carrier)
			stop := make(chan struct{})
			pump := pumpEvents(e.srv, "r", stop)
			var okMu sync.Mutex
			okCount := map[string]int{}
			defer func() { t.Logf("succeeded before Close: %v", okCount) }()
			for round := range 6 {
				cl := e.dial(t, carrier, ClientOptions{Handlers: handlers})
				cl.On("tick", func(Message) {})
				var wg sync.WaitGroup
				var closed atomic.Bool
				var closedAt atomic.Int64
				errs := make(chan error, 64)
				check := func(what string, err error) {
					if err == nil || errors.Is(err, ErrClosed) || errors.Is(err, ErrDisconnected) || errors.Is(err, context.Canceled) || errors.Is(err, ErrTimeout) {
						return
					}
					var he *Error
					if errors.As(err, &he) && (he.Code == ErrCanceled.Code || he.Code == ErrUnavailable.Code) {
						return // an ask the client's end canceled
					}
					errs <- fmt.Errorf("round %d: %s: %v", round, what, err)
				}
				for g := range 8 {
					wg.Add(1)
					go func() {
						defer wg.Done()
						rr := rand.New(rand.NewPCG(uint64(g), uint64(round)))
						for i := 0; !closed.Load() || time.Since(time.Unix(0, closedAt.Load())) < 20*time.Millisecond; i++ {
							start := time.Now()
							var what string
							var err error
							switch rr.IntN(8) {
							case 0:
								what = "call"
								want := fmt.Sprintf("%d/%d", g, i)
								var out string
								if err = cl.Call(context.Background(), "cc/slowecho", want, &out); err == nil && out != want {
									err = fmt.Errorf("answer %q for %q", out, want)
								}
							case 1:
								what = "hanging call"
								ctx, cancel := context.WithCancel(context.Background())
								time.AfterFunc(time.Duration(rr.IntN(5000))*time.Microsecond, cancel)
								err = cl.Call(ctx, "cc/hang", "x", nil)
								cancel()
							case 2:
								what = "join/leave"
								if _, err = cl.Join(context.Background(), "r"); err == nil {
									_, err = cl.Leave(context.Background(), "r")
								}
							case 3:
								what = "emit"
								if err = cl.Emit("r", "chat", i, rr.IntN(2) == 0); err == nil {
									err = cl.Event("ev", i)
								}
							case 4:
								what = "listener"
								off := cl.OnRoom("r", "news", func(Message) {})
								time.Sleep(time.Duration(rr.IntN(1000)) * time.Microsecond)
								off()
							case 5:
								what = "ask"
								var out string
								err = cl.Call(context.Background(), "cc/ask", "q", &out)
							case 6:
								what = "stream"
								if carrier != CarrierQUIC && carrier != CarrierWebTransport {
									continue
								}
								ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
								var s *Stream
								s, err = cl.OpenStream(ctx, "file/echo", ">")
								if err == nil {
									buf := make([]byte, 4)
									if _, err = s.Write([]byte("abc")); err == nil {
										_, err = io.ReadFull(s, buf)
									}
									s.Close()
								}
								cancel()
							default:
								what = "timed call"
								ctx, cancel := context.WithTimeout(context.Background(), time.Duration(1+rr.IntN(3))*time.Millisecond)
								err = cl.Call(ctx, "cc/slowecho", "y", nil)
								cancel()
							}
							check(what, err)
							if err == nil && !closed.Load() {
								okMu.Lock()
								okCount[what]++
								okMu.Unlock()
							}
							// What Close does not end waits a minute (cc/hang)
							// or AskTimeout's 30 s (ui/wait's ask).
							if closed.Load() && time.Since(start) > hangBound {
								errs <- fmt.Errorf("round %d: %s returned %v after %v, Close being called", round, what, err, time.Since(start))
							}
						}
					}()
				}
				time.Sleep(time.Duration(5+rand.IntN(150)) * time.Millisecond)
				closedAt.Store(time.Now().UnixNano())
				closed.Store(true)
				var closers sync.WaitGroup
				for range 2 {
					closers.Add(1)
					go func() { defer closers.Done(); cl.Close() }()
				}
				finished := make(chan struct{})
				go func() { closers.Wait(); wg.Wait(); close(finished) }()
				select {
				case <-finished:
				case <-time.After(10 * time.Second):
					buf := make([]byte, 1<<20)
					buf = buf[:runtime.Stack(buf, true)]
					t.Fatalf("round %d: Close or a caller hangs\n%s", round, buf)
				}
				if err := cl.Close(); err != nil {
					t.Errorf("a third Close: %v", err)
				}
				close(errs)
				for err := range errs {
					t.Error(err)
				}
			}
			close(stop)
			pump.Wait()
			settleGoroutines(t, e.srv, base, "after Close")
		})
	}
}

// Dial's ctx is canceled at random moments of the handshake: Dial returns
// within hangBound of the cancel (its ConnectTimeout, a minute, is the
// alternative), and no connection, goroutine or server peer is left
// behind. The server keeps a handshake the client gave up on for up to
// handshakeTimeout (SCTP, WebRTC), so the goroutines are counted after
// that, once for every carrier.
//
// A client that gives up an established SCTP association ends it with an
// ABORT: one UDP packet, never retransmitted, which pion sends only if its
// write loop runs within 200 ms. A CI run on a loaded machine left one
// server peer on plain SCTP, its association alive and silent, no client
// goroutine left: by our reading of the dump its client's ABORT was lost,
// and keepalive would give the peer up only at the default IdleTimeout of
// 60 s, past the bound below. That is the protocol's answer to a lost
// ABORT, so the server here gives silent peers up after 6 s (pinged
// after 2 s), which the bound covers; the log says how many it gave up
// that way.
func TestDialCanceled(t *testing.T) {
	e := newCarrierEnv(t, Options{Router: concurrencyRouter(), KeepaliveInterval: 2 * time.Second, IdleTimeout: 6 * time.Second})
	took := map[Carrier]time.Duration{}
	for _, carrier := range concurrencyCarriers {
		goroutineBaseline(t, e, carrier)
		start := time.Now()
		cl := e.dial(t, carrier, ClientOptions{})
		took[carrier] = time.Since(start)
		cl.Close()
	}
	time.Sleep(500 * time.Millisecond)
	base := runtime.NumGoroutine()
	for _, carrier := range concurrencyCarriers {
		var ok, failed int
		for i := range 16 {
			ctx, cancel := context.WithCancel(context.Background())
			d := time.Duration(rand.Int64N(int64(took[carrier]) * 3 / 2))
			if i%4 == 0 {
				d = 0
			}
			time.AfterFunc(d, cancel)
			opts := ClientOptions{TLSConfig: e.cert.ClientTLSConfig(), DTLSConfig: e.cert.ClientDTLSConfig(), ConnectTimeout: time.Minute}
			opts.WebRTC.LoopbackOnly = true
			begin := time.Now()
			c, err := Dial(ctx, e.urls[carrier], opts)
			if time.Since(begin) > d+hangBound {
				t.Errorf("%s: Dial canceled after %v returned after %v: %v", carrierName(carrier), d, time.Since(begin), err)
			}
			cancel()
			if err == nil {
				ok++
				var out echoReq
				if err := c.Call(context.Background(), "echo/say", echoReq{Text: "x"}, &out); err != nil {
					t.Errorf("%s: a call on a client dialed with a ctx canceled later: %v", carrierName(carrier), err)
				}
				c.Close()
			} else {
				failed++
			}
		}
		t.Logf("%s: dial takes %v; %d dialed, %d canceled", carrierName(carrier), took[carrier], ok, failed)
	}
	settleWithin(t, e.srv, base, "after the canceled dials", handshakeTimeout+4*time.Second)
	if n := e.srv.Metrics().IdleTimeouts; n > 0 {
		t.Logf("%d server peers were given up for silence (their client's ABORT lost)", n)
	}
}

// A burst of calls beyond pendingScanMax in flight, so the pending table
// switches to its map and back, while a third of them are canceled at
// random moments: every call still gets its own answer or its cancel.
func TestBurstBeyondScanTable(t *testing.T) {
	e := newCarrierEnv(t, Options{Router: concurrencyRouter(), Limits: Limits{MaxInFlight: 1 << 20}})
	for _, carrier := range []Carrier{CarrierWebSocket, CarrierQUIC} {
		t.Run(carrierName(carrier), func(t *testing.T) {
			base := goroutineBaseline(t, e, carrier)
			cl := e.dial(t, carrier, ClientOptions{})
			errs := make(chan error, 1024)
			var peak atomic.Int32
			sampling := make(chan struct{})
			sampled := make(chan struct{})
			go func() {
				defer close(sampled)
				for {
					if n := cl.pending.size.Load(); n > peak.Load() {
						peak.Store(n)
					}
					select {
					case <-sampling:
						return
					case <-time.After(100 * time.Microsecond):
					}
				}
			}()
			for round := range 4 {
				var wg sync.WaitGroup
				for g := range 3 * pendingScanMax / 2 {
					wg.Add(1)
					go func() {
						defer wg.Done()
						want := fmt.Sprintf("%d/%d", round, g)
						ctx, cancel := context.WithCancel(context.Background())
						defer cancel()
						canceled := g%3 == 0
						if canceled {
							time.AfterFunc(time.Duration(rand.IntN(5000))*time.Microsecond, cancel)
						}
						var out string
						err := cl.Call(ctx, "cc/slowecho", want, &out)
						if !(err == nil && out == want) && !(canceled && errors.Is(err, context.Canceled) && out == "") {
							errs <- fmt.Errorf("call %q = %q, %v", want, out, err)
						}
					}()
				}
				wg.Wait()
			}
			close(sampling)
			<-sampled
			if peak.Load() <= pendingScanMax {
				t.Errorf("at most %d calls were in flight: the table never switched to its map", peak.Load())
			}
			close(errs)
			for err := range errs {
				t.Error(err)
			}
			cl.Close()
			settleGoroutines(t, e.srv, base, "after the bursts")
		})
	}
}

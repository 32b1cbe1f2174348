package compat

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// sharedOf returns the read token of c's current connection.
func sharedOf(t *testing.T, c *Client) *sharedReads {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.conn == nil || c.conn.shared == nil {
		t.Fatal("client has no WebSocket connection with shared reads")
	}
	return c.conn.shared
}

// callWithin makes a call and fails the test if it has not returned in 10 s:
// a caller reading for an answer that nobody wakes would hang.
func callWithin(t *testing.T, c *Client, ctx context.Context, method string, req, resp any) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- c.Call(ctx, method, req, resp) }()
	select {
	case err := <-done:
		return err
	case <-time.After(10 * time.Second):
		t.Fatalf("%s did not return in 10 s", method)
		return nil
	}
}

// One call at a time: the callers read their own answers, not the read
// loop, which hands them over through a channel.
func TestCallerReadsOwnAnswer(t *testing.T) {
	_, addr := newTestServer(t, Options{})
	for _, nb := range []bool{false, true} {
		c := dialClient(t, addr, ClientOptions{NoBatching: nb})
		s := sharedOf(t, c)
		const n = 200
		before := s.callerReads.Load()
		for i := range n {
			var out []byte
			want := fmt.Sprint(i)
			if err := c.Call(context.Background(), "echo/raw", []byte(want), &out); err != nil || string(out) != want {
				t.Fatalf("call %d = %q, %v", i, out, err)
			}
		}
		// The first call finds the read loop reading; a later one may too
		// when the machine stalls the caller past readLinger.
		if got := s.callerReads.Load() - before; got < n/2 {
			t.Fatalf("NoBatching=%v: callers read %d of %d answers themselves, want at least %d", nb, got, n, n/2)
		}
	}
}

// A caller blocked in a read for an answer that will not come in time is
// woken by whatever settles its call: ctx's deadline, ctx's cancel, the
// client's CallTimeout (the scheduler). The server's handler stalls past
// its own timeout, so no answer comes to wake the reading caller instead.
// The connection serves on.
func TestCallerReadingIsWoken(t *testing.T) {
	release := make(chan struct{})
	r := testRouter()
	Handle(r, "test/stall", func(context.Context, int) (int, error) { <-release; return 0, nil }, Async())
	_, addr := newTestServer(t, Options{Router: r})
	t.Cleanup(func() { close(release) }) // before the server's shutdown, which waits for handlers
	c := dialClient(t, addr, ClientOptions{})
	check := func(name string, err, want error) {
		t.Helper()
		if !errors.Is(err, want) {
			t.Fatalf("%s: %v, want %v", name, err, want)
		}
		var out []byte
		if err := callWithin(t, c, context.Background(), "echo/raw", []byte("after"), &out); err != nil || string(out) != "after" {
			t.Fatalf("%s: next call = %q, %v", name, out, err)
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	check("ctx deadline", callWithin(t, c, ctx, "test/stall", 0, nil), ErrTimeout)
	cancel()

	ctx, cancel = context.WithCancel(context.Background())
	time.AfterFunc(50*time.Millisecond, cancel)
	check("ctx cancel", callWithin(t, c, ctx, "test/stall", 0, nil), context.Canceled)

	short := dialClient(t, addr, ClientOptions{CallTimeout: 50 * time.Millisecond})
	if err := callWithin(t, short, context.Background(), "test/stall", 0, nil); !errors.Is(err, ErrTimeout) {
		t.Fatalf("CallTimeout: %v, want ErrTimeout", err)
	}
	var out []byte
	if err := callWithin(t, short, context.Background(), "echo/raw", []byte("x"), &out); err != nil || string(out) != "x" {
		t.Fatalf("CallTimeout: next call = %q, %v", out, err)
	}
}

// The client keeps one watch on the context its reading callers last
// passed (ctxWatch): a caller is still woken when that context, or one
// derived from it, is canceled while it reads; when it was canceled before
// the call; and when a new context replaced the watched one. Once the
// client is closed nothing stays registered with the context.
func TestCallerReadingIsWokenByWatchedContext(t *testing.T) {
	release := make(chan struct{})
	r := testRouter()
	Handle(r, "test/stall", func(context.Context, int) (int, error) { <-release; return 0, nil }, Async())
	_, addr := newTestServer(t, Options{Router: r})
	t.Cleanup(func() { close(release) })
	c := dialClient(t, addr, ClientOptions{})
	echo := func(ctx context.Context) {
		t.Helper()
		var out []byte
		if err := callWithin(t, c, ctx, "echo/raw", []byte("x"), &out); err != nil || string(out) != "x" {
			t.Fatalf("echo = %q, %v", out, err)
		}
	}
	stall := func(name string, ctx context.Context, cancel context.CancelFunc) {
		t.Helper()
		if cancel != nil {
			time.AfterFunc(50*time.Millisecond, cancel)
		}
		if err := callWithin(t, c, ctx, "test/stall", 0, nil); !errors.Is(err, context.Canceled) {
			t.Fatalf("%s: %v, want context.Canceled", name, err)
		}
		echo(context.Background())
	}

	type key struct{}
	a, cancelA := context.WithCancel(context.Background())
	echo(a) // a is watched from here on
	stall("derived context", context.WithValue(a, key{}, 1), cancelA)
	stall("context canceled before the call", a, nil)

	b, cancelB := context.WithCancel(context.Background())
	echo(b)
	stall("context that replaced the watched one", b, cancelB)

	d, cancelD := context.WithCancel(context.Background())
	defer cancelD()
	echo(d)
	c.Close()
	c.watch.mu.Lock()
	kept := c.watch.stop != nil
	c.watch.mu.Unlock()
	if kept {
		t.Fatal("the closed client still watches a context")
	}
}

// After a call nobody waits for answers, and the read loop takes the reads
// back: an event the server sends then still arrives.
func TestEventArrivesAfterCalls(t *testing.T) {
	s, addr := newTestServer(t, Options{})
	c := dialClient(t, addr, ClientOptions{})
	got := listenForNews(c)
	var out []byte
	if err := c.Call(context.Background(), "echo/raw", []byte("x"), &out); err != nil {
		t.Fatal(err)
	}
	expectNews(t, s, got, 5*time.Second, "the event sent after the last call never arrived")
}

// listenForNews registers a listener of the "news" event, whose payloads
// it passes on.
func listenForNews(c *Client) <-chan string {
	got := make(chan string, 1)
	c.On("news", func(m Message) {
		var v string
		m.Decode(&v)
		got <- v
	})
	return got
}

// expectNews sends the event "news" to every peer of s and fails with
// failure unless got receives it within wait.
func expectNews(t *testing.T, s *Server, got <-chan string, wait time.Duration, failure string) {
	t.Helper()
	for _, p := range s.snapshotPeers() {
		if err := p.Event("news", "fresh"); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case v := <-got:
		if v != "fresh" {
			t.Fatalf("event = %q", v)
		}
	case <-time.After(wait):
		t.Fatal(failure)
	}
}

// A caller that lets go of the read token and is descheduled past
// readLinger right after arming the linger timer must not leave the read
// loop waiting with no timer while the token is free: nobody would read
// the connection, and an event (or the server's close, or a ping) would
// wait for the next call or the idle timeout. The hook stalls callers'
// releases for 5 ms, which on a loaded machine a scheduler does by itself
// (a churn audit saw a call wait 55 s for it).
func TestReleaseRaceLeavesTheLoopATimer(t *testing.T) {
	s, addr := newTestServer(t, Options{})
	c := dialClient(t, addr, ClientOptions{})
	got := listenForNews(c)
	var stalled atomic.Int32
	stall := func(who int32) {
		if who == readerCaller {
			stalled.Add(1)
			time.Sleep(5 * readLinger)
		}
	}
	testHookReleased.Store(&stall)
	var out []byte
	for i := 0; stalled.Load() < 3; i++ {
		if err := c.Call(context.Background(), "echo/raw", []byte("x"), &out); err != nil || i == 1000 {
			testHookReleased.Store(nil)
			t.Fatalf("%d calls, %d read by their callers: %v", i, stalled.Load(), err)
		}
	}
	time.Sleep(10 * readLinger) // the last release and the loop's timer are done
	testHookReleased.Store(nil)
	expectNews(t, s, got, 3*time.Second, "the event sent after the calls was not read: nobody reads the connection")
}

// The connection ends while a caller reads for its answer: the call fails
// with ErrDisconnected, the client reconnects and calls again.
func TestConnectionEndsWhileCallerReads(t *testing.T) {
	s, addr := newTestServer(t, Options{})
	c := dialClient(t, addr, ClientOptions{Reconnect: Reconnect{MinDelay: 10 * time.Millisecond}})
	time.AfterFunc(50*time.Millisecond, func() {
		for _, p := range s.snapshotPeers() {
			p.closeWith(1011, "test drop")
		}
	})
	if err := callWithin(t, c, context.Background(), "test/sleep", 5000, nil); !errors.Is(err, ErrDisconnected) {
		t.Fatalf("call across the drop: %v, want ErrDisconnected", err)
	}
	var out []byte
	waitFor(t, func() bool {
		return callWithin(t, c, context.Background(), "echo/raw", []byte("again"), &out) == nil
	})
	if string(out) != "again" {
		t.Fatalf("call after reconnect = %q", out)
	}

	// Close while a caller reads: the call ends, Close returns.
	closed := make(chan error, 1)
	time.AfterFunc(50*time.Millisecond, func() { closed <- c.Close() })
	if err := callWithin(t, c, context.Background(), "test/sleep", 5000, nil); !errors.Is(err, ErrDisconnected) {
		t.Fatalf("call across Close: %v, want ErrDisconnected", err)
	}
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not return")
	}
}

// Callers come and go in every mix: alone, together, with answers late and
// timeouts firing, while events arrive. Every call gets its own answer or
// its timeout, none hangs.
func TestSharedReadsUnderMixedCalls(t *testing.T) {
	s, addr := newTestServer(t, Options{})
	c := dialClient(t, addr, ClientOptions{})
	var events sync.WaitGroup
	c.On("tick", func(Message) {})
	stop := make(chan struct{})
	events.Add(1)
	go func() {
		defer events.Done()
		for {
			select {
			case <-stop:
				return
			case <-time.After(time.Millisecond):
				for _, p := range s.snapshotPeers() {
					p.Event("tick", 1)
				}
			}
		}
	}()
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(g), 1))
			for i := range 150 {
				switch r.IntN(10) {
				case 0: // a call that times out while its caller may be reading
					ctx, cancel := context.WithTimeout(context.Background(), time.Duration(1+r.IntN(5))*time.Millisecond)
					err := c.Call(ctx, "test/sleep", 1000, nil)
					cancel()
					if !errors.Is(err, ErrTimeout) {
						errs <- fmt.Errorf("timed call: %v", err)
						return
					}
				default:
					if r.IntN(4) == 0 {
						time.Sleep(time.Duration(r.IntN(2000)) * time.Microsecond) // alone now and then
					}
					want := fmt.Sprintf("%d/%d", g, i)
					var out []byte
					if err := c.Call(context.Background(), "echo/raw", []byte(want), &out); err != nil || string(out) != want {
						errs <- fmt.Errorf("call %s = %q, %v", want, out, err)
						return
					}
				}
			}
		}()
	}
	finished := make(chan struct{})
	go func() { wg.Wait(); close(finished) }()
	select {
	case <-finished:
	case <-time.After(60 * time.Second):
		t.Fatal("calls hung")
	}
	close(stop)
	events.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// Over wss:// (TLS in Go, no descriptor to poll) callers read their own
// answers too, and a read woken by a deadline leaves the TLS stream
// usable: a timed-out call, then more calls on the same connection.
func TestSharedReadsOverTLS(t *testing.T) {
	release := make(chan struct{})
	r := testRouter()
	Handle(r, "test/stall", func(context.Context, int) (int, error) { <-release; return 0, nil }, Async())
	s, err := NewServer(Options{Router: r, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewUnstartedServer(s)
	ts.StartTLS()
	t.Cleanup(func() {
		close(release)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		s.Shutdown(ctx)
		ts.Close()
	})
	roots := x509.NewCertPool()
	roots.AddCert(ts.Certificate())
	url := "wss://" + strings.TrimPrefix(ts.URL, "https://") + "/ws"
	c, err := Dial(context.Background(), url, ClientOptions{TLSConfig: &tls.Config{RootCAs: roots}, Reconnect: Reconnect{Disabled: true}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	call := func(i int) {
		t.Helper()
		var out []byte
		want := fmt.Sprint(i)
		if err := callWithin(t, c, context.Background(), "echo/raw", []byte(want), &out); err != nil || string(out) != want {
			t.Fatalf("call %d over TLS = %q, %v", i, out, err)
		}
	}
	before := sharedOf(t, c).callerReads.Load()
	for i := range 50 {
		call(i)
	}
	if got := sharedOf(t, c).callerReads.Load() - before; got < 25 {
		t.Fatalf("callers read %d of 50 answers themselves over TLS, want at least 25", got)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := callWithin(t, c, ctx, "test/stall", 0, nil); !errors.Is(err, ErrTimeout) {
		t.Fatalf("stalled call over TLS: %v, want ErrTimeout", err)
	}
	for i := range 10 {
		call(100 + i)
	}
}

// Wake-ups in a row, as settlers send them to whoever reads (a caller's
// ctx, its deadline, a stale one for a caller gone already), each make
// the read they interrupt a wake-up that takeWake takes: none is left as
// a deadline without its flag, which the next read would take for the
// connection's end (1006 "i/o timeout").
func TestWakeUpsInARowAreEachTaken(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		if s, err := ln.Accept(); err == nil {
			accepted <- s
		}
	}()
	nc, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	peer := <-accepted
	defer peer.Close()
	c := &wsConn{nc: nc, shared: newSharedReads()}

	woken := make(chan struct{})
	go func() {
		defer close(woken)
		for range 20000 {
			c.wakeReader()
		}
	}()
	go func() {
		<-woken
		peer.Write([]byte{1}) // the read that ends the test
	}()
	buf := make([]byte, 16)
	for {
		n, err := nc.Read(buf)
		if n > 0 {
			return
		}
		if !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatal(err)
		}
		if !c.takeWake(err) {
			t.Fatal("a read interrupted by wakeReader is not a wake-up for takeWake: the reader would end the connection")
		}
	}
}

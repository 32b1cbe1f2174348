package compat

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/gobwas/ws"
	"github.com/gobwas/ws/wsutil"
	"github.com/hotpath-go/hotpath/compat/wire"
	"github.com/hotpath-go/hotpath/dispatch"
	"github.com/hotpath-go/hotpath/wsframe"
)

// Every caller returns when the connection drops under it, whatever it
// was doing. A call registered after the connection's end had failed the
// calls in flight was failed by nobody: queued behind another caller's
// packet, one with no deadline waited for ever, and Close did not release
// it (a reconnect audit: a Call, Join or Leave stuck in 4 runs of 5 of
// 1,000 drops). Without the fix, 1 run of this test in 3 failed here.
func TestCallersReturnWhenTheConnectionDrops(t *testing.T) {
	e := newCarrierEnv(t, Options{})
	for round := range 1000 {
		c := e.dial(t, CarrierWebSocket, ClientOptions{Logger: slog.New(slog.DiscardHandler), Reconnect: Reconnect{Disabled: true}})
		var wg sync.WaitGroup
		var inflight sync.Map
		for i := range 16 {
			wg.Go(func() {
				for n := 0; n < 1_000_000; n++ {
					key := [2]int{i, n}
					var err error
					switch i % 3 {
					case 0:
						inflight.Store(key, "Call")
						err = c.Call(context.Background(), "echo/raw", []byte("x"), nil)
					case 1:
						inflight.Store(key, "Join")
						_, err = c.Join(context.Background(), "r")
					case 2:
						inflight.Store(key, "Leave")
						_, err = c.Leave(context.Background(), "r")
					}
					inflight.Delete(key)
					if err != nil {
						return
					}
				}
			})
		}
		time.Sleep(time.Duration(2+round%7) * time.Millisecond)
		for _, p := range e.srv.snapshotPeers() {
			p.link.abort()
		}
		done := make(chan struct{})
		go func() { wg.Wait(); close(done) }()
		select {
		case <-done:
			c.Close()
			continue
		case <-time.After(5 * time.Second):
		}
		var stuck []string
		inflight.Range(func(_, v any) bool { stuck = append(stuck, v.(string)); return true })
		t.Errorf("round %d: %v still waiting 5 s after the connection dropped", round, stuck)
		c.Close()
		select {
		case <-done:
		case <-time.After(3 * time.Second):
			t.Fatal("and still after Close")
		}
		return
	}
}

// A Leave issued while a Join of the same room is in flight sticks: the
// Join's answer, which came after the Leave forgot the room, recorded it
// again, and the next reconnect joined the room behind the user's back
// (a reconnect audit: 5 runs of 5).
func TestLeaveDuringJoinSticksAcrossReconnect(t *testing.T) {
	joinSeen := make(chan struct{}, 1)
	s, addr := newTestServer(t, Options{AllowJoin: func(p *Peer, room string) error {
		if room == "X" {
			select {
			case joinSeen <- struct{}{}:
			default:
			}
			time.Sleep(50 * time.Millisecond) // the Leave is sent meanwhile
		}
		return nil
	}})
	connected := make(chan struct{}, 4)
	c := dialClient(t, addr, ClientOptions{Logger: slog.New(slog.DiscardHandler),
		Reconnect: Reconnect{MinDelay: 5 * time.Millisecond, MaxDelay: 5 * time.Millisecond},
		OnState: func(st State) {
			if st == Connected {
				connected <- struct{}{}
			}
		}})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	joined := make(chan error, 1)
	go func() { _, err := c.Join(ctx, "X"); joined <- err }()
	<-joinSeen
	_, err := c.Leave(ctx, "X")
	if jerr := <-joined; jerr != nil || err != nil {
		t.Fatalf("Join: %v, Leave: %v", jerr, err)
	}
	if _, err := c.Join(ctx, "Y"); err != nil { // a room that stays
		t.Fatal(err)
	}
	dropAndAwaitReconnect(t, s, connected)
	deadline := time.Now().Add(5 * time.Second)
	for s.Members("Y") != 1 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if m := s.Members("Y"); m != 1 {
		t.Fatalf("room Y has %d members after the reconnect, want 1 (rejoined)", m)
	}
	time.Sleep(200 * time.Millisecond) // the rejoins go one by one, X's maybe after Y's
	if m := s.Members("X"); m != 0 {
		t.Errorf("the client is a member of X again after the reconnect (%d), though it left it", m)
	}
}

// stateLog records a client's OnState reports.
type stateLog struct {
	mu sync.Mutex
	s  []State
}

func (l *stateLog) add(s State) {
	l.mu.Lock()
	l.s = append(l.s, s)
	l.mu.Unlock()
}

func (l *stateLog) count(s State) (n int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, x := range l.s {
		if x == s {
			n++
		}
	}
	return n
}

// A server that refuses the client after the carrier's handshake (QUIC
// and SCTP check the upgrade after it), or closes every connection at
// once, is asked again with a growing delay, and OnState never says
// Connected to it. The backoff started over at every connection the
// carrier made: 36 attempts in 3 s on QUIC with MinDelay 100 ms, each
// reported Connected (a reconnect audit).
func TestReconnectBacksOffFromARefusingServer(t *testing.T) {
	var refuse atomic.Bool
	var attempts atomic.Int32
	e := newCarrierEnv(t, Options{
		CheckOrigin: func(*http.Request) bool { return true },
		Authenticate: func(r *http.Request) (any, error) {
			if refuse.Load() {
				attempts.Add(1)
				return nil, &HTTPError{Status: http.StatusUnauthorized, Message: "token revoked"}
			}
			return "ok", nil
		},
	})
	for _, carrier := range []Carrier{CarrierWebSocket, CarrierQUIC, CarrierWebTransport, CarrierSCTP} {
		t.Run(carrierName(carrier), func(t *testing.T) {
			refuse.Store(false)
			var states stateLog
			c := e.dial(t, carrier, ClientOptions{OnState: states.add, Logger: slog.New(slog.DiscardHandler),
				Reconnect: Reconnect{MinDelay: 100 * time.Millisecond, MaxDelay: 5 * time.Second}})
			refuse.Store(true)
			attempts.Store(0)
			for _, p := range e.srv.snapshotPeers() {
				if p.Carrier() == carrier {
					p.closeWith(wsframe.CloseInternalError, "drop")
				}
			}
			time.Sleep(2 * time.Second)
			// Delays of 50-100, 100-200, 200-400, 400-800 and 800-1600 ms
			// fit at most 5 attempts in 2 s; every 100 ms would be 20.
			if n := attempts.Load(); n > 8 {
				t.Errorf("%d attempts in 2 s: no backoff", n)
			}
			if n := states.count(Connected); n > 0 {
				t.Errorf("OnState said Connected %d times, while every attempt was refused", n)
			}
			c.Close()
		})
	}
	t.Run("closed-at-once", func(t *testing.T) {
		var conns atomic.Int32
		var closeAll atomic.Bool
		s, addr := newTestServer(t, Options{OnConnect: func(p *Peer) {
			if closeAll.Load() {
				conns.Add(1)
				p.closeWith(wsframe.ClosePolicyViolation, "over quota")
			}
		}})
		c := dialClient(t, addr, ClientOptions{Logger: slog.New(slog.DiscardHandler),
			Reconnect: Reconnect{MinDelay: 100 * time.Millisecond, MaxDelay: 5 * time.Second}})
		closeAll.Store(true)
		for _, p := range s.snapshotPeers() {
			p.closeWith(wsframe.CloseInternalError, "drop")
		}
		time.Sleep(2 * time.Second)
		if n := conns.Load(); n > 8 {
			t.Errorf("%d connections in 2 s to a server that closes each at once: no backoff", n)
		}
		c.Close()
	})
}

// A reconnect to a server that hangs after the upgrade gives the
// connection up at ConnectTimeout, as Dial does, and what waited for it
// fails then. Emit, which has no context, waited for the server's
// capabilities until IdleTimeout (7 s with IdleTimeout 4 s and
// ConnectTimeout 1 s; a reconnect audit), and OnState said Connected.
// IdleTimeout is a minute here, so that the bound on Emit is a hang bound
// (hangBound) that only that wait fails.
func TestReconnectToAServerThatHangs(t *testing.T) {
	_, addr := newTestServer(t, Options{})
	ln, first := hangAfterFirst(t, addr)
	var states stateLog
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := Dial(ctx, "ws://"+ln.Addr().String()+"/ws", ClientOptions{
		Logger: slog.New(slog.DiscardHandler), ConnectTimeout: time.Second, IdleTimeout: time.Minute,
		Reconnect: Reconnect{MinDelay: 10 * time.Millisecond, MaxDelay: 20 * time.Millisecond},
		OnState:   states.add,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	(<-first).Close()
	time.Sleep(100 * time.Millisecond) // reconnected to the hung server
	start := time.Now()
	err = c.Emit("r", "e", 1, false)
	if d := time.Since(start); d > hangBound {
		t.Errorf("Emit waited %v for a server that hangs (ConnectTimeout 1 s): %v", d, err)
	}
	if err == nil {
		t.Error("Emit to a server that hangs returned nil")
	}
	if n := states.count(Connected); n > 0 {
		t.Errorf("OnState said Connected %d times to a server that hangs", n)
	}
}

// Close ends the rejoins of a reconnect: OnRejoinError was called for
// every room not rejoined yet after Close had returned (a reconnect
// audit: 36 of 40 rooms), with the error of the client's own close.
func TestCloseEndsTheRejoins(t *testing.T) {
	var slow atomic.Bool
	s, addr := newTestServer(t, Options{AllowJoin: func(p *Peer, room string) error {
		if slow.Load() {
			time.Sleep(20 * time.Millisecond)
		}
		return nil
	}})
	var closed atomic.Bool
	var after atomic.Int32
	connected := make(chan struct{}, 4)
	c := dialClient(t, addr, ClientOptions{
		Logger:    slog.New(slog.DiscardHandler),
		Reconnect: Reconnect{MinDelay: 10 * time.Millisecond, MaxDelay: 10 * time.Millisecond},
		OnState: func(st State) {
			if st == Connected {
				connected <- struct{}{}
			}
		},
		OnRejoinError: func(room string, err error, left bool) {
			if closed.Load() {
				after.Add(1)
			}
		},
	})
	ctx := context.Background()
	for i := range 40 {
		if _, err := c.Join(ctx, fmt.Sprintf("room%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	slow.Store(true)
	dropAndAwaitReconnect(t, s, connected)
	time.Sleep(100 * time.Millisecond) // a few rooms rejoined
	c.Close()
	closed.Store(true)
	time.Sleep(500 * time.Millisecond)
	if n := after.Load(); n > 0 {
		t.Errorf("OnRejoinError called %d times after Close returned", n)
	}
}

// An ask handler's ctx ends when its connection does: one waiting on it
// ran on after Close until the ask's timeout (a reconnect audit, on
// WebSocket and QUIC).
func TestAskHandlerEndsWithTheConnection(t *testing.T) {
	r := NewRouter()
	Handle(r, "test/ask", func(ctx context.Context, _ struct{}) (string, error) {
		ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		var out string
		return out, PeerFrom(ctx).Ask(ctx, "ui/block", "q", &out)
	}, Async())
	e := newCarrierEnv(t, Options{Router: r})
	for _, carrier := range []Carrier{CarrierWebSocket, CarrierQUIC} {
		t.Run(carrierName(carrier), func(t *testing.T) {
			asked := make(chan struct{}, 1)
			handlerDone := make(chan error, 1)
			asks := NewRouter()
			Handle(asks, "ui/block", func(ctx context.Context, _ string) (string, error) {
				asked <- struct{}{}
				select {
				case <-ctx.Done():
					handlerDone <- nil
				case <-time.After(10 * time.Second):
					handlerDone <- errors.New("its ctx never ended")
				}
				return "", ctx.Err()
			})
			c := e.dial(t, carrier, ClientOptions{Handlers: asks, Logger: slog.New(slog.DiscardHandler)})
			go c.Call(context.Background(), "test/ask", struct{}{}, nil)
			select {
			case <-asked:
			case <-time.After(5 * time.Second):
				t.Fatal("no ask")
			}
			c.Close()
			select {
			case err := <-handlerDone:
				if err != nil {
					t.Error(err)
				}
			case <-time.After(3 * time.Second):
				t.Error("the ask handler still runs 3 s after Close returned")
			}
		})
	}
}

// A call reading its own answer returns at its deadline while the client
// closes: it read on until the closing handshake's deadline, 3 s later,
// when the server did not answer the close (a reconnect audit: 3.1 s for
// a 300 ms ctx). The server's read loop is held until the test ends, so
// that is the alternative; the bound is half of it.
func TestCallReadingItsAnswerWhileClosing(t *testing.T) {
	r := testRouter()
	release := make(chan struct{})
	releaseOnce := sync.OnceFunc(func() { close(release) })
	t.Cleanup(releaseOnce) // before the server's, which waits for the handler
	Handle(r, "test/block", func(ctx context.Context, _ int) (string, error) {
		<-release // on the read loop: the close waits
		return "done", nil
	})
	_, addr := newTestServer(t, Options{Router: r})
	c := dialClient(t, addr, ClientOptions{Logger: slog.New(slog.DiscardHandler)})
	if err := c.Call(context.Background(), "echo/raw", []byte("x"), nil); err != nil { // the loop hands the reads over
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	res := make(chan error, 1)
	go func() {
		var out string
		res <- c.Call(ctx, "test/block", 0, &out)
	}()
	time.Sleep(100 * time.Millisecond)
	closed := make(chan struct{})
	go func() { c.Close(); close(closed) }()
	if err := <-res; !errors.Is(err, ErrTimeout) && !errors.Is(err, ErrDisconnected) && !errors.Is(err, ErrClosed) {
		t.Errorf("the call: %v", err)
	}
	if d := time.Since(start); d > closeTimeout/2 {
		t.Errorf("a call with a 300 ms ctx returned after %v; the closing handshake's deadline is %v", d, closeTimeout)
	}
	releaseOnce()
	<-closed
}

// dropAndAwaitReconnect closes every connection of s with 1011 and waits
// for connected, the client's next Connected, and for the closed
// connections' peers to be gone.
func dropAndAwaitReconnect(t *testing.T, s *Server, connected <-chan struct{}) {
	t.Helper()
	dropped := s.snapshotPeers()
	for _, p := range dropped {
		p.closeWith(wsframe.CloseInternalError, "drop")
	}
	select {
	case <-connected:
	case <-time.After(5 * time.Second):
		t.Fatal("no reconnect")
	}
	awaitPeersGone(t, s, dropped)
}

// awaitPeersGone waits until none of dropped is among s's peers. The
// dropped peers leave their rooms as their ends are handled, which under
// load may come after the client's reconnect: a room's count then still
// had them, and a check that the client rejoined (one member) passed
// without a rejoin.
func awaitPeersGone(t *testing.T, s *Server, dropped []*Peer) {
	t.Helper()
	waitFor(t, func() bool {
		live := s.snapshotPeers()
		for _, p := range dropped {
			if slices.Contains(live, p) {
				return false
			}
		}
		return true
	})
}

// hangAfterFirst listens for a client whose first connection it relays to
// the server at addr (proxy), sent on first once accepted; the next ones
// it upgrades and then never answers: a server that hangs after the
// upgrade, for a reconnection. It serves 100 connections at most.
func hangAfterFirst(t *testing.T, addr string) (ln net.Listener, first <-chan net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	ch := make(chan net.Conn, 1)
	go func() {
		for n := 0; n < 100; n++ {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			if n > 0 {
				go func() {
					defer conn.Close()
					ws.Upgrader{Protocol: func([]byte) bool { return true }}.Upgrade(conn)
					io.Copy(io.Discard, conn)
				}()
				continue
			}
			ch <- conn
			proxy(conn, addr)
		}
	}()
	return ln, ch
}

// proxy relays conn to and from a new TCP connection to addr, each way
// until either side ends.
func proxy(conn net.Conn, addr string) {
	up, err := net.Dial("tcp", addr)
	if err != nil {
		conn.Close()
		return
	}
	go func() { io.Copy(up, conn); up.Close() }()
	go func() { io.Copy(conn, up); conn.Close() }()
}

// Calls made while reconnects are refused say so. A client whose token
// was revoked failed its calls with the old connection's drop for as long
// as it tried; only the Info log had the 401. The drop's close code stays
// what CloseStatus reads.
func TestCallsWhileReconnectsAreRefused(t *testing.T) {
	var refuse atomic.Bool
	e := newCarrierEnv(t, Options{
		CheckOrigin: func(*http.Request) bool { return true },
		Authenticate: func(r *http.Request) (any, error) {
			if refuse.Load() {
				return nil, &HTTPError{Status: http.StatusUnauthorized, Message: "token revoked"}
			}
			return "ok", nil
		},
	})
	for _, carrier := range []Carrier{CarrierWebSocket, CarrierWebTransport, CarrierWebRTC, CarrierQUIC, CarrierSCTP} {
		t.Run(carrierName(carrier), func(t *testing.T) {
			refuse.Store(false)
			c := e.dial(t, carrier, ClientOptions{Logger: slog.New(slog.DiscardHandler),
				Reconnect: Reconnect{MinDelay: 20 * time.Millisecond, MaxDelay: 50 * time.Millisecond}})
			refuse.Store(true)
			for _, p := range e.srv.snapshotPeers() {
				if p.Carrier() == carrier {
					p.closeWith(wsframe.CloseInternalError, "drop")
				}
			}
			// QUIC and SCTP refuse after their handshake: the refusal is
			// the next connection's end, a 1008 with the message.
			// webtransport-go gives a refused CONNECT's status without
			// its body.
			wantText := "token revoked"
			if carrier == CarrierWebTransport {
				wantText = "HTTP 401"
			}
			var err error
			for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
				err = c.Call(context.Background(), "echo/raw", []byte("x"), nil)
				if err != nil && strings.Contains(err.Error(), wantText) {
					break
				}
			}
			if err == nil || !strings.Contains(err.Error(), wantText) {
				t.Fatalf("calls while reconnects are refused: %v; want the refusal (%q)", err, wantText)
			}
			if !errors.Is(err, ErrDisconnected) {
				t.Errorf("%v does not match ErrDisconnected", err)
			}
			if errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("%v matches context.DeadlineExceeded", err)
			}
			switch carrier {
			case CarrierQUIC, CarrierSCTP:
				if code := CloseStatus(err); code != wsframe.ClosePolicyViolation {
					t.Errorf("CloseStatus = %d, want 1008 (the refusal)", code)
				}
			default:
				var refused *HTTPError
				if !errors.As(err, &refused) || refused.Status != http.StatusUnauthorized {
					t.Errorf("errors.As(%v, *HTTPError) = %v", err, refused)
				}
				if code := CloseStatus(err); code != wsframe.CloseInternalError {
					t.Errorf("CloseStatus = %d, want 1011 (the drop's)", code)
				}
			}
			c.Close()
		})
	}
}

// OpenStream on a reconnected connection that ends before the server's
// capabilities (a refusal after the QUIC handshake) says why, as a call
// does: it returned a bare ErrDisconnected.
func TestOpenStreamOnARefusedReconnect(t *testing.T) {
	var refuse atomic.Bool
	entered := make(chan struct{}, 1)
	release := make(chan struct{})
	e := newCarrierEnv(t, Options{
		Authenticate: func(r *http.Request) (any, error) {
			if !refuse.Load() {
				return "ok", nil
			}
			select {
			case entered <- struct{}{}:
			default:
			}
			<-release
			return nil, &HTTPError{Status: http.StatusUnauthorized, Message: "token revoked"}
		},
	})
	c := e.dial(t, CarrierQUIC, ClientOptions{Logger: slog.New(slog.DiscardHandler),
		Reconnect: Reconnect{MinDelay: 20 * time.Millisecond, MaxDelay: time.Second}})
	refuse.Store(true)
	for _, p := range e.srv.snapshotPeers() {
		p.closeWith(wsframe.CloseInternalError, "drop")
	}
	select {
	case <-entered: // the reconnect's handshake is done; its upgrade waits
	case <-time.After(5 * time.Second):
		t.Fatal("no reconnect")
	}
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
		c.mu.Lock()
		current := c.conn != nil
		c.mu.Unlock()
		if current {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the reconnected connection is not the client's")
		}
	}
	opened := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, err := c.OpenStream(ctx, "file/echo", "")
		opened <- err
	}()
	time.Sleep(50 * time.Millisecond) // OpenStream waits for the capabilities
	close(release)
	err := <-opened
	if !errors.Is(err, ErrDisconnected) || CloseStatus(err) != wsframe.ClosePolicyViolation || !strings.Contains(err.Error(), "token revoked") {
		t.Fatalf("OpenStream on a refused reconnect: %v; want ErrDisconnected with the refusal's 1008", err)
	}
}

// The Joins of the rooms a client was in leave before anything else it
// sends on the reconnected connection, so an Emit made as soon as
// OnState says Connected reaches its room. The rejoins were sent after
// Connected, one at a time, each waiting for its answer: an Emit made
// meanwhile found the client not a member of the room yet, and the
// server dropped it (Metrics.DroppedEvents), as a soak run found.
func TestEmitsAfterAReconnectFollowTheRejoins(t *testing.T) {
	s, addr := newTestServer(t, Options{Router: streamRouter()}) // its conn/close event closes the sender's connection
	connected := make(chan struct{}, 4)
	c := dialClient(t, addr, ClientOptions{
		Reconnect: Reconnect{MinDelay: 10 * time.Millisecond, MaxDelay: 10 * time.Millisecond},
		OnState: func(st State) {
			if st == Connected {
				connected <- struct{}{}
			}
		},
	})
	watcher := dialClient(t, addr, ClientOptions{})
	const rooms = 40
	var got atomic.Int32
	ctx := context.Background()
	for i := range rooms {
		room := fmt.Sprintf("room%d", i)
		watcher.OnRoom(room, "hello", func(Message) { got.Add(1) })
		for _, cl := range []*Client{c, watcher} {
			if _, err := cl.Join(ctx, room); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := c.Event("conn/close", nil); err != nil {
		t.Fatal(err)
	}
	select {
	case <-connected:
	case <-time.After(10 * time.Second):
		t.Fatal("no reconnect within 10 s")
	}
	for i := range rooms {
		if err := c.Emit(fmt.Sprintf("room%d", i), "hello", i, true); err != nil {
			t.Fatalf("emit to room%d: %v", i, err)
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for got.Load() < rooms && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if n, dropped := got.Load(), s.Metrics().DroppedEvents; n != rooms || dropped != 0 {
		t.Errorf("the watcher got %d of the %d emits made once the client said Connected; the server dropped %d emits; want all and none", n, rooms, dropped)
	}
}

// The rejoins of a reconnect share their bound (rejoinTimeout): against
// a server that never answers them, every room's OnRejoinError comes
// once it has passed. Each rejoin was given 10 s of its own, one after
// the other, so the last of n rooms was reported n×10 s after the
// reconnect (a client audit); the check allows half of that.
func TestRejoinsShareOneDeadline(t *testing.T) {
	defer func(d time.Duration) { rejoinTimeout = d }(rejoinTimeout)
	// Long enough that a loaded machine's scheduling is small beside the
	// bound (4 s); the test lasts about one rejoinTimeout.
	rejoinTimeout = time.Second
	release := make(chan struct{})
	const rooms = 8
	_, failed := rejoinAfterDrop(t, rooms, ClientOptions{}, func() { <-release })
	t.Cleanup(func() { close(release) }) // before the client's Close: the server's loop is held
	bound := rooms / 2 * rejoinTimeout
	timeout := time.After(bound)
	for i := range rooms {
		select {
		case <-failed:
		case <-timeout:
			t.Fatalf("%d of %d unanswered rejoins reported within %v (rejoinTimeout %v)", i, rooms, bound, rejoinTimeout)
		}
	}
}

// The bound of the rejoins is not ConnectTimeout, and runs from the last
// answer: a server that checks each Join for 400 ms, and answers the
// rejoins of one read together at its end, rejoins every room, and none
// is reported failed, although the answers take longer than the client's
// ConnectTimeout (1 s).
func TestSlowRejoinsAreNotGivenUp(t *testing.T) {
	const rooms = 4
	s, failed := rejoinAfterDrop(t, rooms, ClientOptions{ConnectTimeout: time.Second}, func() { time.Sleep(400 * time.Millisecond) })
	for i := range rooms {
		waitFor(t, func() bool { return s.Members(fmt.Sprintf("room%d", i)) == 1 })
	}
	select {
	case f := <-failed:
		t.Errorf("a rejoin the server answered, slowly, was reported failed: %s", f)
	case <-time.After(200 * time.Millisecond):
	}
}

// rejoinAfterDrop dials a client with opts to a new test server, joins
// rooms room0, room1, ..., then has the server run slowJoin in every later
// Join check, drops the connection and waits for the client to reconnect.
// The client reconnects at once; its OnRejoinError reports on the channel
// returned with the server ("room: error").
func rejoinAfterDrop(t *testing.T, rooms int, opts ClientOptions, slowJoin func()) (*Server, <-chan string) {
	t.Helper()
	var slow atomic.Bool
	s, addr := newTestServer(t, Options{AllowJoin: func(p *Peer, room string) error {
		if slow.Load() {
			slowJoin()
		}
		return nil
	}})
	failed := make(chan string, rooms)
	connected := make(chan struct{}, 4)
	opts.Logger = slog.New(slog.DiscardHandler)
	opts.Reconnect = Reconnect{MinDelay: 10 * time.Millisecond, MaxDelay: 10 * time.Millisecond}
	opts.OnState = func(st State) {
		if st == Connected {
			connected <- struct{}{}
		}
	}
	opts.OnRejoinError = func(room string, err error, left bool) { failed <- room + ": " + err.Error() }
	c := dialClient(t, addr, opts)
	for i := range rooms {
		if _, err := c.Join(context.Background(), fmt.Sprintf("room%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	slow.Store(true)
	dropAndAwaitReconnect(t, s, connected)
	return s, failed
}

// Limits.MaxInFlight bounds the ask handlers running across reconnects:
// a handler that ignores its ctx runs on after its connection dropped,
// and counted per connection such handlers grew by MaxInFlight at every
// reconnect (a client audit). Here the bound's handlers block past a
// drop; the reconnected connection's ask is answered Overloaded, and
// once they return, asks run again.
func TestAskBoundHoldsAcrossReconnects(t *testing.T) {
	const limit = 2
	peers := make(chan *Peer, 4)
	_, addr := newTestServer(t, Options{OnConnect: func(p *Peer) { peers <- p }})
	release := make(chan struct{})
	started := make(chan struct{}, limit+1)
	var running atomic.Int32
	handlers := NewRouter()
	Handle(handlers, "ui/stuck", func(ctx context.Context, _ int) (int, error) {
		running.Add(1)
		defer running.Add(-1)
		started <- struct{}{}
		<-release // ignores its ctx
		return 1, nil
	})
	states := make(chan State, 8)
	dialClient(t, addr, ClientOptions{
		Handlers:  handlers,
		Limits:    Limits{MaxInFlight: limit},
		Logger:    slog.New(slog.DiscardHandler),
		Reconnect: Reconnect{MinDelay: time.Millisecond, MaxDelay: 10 * time.Millisecond},
		OnState:   func(s State) { states <- s },
	})
	defer close(release)
	p := <-peers
	for range limit {
		go p.Ask(context.Background(), "ui/stuck", 0, nil)
	}
	for range limit {
		select {
		case <-started:
		case <-time.After(hangBound):
			t.Fatal("the handlers did not start")
		}
	}
	p.link.abort()
	var p2 *Peer
	select {
	case p2 = <-peers:
	case <-time.After(hangBound):
		t.Fatal("no reconnect")
	}
	for s := State(0); s != Connected; {
		select {
		case s = <-states:
		case <-time.After(hangBound):
			t.Fatal("not connected again")
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), hangBound)
	defer cancel()
	if err := p2.Ask(ctx, "ui/stuck", 0, nil); !errors.Is(err, ErrOverloaded) {
		t.Fatalf("ask while the dropped connection's handlers run (%d running): %v, want ErrOverloaded", running.Load(), err)
	}
	if n := running.Load(); n > limit {
		t.Errorf("%d ask handlers run at once, limit %d", n, limit)
	}
}

// The rejoins' bound runs from when an answer came, not from when the
// client looked at it. Against a server that answers every other rejoin
// at once and never the others, the rejoins were waited for one after
// the other: each answer, picked up only after the wait for the rejoin
// before it had run out, pushed the bound on from then, and the last of
// n rooms was reported about n/2 × rejoinTimeout after the reconnect
// (note19's "Left"). Every unanswered rejoin is now reported once one
// rejoinTimeout has passed since the answers; the check allows twice it.
func TestRejoinBoundRunsFromTheAnswers(t *testing.T) {
	defer func(d time.Duration) { rejoinTimeout = d }(rejoinTimeout)
	rejoinTimeout = time.Second
	const rooms = 8
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	// serve answers the Joins of one connection: all of them (answerAll),
	// or only every other one in the order they came; it ends the
	// connection after the rooms' Joins when drop is set.
	serve := func(answerAll, drop bool) {
		nc, err := acceptRaw(ln, "json")
		if err != nil {
			return
		}
		defer nc.Close()
		nc.SetReadDeadline(time.Now().Add(2 * hangBound))
		joins := 0
		answer := func(p wire.Packet) {
			if p.Kind != dispatch.KindJoin {
				return
			}
			joins++
			if answerAll || joins%2 == 0 {
				wsutil.WriteServerBinary(nc, wire.AppendResult(nil, p.ID, fmt.Appendf(nil, `{"room":%q,"members":1}`, p.Room)))
			}
		}
		for joins < rooms || !drop {
			f, err := ws.ReadFrame(nc)
			if err != nil || f.Header.OpCode == ws.OpClose {
				return
			}
			f = ws.UnmaskFrameInPlace(f)
			p, err := wire.Decode(f.Payload)
			if err != nil {
				continue
			}
			if p.Kind != dispatch.KindBatch {
				answer(p)
				continue
			}
			for item := range p.Items() {
				if ip, err := wire.Decode(item); err == nil {
					answer(ip)
				}
			}
		}
	}
	go func() {
		serve(true, true)
		serve(false, false)
	}()
	failed := make(chan string, rooms)
	connected := make(chan struct{}, 1)
	c := dialClient(t, ln.Addr().String(), ClientOptions{
		Logger:    slog.New(slog.DiscardHandler),
		Reconnect: Reconnect{MinDelay: 10 * time.Millisecond, MaxDelay: 10 * time.Millisecond},
		OnState: func(st State) {
			if st == Connected {
				connected <- struct{}{}
			}
		},
		OnRejoinError: func(room string, err error, left bool) { failed <- room },
	})
	for i := range rooms {
		if _, err := c.Join(context.Background(), fmt.Sprintf("room%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	// The server drops the connection after the rooms' Joins; Connected
	// comes once the reconnect's rejoins are sent, before their answers.
	select {
	case <-connected:
	case <-time.After(hangBound):
		t.Fatal("no reconnect")
	}
	bound := time.After(2 * rejoinTimeout)
	for i := range rooms / 2 {
		select {
		case <-failed:
		case <-bound:
			t.Fatalf("%d of %d unanswered rejoins reported within %v (rejoinTimeout %v)", i, rooms/2, 2*rejoinTimeout, rejoinTimeout)
		}
	}
	select {
	case room := <-failed:
		t.Errorf("an answered rejoin (%s) was reported failed", room)
	default:
	}
}

// A reconnect attempt refused with Retry-After (a server at its
// MaxConnections answers 503 with one) holds the next attempt back that
// long, up to Reconnect.MaxDelay: the client asked again from MinDelay on,
// doubling, so a fleet refused by a full server came back within
// milliseconds, as often as it would have without the server's word (a
// client audit). The refusal reaches calls as an *HTTPError with
// RetryAfter. The check watches half the Retry-After for an attempt that
// must not come; a slow machine only delays attempts.
func TestReconnectHonoursRetryAfter(t *testing.T) {
	s, err := NewServer(Options{Router: testRouter(), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	var refuse atomic.Bool
	var refused atomic.Int32
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if refuse.Load() {
			refused.Add(1)
			w.Header().Set("Retry-After", "1")
			http.Error(w, "too many connections", http.StatusServiceUnavailable)
			return
		}
		s.ServeHTTP(w, r)
	})}
	go hs.Serve(ln)
	defer hs.Close()
	c := dialClient(t, ln.Addr().String(), ClientOptions{Logger: slog.New(slog.DiscardHandler),
		Reconnect: Reconnect{MinDelay: 10 * time.Millisecond, MaxDelay: 10 * time.Second}})
	refuse.Store(true)
	for _, p := range s.snapshotPeers() {
		p.link.abort()
	}
	waitFor(t, func() bool { return refused.Load() == 1 })
	time.Sleep(500 * time.Millisecond)
	if n := refused.Load(); n != 1 {
		t.Errorf("%d attempts within half the first refusal's Retry-After of 1 s, want 1", n)
	}
	err = c.Call(context.Background(), "echo/say", echoReq{Text: "x"}, nil)
	if he, ok := errors.AsType[*HTTPError](err); !ok || he.Status != http.StatusServiceUnavailable || he.RetryAfter != time.Second {
		t.Errorf("call while refused: %v, want an *HTTPError 503 with RetryAfter 1 s", err)
	}
}

func TestRetryAfterHeader(t *testing.T) {
	for _, tc := range []struct {
		value string
		min   time.Duration
		max   time.Duration
	}{
		{"", 0, 0},
		{"5", 5 * time.Second, 5 * time.Second},
		{" 120 ", 2 * time.Minute, 2 * time.Minute},
		{"-1", 0, 0},
		{"1.5", 0, 0},
		{"99999999999", 0, 0}, // over 32 bits: malformed
		{"soon", 0, 0},
		{time.Now().Add(time.Hour).UTC().Format(http.TimeFormat), 50 * time.Minute, time.Hour},
		{"Mon, 01 Jan 2001 00:00:00 GMT", 0, 0}, // past
	} {
		h := http.Header{}
		if tc.value != "" {
			h.Set("Retry-After", tc.value)
		}
		if got := retryAfter(h); got < tc.min || got > tc.max {
			t.Errorf("Retry-After %q: %v, want %v to %v", tc.value, got, tc.min, tc.max)
		}
	}
}

// Emit, Event and EmitUnreliable on a reconnected connection wait for
// its server's capabilities; when the connection ends first (a QUIC or
// SCTP server refuses a client after its handshake with a close), they
// fail with ErrDisconnected joined with that close, as a call does. They
// failed with a bare ErrDisconnected, whose CloseStatus is 0 (a client
// audit). An Event that comes late, after the end, reads the same error
// from the client: the test cannot fail for that.
func TestEmitWaitingForAReconnectGetsItsClose(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	drop, up, refuse := make(chan struct{}), make(chan struct{}), make(chan struct{})
	go func() {
		nc, err := acceptRaw(ln, "json")
		if err != nil {
			return
		}
		<-drop
		nc.Close()
		// The reconnect: upgraded, its capabilities read, none sent back.
		nc, err = ln.Accept()
		if err != nil {
			return
		}
		defer nc.Close()
		if _, err := (ws.Upgrader{Protocol: func(p []byte) bool { return string(p) == Subprotocol }}).Upgrade(nc); err != nil {
			return
		}
		if _, err := ws.ReadFrame(nc); err != nil {
			return
		}
		close(up)
		<-refuse
		wsutil.WriteServerMessage(nc, ws.OpClose, ws.NewCloseFrameBody(ws.StatusPolicyViolation, "refused"))
		nc.SetReadDeadline(time.Now().Add(hangBound))
		for { // up to the client's answer: a close with unread bytes resets
			if f, err := ws.ReadFrame(nc); err != nil || f.Header.OpCode == ws.OpClose {
				return
			}
		}
	}()
	c := dialClient(t, ln.Addr().String(), ClientOptions{Logger: slog.New(slog.DiscardHandler),
		Reconnect: Reconnect{MinDelay: 10 * time.Millisecond, MaxDelay: 10 * time.Millisecond}})
	close(drop)
	select {
	case <-up:
	case <-time.After(hangBound):
		t.Fatal("no reconnect")
	}
	waitFor(t, func() bool { // the reconnect is the client's connection
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.conn != nil
	})
	emitted := make(chan error, 1)
	go func() { emitted <- c.Event("note", "x") }()
	time.Sleep(100 * time.Millisecond) // Event waits for the capabilities
	close(refuse)
	select {
	case err := <-emitted:
		if !errors.Is(err, ErrDisconnected) || CloseStatus(err) != wsframe.ClosePolicyViolation {
			t.Errorf("Event on a reconnect refused with 1008: %v (close status %d), want ErrDisconnected with 1008", err, CloseStatus(err))
		}
	case <-time.After(hangBound):
		t.Fatal("Event still waits")
	}
}

// OnRejoinError may close the client (a program that gives up when it
// cannot get back into its room). Close waited for the client's
// goroutines, one of which was running OnRejoinError, waiting for Close:
// it never returned (a client audit). Close from OnRejoinError returns
// at once, as it does from OnState and the listeners, and the client
// finishes closing when the callback returns.
func TestCloseFromOnRejoinError(t *testing.T) {
	var refuse atomic.Bool
	s, addr := newTestServer(t, Options{AllowJoin: func(p *Peer, room string) error {
		if refuse.Load() {
			return ErrUnauthorized
		}
		return nil
	}})
	var c *Client
	closed := make(chan struct{})
	connected := make(chan struct{}, 4)
	c = dialClient(t, addr, ClientOptions{
		Logger:    slog.New(slog.DiscardHandler),
		Reconnect: Reconnect{MinDelay: 10 * time.Millisecond, MaxDelay: 10 * time.Millisecond},
		OnState: func(st State) {
			if st == Connected {
				connected <- struct{}{}
			}
		},
		OnRejoinError: func(room string, err error, left bool) {
			c.Close()
			close(closed)
		},
	})
	if _, err := c.Join(context.Background(), "lobby"); err != nil {
		t.Fatal(err)
	}
	refuse.Store(true)
	dropAndAwaitReconnect(t, s, connected)
	select {
	case <-closed:
	case <-time.After(hangBound):
		t.Fatal("Close called from OnRejoinError has not returned")
	}
	done := make(chan struct{})
	go func() { c.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(hangBound):
		t.Fatal("the client did not finish closing after OnRejoinError returned")
	}
}

// A refused upgrade's *HTTPError holds the body's first 512 bytes as its
// Message; the cut split a character of a longer body (or the body was
// not UTF-8), and the error's text was not valid UTF-8 (a client audit).
func TestRefusalMessageIsValidUTF8(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// 601 bytes: the 512th is the first byte of a two-byte character.
		http.Error(w, "x"+strings.Repeat("é", 300), http.StatusUnauthorized)
	})}
	go hs.Serve(ln)
	defer hs.Close()
	ctx, cancel := context.WithTimeout(context.Background(), hangBound)
	defer cancel()
	_, err = Dial(ctx, "ws://"+ln.Addr().String()+"/ws", ClientOptions{Logger: slog.New(slog.DiscardHandler)})
	he, ok := errors.AsType[*HTTPError](err)
	if !ok || he.Status != http.StatusUnauthorized {
		t.Fatalf("Dial to a refusing server: %v, want an *HTTPError 401", err)
	}
	if !utf8.ValidString(he.Message) || len(he.Message) > 512 || !strings.HasPrefix(he.Message, "xéé") {
		t.Errorf("refusal message of %d bytes (valid UTF-8: %v): %q", len(he.Message), utf8.ValidString(he.Message), he.Message)
	}
}

// After a refusal with Retry-After, the next attempt waits from the
// Retry-After to half again as long, drawn at random: waiting exactly
// Retry-After, every client a full server refused at once came back at
// once, at the moment it named.
func TestReconnectDelayAfterRetryAfterIsSpread(t *testing.T) {
	const retryAfter = 5 * time.Second
	seen := map[time.Duration]bool{}
	for range 200 {
		d := reconnectDelay(100*time.Millisecond, retryAfter)
		if d < retryAfter || d > retryAfter*3/2 {
			t.Fatalf("delay %v after a Retry-After of %v, want %v to %v", d, retryAfter, retryAfter, retryAfter*3/2)
		}
		seen[d] = true
	}
	if len(seen) < 100 {
		t.Errorf("%d distinct delays in 200 draws after the same Retry-After: the fleet it refused comes back together", len(seen))
	}
	for range 200 {
		if d := reconnectDelay(time.Second, 0); d < time.Second/2 || d > time.Second {
			t.Fatalf("delay %v for a step of 1 s without Retry-After, want 500 ms to 1 s", d)
		}
	}
}

// A reconnected connection whose server sends no capabilities within
// ConnectTimeout is given up with the client's close, 1000, as a Dial
// that gives up closes its connection (TestDialGivingUpSendsItsClose):
// the server, held in OnConnect, reads it once released. It was dropped,
// and the server saw 1006. The close does not wait for the answer, which
// the held server never sends, so the next attempt follows at once: one
// that waited would come closeTimeout later. The bound, ConnectTimeout
// and half of closeTimeout from the held connection to the client
// Connected again, tells the two apart.
func TestReconnectGivenUpSendsItsClose(t *testing.T) {
	// Each waits out ConnectTimeout: one carrier per way a link closes.
	eachHeldConnect(t, closeWayCarriers, "after the clients' Close", func(t *testing.T, e *heldConnectEnv, carrier Carrier) {
		const connectTimeout = time.Second
		connected := make(chan struct{}, 1) // a reconnect's: Dial reports no state
		c := e.dial(t, carrier, ClientOptions{Logger: slog.New(slog.DiscardHandler), ConnectTimeout: connectTimeout,
			Reconnect: Reconnect{MinDelay: 10 * time.Millisecond, MaxDelay: 20 * time.Millisecond},
			OnState: func(st State) {
				if st == Connected {
					select {
					case connected <- struct{}{}:
					default:
					}
				}
			}})
		dialed, err := c.current()
		if err != nil {
			t.Fatal(err)
		}
		release := e.holdConnects(t)
		e.dropPeers()
		p := e.awaitHeld(t, "no reconnect") // the next attempt is served
		held := time.Now()
		select {
		case <-connected:
			t.Logf("Connected again %v after the held connection", time.Since(held))
		case <-time.After(connectTimeout + closeTimeout/2):
			t.Errorf("not Connected again %v past ConnectTimeout: giving up the held connection waits for the answer to its close", closeTimeout/2)
		}
		if cc, _ := c.current(); cc == dialed {
			t.Error("the client is still on its first connection")
		}
		release()
		checkClientClose(t, e.awaitEnd(t, p))
	})
}

// Close that comes as a reconnect attempt has made its connection, before
// the attempt hands it to the client, ends that connection, never
// started, with the client's close, 1000 (link.refuse): the attempt
// drops it no more, which the server saw as 1006. The hook holds the
// attempt there until Close has begun, with the server holding the
// connection in OnConnect, reading nothing: Close does not wait for an
// answer, and the server reads the close once released. The bound on
// Close, half of closeTimeout, tells one that waits from one that does
// not.
func TestCloseAsAReconnectIsMadeSendsItsClose(t *testing.T) {
	eachHeldConnect(t, closeCarriers, "after the clients' Close", func(t *testing.T, e *heldConnectEnv, carrier Carrier) {
		c := e.dial(t, carrier, ClientOptions{Logger: slog.New(slog.DiscardHandler),
			Reconnect: Reconnect{MinDelay: 10 * time.Millisecond, MaxDelay: 20 * time.Millisecond}})
		release := e.holdConnects(t)
		peers, closed := make(chan *Peer, 1), make(chan struct{})
		hook := func() {
			var p *Peer // nil: the server never had the connection
			select {
			case p = <-e.held:
			case <-time.After(hangBound):
			}
			peers <- p
			go func() { c.Close(); close(closed) }()
			<-c.closedCh() // Close has begun
		}
		testHookReconnectDialed.Store(&hook)
		defer testHookReconnectDialed.Store(nil)
		e.dropPeers()
		var p *Peer
		select {
		case p = <-peers:
		case <-time.After(2 * hangBound):
			t.Fatal("no reconnect")
		}
		e.hold.Store(nil)
		if p == nil {
			t.Fatal("the server never had the reconnected connection")
		}
		wantCloseUnawaited(t, closed)
		release()
		checkClientClose(t, e.awaitEnd(t, p))
	})
}

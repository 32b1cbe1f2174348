package compat

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// roomTableCheck reports the rooms in the server's table and checks each
// one's members slice against its index.
func roomTableCheck(t *testing.T, s *Server) int {
	t.Helper()
	s.rooms.mu.RLock()
	defer s.rooms.mu.RUnlock()
	for name, r := range s.rooms.byName {
		r.mu.RLock()
		if len(r.members) != len(r.index) {
			t.Errorf("room %q: %d members in the slice, %d in the index", name, len(r.members), len(r.index))
		}
		seen := map[*Peer]bool{}
		for i, p := range r.members {
			if seen[p] {
				t.Errorf("room %q: peer %d twice in the members", name, p.ID())
			}
			seen[p] = true
			if j, ok := r.index[p]; !ok || j != i {
				t.Errorf("room %q: peer %d at %d, index says %d (%v)", name, p.ID(), i, j, ok)
			}
		}
		r.mu.RUnlock()
	}
	return len(s.rooms.byName)
}

// Server.Join and Server.Leave of one peer and one room from two
// goroutines: the room's members and index stay one entry per member, and
// once the peer has left (and closed) the room is gone.
func TestServerJoinLeaveSamePeerRace(t *testing.T) {
	peers := make(chan *Peer, 1)
	s, addr := newTestServer(t, Options{NoPresence: true, OnConnect: func(p *Peer) { peers <- p }})
	c := dialClient(t, addr, ClientOptions{Reconnect: Reconnect{Disabled: true}})
	p := <-peers
	deadline := time.Now().Add(time.Second)
	for round := 0; time.Now().Before(deadline); round++ {
		var wg sync.WaitGroup
		for g := 0; g < 2; g++ {
			wg.Add(2)
			go func() {
				defer wg.Done()
				for i := 0; i < 200; i++ {
					s.Join(p, "r")
				}
			}()
			go func() {
				defer wg.Done()
				for i := 0; i < 200; i++ {
					s.Leave(p, "r")
				}
			}()
		}
		wg.Wait()
		roomTableCheck(t, s)
		if n := s.Leave(p, "r"); n != 0 {
			t.Fatalf("round %d: %d members after the only member left", round, n)
		}
		if n := roomTableCheck(t, s); n != 0 || t.Failed() {
			t.Fatalf("round %d: %d rooms after the only member left", round, n)
		}
	}
	c.Close()
	waitFor(t, func() bool { return s.Peers() == 0 })
}

// A connection whose OnConnect panicked ends as any other does for the
// Peer the hook was given (and may have handed to other goroutines): its
// Context is canceled, its Asks fail at once, and Server.Join refuses it
// with ErrClosed instead of adding a dead member to the room for good.
func TestOnConnectPanicEndsThePeer(t *testing.T) {
	peers := make(chan *Peer, 1)
	asked := make(chan error, 1)
	s, addr := newTestServer(t, Options{
		AskTimeout: 20 * time.Second,
		OnConnect: func(p *Peer) {
			peers <- p
			started := make(chan struct{})
			go func() {
				close(started)
				asked <- p.Ask(context.Background(), "nobody/answers", nil, nil)
			}()
			<-started
			time.Sleep(10 * time.Millisecond) // the Ask is pending, most often
			panic("boom")
		},
	})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if c, err := Dial(ctx, "ws://"+addr+"/ws", ClientOptions{Reconnect: Reconnect{Disabled: true}}); err == nil {
		c.Close()
		t.Fatal("Dial succeeded past an OnConnect that panicked")
	}
	p := <-peers
	select {
	case <-p.Context().Done():
	case <-time.After(2 * time.Second):
		t.Error("the Peer's Context is not canceled after its OnConnect panicked")
	}
	select {
	case err := <-asked:
		if err == nil {
			t.Error("an Ask of the Peer whose OnConnect panicked succeeded")
		}
	case <-time.After(2 * time.Second):
		t.Error("an Ask of the Peer whose OnConnect panicked is still waiting")
	}
	if _, err := s.Join(p, "r"); !errors.Is(err, ErrClosed) {
		t.Errorf("Server.Join of the Peer whose OnConnect panicked: %v, want ErrClosed", err)
	}
	if n := s.Members("r"); n != 0 {
		t.Errorf("%d members in a room only the ended Peer joined", n)
	}
	s.Leave(p, "r")
	waitFor(t, func() bool { return s.Peers() == 0 && s.Metrics().Connections == 0 })
}

// Shutdown called from a synchronous handler (an admin method, say) waits
// for its own connection, which cannot end while that handler runs: it
// must still return once its ctx ends, as the docs say, and not hang.
func TestShutdownFromHandlerReturnsByItsCtx(t *testing.T) {
	var s *Server
	returned := make(chan error, 1)
	r := testRouter()
	Handle(r, "admin/stop", func(ctx context.Context, _ struct{}) (struct{}, error) {
		sctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		returned <- s.Shutdown(sctx)
		return struct{}{}, nil
	})
	s, err := NewServer(Options{Router: r, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go s.Serve(ln) // no Shutdown in a cleanup: it would hang with the bug
	c := dialClient(t, ln.Addr().String(), ClientOptions{Reconnect: Reconnect{Disabled: true}})
	go c.Call(context.Background(), "admin/stop", nil, nil)
	select {
	case err := <-returned:
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Shutdown from a handler: %v, want its ctx's deadline", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Shutdown called from a handler did not return 5 s after its ctx ended")
	}
	waitFor(t, func() bool { return s.Peers() == 0 })
}

// Members that stay in a room while others join and leave it from many
// goroutines end with the room's true count in the last presence event
// they got, coalesced or one per change. One per change, every event has
// been sent when Join or Leave returns, so an emit made after them marks
// the end of a round's events: a member that got it has all of them.
func TestPresenceConvergesUnderChurn(t *testing.T) {
	for _, interval := range []time.Duration{-1, 10 * time.Millisecond} {
		t.Run(interval.String(), func(t *testing.T) {
			var mu sync.Mutex
			var peers []*Peer
			s, addr := newTestServer(t, Options{PresenceInterval: interval, OnConnect: func(p *Peer) {
				mu.Lock()
				peers = append(peers, p)
				mu.Unlock()
			}})
			const stay, churn = 3, 6
			last := make([]atomic.Int64, stay)
			marks := make([]atomic.Int64, stay) // the last round marked
			for i := range stay {
				c := dialClient(t, addr, ClientOptions{Reconnect: Reconnect{Disabled: true}})
				for _, ev := range []string{"$join", "$leave"} {
					c.OnRoom("p", ev, func(m Message) {
						var pp presencePayload
						if err := m.Decode(&pp); err == nil {
							last[i].Store(int64(pp.Members))
						}
					})
				}
				c.OnRoom("p", "mark", func(m Message) {
					var round int64
					if err := m.Decode(&round); err == nil {
						marks[i].Store(round)
					}
				})
				if _, err := c.Join(context.Background(), "p"); err != nil {
					t.Fatal(err)
				}
			}
			for range churn {
				dialClient(t, addr, ClientOptions{Reconnect: Reconnect{Disabled: true}})
			}
			waitFor(t, func() bool { return s.Peers() == stay+churn })
			mu.Lock()
			movers := append([]*Peer(nil), peers[stay:]...)
			mu.Unlock()
			for round := range 20 {
				var wg sync.WaitGroup
				for i, p := range movers {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for k := range 20 + (i*i+round)%3%2 { // joined at the end when odd
							if k%2 == 0 {
								s.Join(p, "p")
							} else {
								s.Leave(p, "p")
							}
						}
					}()
				}
				wg.Wait()
				want := int64(s.Members("p"))
				mark := int64(round + 1)
				if interval < 0 {
					if _, err := s.Emit("p", "mark", mark); err != nil {
						t.Fatal(err)
					}
				}
				deadline := time.Now().Add(2 * time.Second)
				for i := range stay {
					// Coalesced, the last event comes an interval after
					// the round: until then the count may still change.
					done := func() bool { return last[i].Load() == want }
					if interval < 0 {
						done = func() bool { return marks[i].Load() == mark }
					}
					for !done() && time.Now().Before(deadline) {
						time.Sleep(5 * time.Millisecond)
					}
					if got := last[i].Load(); !done() || got != want {
						t.Fatalf("round %d: member %d's last presence event says %d members, the room has %d", round, i, got, want)
					}
				}
			}
		})
	}
}

// A busy application drives the server's API from many goroutines on
// every carrier while peers join and leave (themselves and by
// Server.Join/Leave), are asked, sent events, closed by the server and
// reconnect: no member gets a room emit twice or out of order,
// OnDisconnect runs once per OnConnect and no synchronous handler after
// it, every Ask returns, and once the clients are gone the connections
// gauge is 0, the room table empty and, after Shutdown (twice at once),
// no goroutine is left.
func TestServerAPIUnderConcurrentUse(t *testing.T) {
	before := runtime.NumGoroutine()
	t.Run("serve", func(t *testing.T) {
		var (
			s                 *Server
			mu                sync.Mutex
			live              = map[*Peer]bool{}
			gone              = map[*Peer]bool{}
			connects, discons atomic.Int64
			asksOut, asksIn   atomic.Int64
		)
		fail := func(format string, args ...any) { t.Errorf(format, args...) }
		r := testRouter()
		Handle(r, "work/ask", func(ctx context.Context, _ struct{}) (struct{}, error) {
			asksOut.Add(1)
			defer asksIn.Add(1)
			actx, cancel := context.WithTimeout(ctx, 2*time.Second)
			defer cancel()
			PeerFrom(ctx).Ask(actx, "ping", nil, nil)
			s.Emit("all", "side", 0)
			return struct{}{}, nil
		}, Async())
		Handle(r, "work/mark", func(ctx context.Context, _ struct{}) (struct{}, error) {
			p := PeerFrom(ctx)
			mu.Lock()
			if gone[p] {
				fail("peer %d: a synchronous handler ran after its OnDisconnect", p.ID())
			}
			mu.Unlock()
			s.Join(p, "r0")
			return struct{}{}, nil
		})
		e := newCarrierEnv(t, Options{
			Router:           r,
			PresenceInterval: 5 * time.Millisecond,
			AllowJoin: func(p *Peer, room string) error {
				if room == "deny" {
					return ErrUnauthorized
				}
				return nil
			},
			OnConnect: func(p *Peer) {
				connects.Add(1)
				if _, err := s.Join(p, "all"); err != nil {
					fail("peer %d: Server.Join from OnConnect: %v", p.ID(), err)
				}
				mu.Lock()
				live[p] = true
				mu.Unlock()
			},
			OnDisconnect: func(p *Peer, err error) {
				discons.Add(1)
				mu.Lock()
				if gone[p] || !live[p] {
					fail("peer %d: OnDisconnect again, or without OnConnect", p.ID())
				}
				delete(live, p)
				gone[p] = true
				mu.Unlock()
				s.Leave(p, "all") // it left already: a no-op
				s.Emit("r1", "bye", p.ID())
			},
		})
		s = e.srv
		randomPeer := func(rng *rand.Rand) *Peer {
			mu.Lock()
			defer mu.Unlock()
			for p := range live {
				if rng.IntN(3) == 0 {
					return p
				}
			}
			for p := range live {
				return p
			}
			return nil
		}
		handlers := NewRouter()
		Handle(handlers, "ping", func(ctx context.Context, _ struct{}) (struct{}, error) { return struct{}{}, nil })
		carriers := append([]Carrier{CarrierWebSocket}, goCarriers...)
		var clients []*Client
		for _, c := range carriers {
			cl := e.dial(t, c, ClientOptions{Handlers: handlers, Reconnect: Reconnect{MinDelay: 10 * time.Millisecond, MaxDelay: 50 * time.Millisecond}})
			var last atomic.Int64
			cl.OnRoom("all", "tick", func(m Message) {
				var seq int64
				if err := m.Decode(&seq); err != nil {
					return
				}
				if prev := last.Swap(seq); seq <= prev {
					fail("%s: tick %d after tick %d", carrierName(c), seq, prev)
				}
			})
			clients = append(clients, cl)
		}
		stop := make(chan struct{})
		var wg sync.WaitGroup
		loop := func(seed uint64, pause time.Duration, body func(rng *rand.Rand)) {
			wg.Add(1)
			go func() {
				defer wg.Done()
				rng := rand.New(rand.NewPCG(seed, 1))
				for {
					select {
					case <-stop:
						return
					case <-time.After(pause):
					}
					body(rng)
				}
			}()
		}
		var seq int64
		loop(1, time.Millisecond, func(*rand.Rand) {
			seq++
			s.Emit("all", "tick", seq)
		})
		loop(2, time.Millisecond, func(rng *rand.Rand) {
			if p := randomPeer(rng); p != nil {
				room := fmt.Sprintf("r%d", rng.IntN(4))
				if rng.IntN(2) == 0 {
					s.Join(p, room)
				} else {
					s.Leave(p, room)
				}
				s.EmitExcept(room, p, "x", 1)
			}
		})
		loop(3, 5*time.Millisecond, func(rng *rand.Rand) {
			if p := randomPeer(rng); p != nil {
				p.Event("ev", 1)
				ctx, cancel := context.WithTimeout(context.Background(), time.Second)
				p.Ask(ctx, "ping", nil, nil)
				cancel()
			}
		})
		loop(4, 300*time.Millisecond, func(rng *rand.Rand) {
			if p := randomPeer(rng); p != nil {
				p.Close()
			}
		})
		for i, cl := range clients {
			loop(uint64(10+i), 2*time.Millisecond, func(rng *rand.Rand) {
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
				defer cancel()
				room := fmt.Sprintf("r%d", rng.IntN(4))
				switch rng.IntN(5) {
				case 0:
					cl.Join(ctx, room)
				case 1:
					cl.Leave(ctx, room)
				case 2:
					cl.Call(ctx, "work/ask", nil, nil)
				case 3:
					cl.Call(ctx, "work/mark", nil, nil)
				case 4:
					if _, err := cl.Join(ctx, "deny"); err == nil {
						fail("a Join AllowJoin refuses succeeded")
					}
				}
			})
		}
		time.Sleep(2 * time.Second)
		close(stop)
		wg.Wait()
		for _, cl := range clients {
			cl.Close()
		}
		deadline := time.Now().Add(10 * time.Second)
		for time.Now().Before(deadline) && (s.Peers() != 0 || s.Metrics().Connections != 0 || connects.Load() != discons.Load() || asksOut.Load() != asksIn.Load()) {
			time.Sleep(10 * time.Millisecond)
		}
		if s.Peers() != 0 || s.Metrics().Connections != 0 || connects.Load() != discons.Load() || asksOut.Load() != asksIn.Load() {
			t.Fatalf("after the clients closed: %d peers, gauge %d, %d OnConnect and %d OnDisconnect, %d asking handlers of %d returned", s.Peers(), s.Metrics().Connections, connects.Load(), discons.Load(), asksIn.Load(), asksOut.Load())
		}
		if n := roomTableCheck(t, s); n != 0 {
			t.Errorf("%d rooms left with no connection", n)
		}
		t.Logf("%d connections, %d ticks", connects.Load(), seq)
		var sd sync.WaitGroup
		for range 2 {
			sd.Add(1)
			go func() {
				defer sd.Done()
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				if err := s.Shutdown(ctx); err != nil {
					t.Errorf("Shutdown: %v", err)
				}
			}()
		}
		sd.Wait()
	})
	checkGoroutinesBack(t, before, 10*time.Second, "after Shutdown")
}

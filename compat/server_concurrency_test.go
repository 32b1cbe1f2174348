package compat

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"sync"
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

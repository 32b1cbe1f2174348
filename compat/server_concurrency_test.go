package compat

import (
	_ "context"
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

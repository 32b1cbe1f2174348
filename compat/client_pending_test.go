package compat

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

func TestPendingTableModel(t *testing.T) {
	var tbl pendingTable
	model := map[uint32]*pendingCall{}
	rng := rand.New(rand.NewPCG(3, 4))
	next := uint32(0)
	for range 20000 {
		if rng.IntN(2) == 0 || len(model) == 0 {
			next++
			pc := &pendingCall{id: next}
			tbl.add(pc)
			model[next] = pc
		} else {
			// remove a random pending id, or one never added
			id := uint32(rng.IntN(int(next)+2) + 1)
			if got, want := tbl.remove(id), model[id]; got != want {
				t.Fatalf("remove(%d) = %v, want %v", id, got, want)
			}
			delete(model, id)
		}
		if tbl.len() != len(model) {
			t.Fatalf("len = %d, model %d", tbl.len(), len(model))
		}
	}
	for id, pc := range model {
		if tbl.get(id) != pc {
			t.Fatalf("get(%d) lost", id)
		}
	}
	if n := len(tbl.drain()); n != len(model) || tbl.len() != 0 {
		t.Fatalf("drain returned %d of %d", n, len(model))
	}
}

// BenchmarkPendingLookup measures what decided pendingScanMax: finding and
// removing the call an answer belongs to, with n calls in flight, by a
// linear scan of a slice and by a map. Answers come back in random order.
func BenchmarkPendingLookup(b *testing.B) {
	for _, n := range []int{1, 8, 32, 64, 128, 256, 512} {
		ids := make([]uint32, n)
		for i := range ids {
			ids[i] = uint32(i + 1)
		}
		order := rand.New(rand.NewPCG(1, 1)).Perm(n)
		calls := make([]*pendingCall, n)
		for i := range calls {
			calls[i] = &pendingCall{id: ids[i]}
		}
		b.Run(fmt.Sprintf("scan/%d", n), func(b *testing.B) {
			small := make([]*pendingCall, 0, n)
			for b.Loop() {
				small = append(small[:0], calls...)
				for _, i := range order {
					id := ids[i]
					for j, p := range small {
						if p.id == id {
							last := len(small) - 1
							small[j] = small[last]
							small = small[:last]
							break
						}
					}
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/answer")
		})
		b.Run(fmt.Sprintf("map/%d", n), func(b *testing.B) {
			m := make(map[uint32]*pendingCall, n)
			for b.Loop() {
				for _, pc := range calls {
					m[pc.id] = pc
				}
				for _, i := range order {
					delete(m, ids[i])
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/answer")
		})
	}
}

package dispatch

import (
	"fmt"
	"slices"
	"testing"
)

// sink is what every benchmarked handler writes to, so no call can be
// optimized away.
type sink struct{ n int }

// kindTable is the function-table shape: one handler per possible kind
// byte, so indexing needs no bounds check.
type kindTable [256]func(*sink, []byte) error

//go:noinline
func kindTableCall(t *kindTable, s *sink, k Kind, body []byte) error {
	if f := t[k]; f != nil {
		return f(s, body)
	}
	return &UnknownKindError{Kind: k}
}

// kindSeq is the sequence of kinds a benchmark dispatches, cycled. It is
// long enough (64 Ki entries) that a branch predictor cannot learn a mixed
// sequence, and its length is a power of two so the index costs a mask.
type kindSeq [1 << 16]Kind

func constSeq(k Kind) *kindSeq {
	var seq kindSeq
	for i := range seq {
		seq[i] = k
	}
	return &seq
}

// mixedSeq spreads kinds 1..n over the sequence in an order the branch
// predictor cannot learn within one pass.
func mixedSeq(n int) *kindSeq {
	var seq kindSeq
	x := uint32(2463534242)
	for i := range seq {
		x ^= x << 13
		x ^= x >> 17
		x ^= x << 5
		seq[i] = Kind(1 + x%uint32(n))
	}
	return &seq
}

// BenchmarkKindShapes is the benchmark that chose the dispatcher's shape:
// each shape calls a real (not inlined) handler for the kind of the packet,
// at the first kind, the last kind and an unpredictable mix of all kinds,
// with the enum at 9 and at 13 kinds. The shapes run interleaved; see
// measureShapes.
func BenchmarkKindShapes(b *testing.B) {
	body := make([]byte, 32)
	for _, n := range kindCounts {
		positions := []struct {
			name string
			seq  *kindSeq
		}{
			{"first", constSeq(1)},
			{"last", constSeq(Kind(n))},
			{"mixed", mixedSeq(n)},
		}
		for _, pos := range positions {
			b.Run(fmt.Sprintf("kinds=%d/%s", n, pos.name), func(b *testing.B) {
				var s sink
				switch n {
				case 9:
					measureShapes(b, kindShapes9(&s, pos.seq, body))
				case 13:
					// The Dispatcher itself runs beside the shapes, with
					// the same handlers and inputs.
					shapes := append(kindShapes13(&s, pos.seq, body), shape{"Dispatcher", dispatchKindRun(&s, pos.seq, body)})
					measureShapes(b, shapes)
				}
			})
		}
	}
}

// newBenchDispatcher returns a Dispatcher with the 13 handlers of
// kindShapes13.
func newBenchDispatcher() *Dispatcher[*sink] {
	t := &kindFuncs13
	return NewDispatcher(Handlers[*sink]{
		Call: t[1], Result: t[2], Error: t[3], Event: t[4], Ask: t[5],
		Answer: t[6], Batch: t[7], Ping: t[8], Pong: t[9], Join: t[10],
		Leave: t[11], Emit: t[12], Capabilities: t[13],
	})
}

// dispatchKindRun is the Dispatcher as a shape: DispatchKind takes the kind
// and the body as the shapes do.
func dispatchKindRun(s *sink, seq *kindSeq, body []byte) func(from, n int) error {
	d := newBenchDispatcher()
	return func(from, n int) error {
		for i := from; i < from+n; i++ {
			if err := d.DispatchKind(s, seq[i%len(seq)], body); err != nil {
				return err
			}
		}
		return nil
	}
}

// The method shapes. Each returns the index of the route for name, or -1,
// and is kept out of line so every shape pays the same call.

//go:noinline
func mapIndex(m map[string]int32, name []byte) int {
	if i, ok := m[string(name)]; ok {
		return int(i)
	}
	return -1
}

// sortedTable is the sorted-table shape: names in byte order beside their
// registration index, searched by bisection.
type sortedTable struct {
	names []string
	index []int32
}

func newSortedTable(names []string) *sortedTable {
	order := make([]int32, len(names))
	for i := range order {
		order[i] = int32(i)
	}
	slices.SortFunc(order, func(a, b int32) int {
		switch {
		case names[a] < names[b]:
			return -1
		case names[a] > names[b]:
			return 1
		}
		return 0
	})
	t := &sortedTable{index: order}
	for _, i := range order {
		t.names = append(t.names, names[i])
	}
	return t
}

//go:noinline
func sortedIndex(t *sortedTable, name []byte) int {
	lo, hi := 0, len(t.names)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if t.names[m] < string(name) {
			lo = m + 1
		} else {
			hi = m
		}
	}
	if lo < len(t.names) && t.names[lo] == string(name) {
		return int(t.index[lo])
	}
	return -1
}

//go:noinline
func perfectIndex(r *Router[int32], name []byte) int {
	i, _ := r.Index(name)
	return i
}

//go:noinline
func routeHandler(s *sink, name []byte) error {
	s.n += len(name)
	return nil
}

// nameSeq is the sequence of names a method benchmark looks up, cycled.
type nameSeq [][]byte

func constNames(name string) nameSeq { return nameSeq{[]byte(name)} }

// mixedNames draws 64 Ki names from names in an order a predictor cannot
// learn.
func mixedNames(names []string) nameSeq {
	seq := make(nameSeq, 1<<16)
	x := uint32(88675123)
	for i := range seq {
		x ^= x << 13
		x ^= x >> 17
		x ^= x << 5
		seq[i] = []byte(names[x%uint32(len(names))])
	}
	return seq
}

// BenchmarkRouteShapes is the benchmark that chose the router's shape: a
// map, a switch on the name (generated), a sorted table and the perfect
// hash, each finding the route for a name given as bytes and calling its
// handler, at 10, 100 and 1000 methods, for the first and the last
// registered name, a name that is not registered, and an unpredictable mix
// of all names. The shapes run interleaved; see measureShapes.
func BenchmarkRouteShapes(b *testing.B) {
	for _, n := range methodCounts {
		names := methodNames(n)
		m := make(map[string]int32, n)
		routes := make([]Route[int32], n)
		handlers := make([]func(*sink, []byte) error, n)
		for i, name := range names {
			m[name] = int32(i)
			routes[i] = Route[int32]{Name: name, Handler: int32(i)}
			handlers[i] = routeHandler
		}
		handlerRoutes := make([]Route[func(*sink, []byte) error], n)
		for i, name := range names {
			handlerRoutes[i] = Route[func(*sink, []byte) error]{Name: name, Handler: routeHandler}
		}
		handlerRouter, err := NewRouter(handlerRoutes)
		if err != nil {
			b.Fatal(err)
		}
		sorted := newSortedTable(names)
		router, err := NewRouter(routes)
		if err != nil {
			b.Fatal(err)
		}
		var switchIndex func([]byte) int
		switch n {
		case 10:
			switchIndex = routeSwitch10
		case 100:
			switchIndex = routeSwitch100
		case 1000:
			switchIndex = routeSwitch1000
		}
		index := map[string]func([]byte) int{
			"map":          func(name []byte) int { return mapIndex(m, name) },
			"switch":       switchIndex,
			"sorted":       func(name []byte) int { return sortedIndex(sorted, name) },
			"perfect-hash": func(name []byte) int { return perfectIndex(router, name) },
		}
		positions := []struct {
			name string
			seq  nameSeq
		}{
			{"first", constNames(names[0])},
			{"last", constNames(names[n-1])},
			{"miss", constNames("chat/getNothing")},
			{"mixed", mixedNames(names)},
		}
		for _, pos := range positions {
			b.Run(fmt.Sprintf("methods=%d/%s", n, pos.name), func(b *testing.B) {
				var s sink
				var shapes []shape
				for _, name := range []string{"map", "switch", "sorted", "perfect-hash"} {
					lookup := index[name]
					shapes = append(shapes, shape{name, func(from, count int) error {
						for i := from; i < from+count; i++ {
							name := pos.seq[i%len(pos.seq)]
							if j := lookup(name); j >= 0 {
								if err := handlers[j](&s, name); err != nil {
									return err
								}
							} else if pos.name != "miss" {
								return fmt.Errorf("%s not found", name)
							}
						}
						return nil
					}})
				}
				// The Router's own API runs beside the shapes: Lookup
				// returns the handler itself.
				shapes = append(shapes, shape{"Router.Lookup", func(from, count int) error {
					for i := from; i < from+count; i++ {
						name := pos.seq[i%len(pos.seq)]
						if h, err := handlerRouter.Lookup(name); err == nil {
							if err := h(&s, name); err != nil {
								return err
							}
						} else if pos.name != "miss" {
							return err
						}
					}
					return nil
				}})
				measureShapes(b, shapes)
			})
		}
	}
}

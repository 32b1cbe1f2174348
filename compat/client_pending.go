package compat

import (
	"sync"
	"sync/atomic"

	"github.com/hotpath-go/hotpath/scheduler"
)

// pendingCall is one call waiting for its answer. Pooled: a client making
// calls in a loop allocates none once warm.
type pendingCall struct {
	id     uint32
	resp   any
	handle scheduler.Handle
	err    error
	done   chan struct{} // buffered: the settler never blocks

	// settled is set once the call is settled, before done is signalled;
	// reader is the connection its caller reads itself, if it does (see
	// sharedread.go), woken when another goroutine settles the call.
	settled atomic.Bool
	reader  atomic.Pointer[wsConn]
	// waitingOn counts the caller among those waiting on a channel for a
	// reader (takeReads) until the call is settled.
	waitingOn atomic.Pointer[sharedReads]

	// async is the call of Go, which settle delivers on its Done; nil
	// for Call, whose caller waits on done. stopWatch stops the watch of
	// a Go call's ctx.
	async     *AsyncCall
	stopWatch func() bool
}

var pendingCalls = sync.Pool{New: func() any { return &pendingCall{done: make(chan struct{}, 1)} }}

func getPendingCall(resp any) *pendingCall {
	pc := pendingCalls.Get().(*pendingCall)
	pc.resp = resp
	return pc
}

func putPendingCall(pc *pendingCall) {
	*pc = pendingCall{done: pc.done}
	pendingCalls.Put(pc)
}

// pendingScanMax is where a pendingTable switches from a slice to a map.
// BenchmarkPendingLookup (answers in random order, per answer) measured the
// scan at 5-10 ns up to 32 calls in flight, 30-50 ns at 128 and about 85 ns
// at 256, against a map's 50-170 ns throughout; at 512 the map was ahead.
// The crossover lies between 256 and 512; below it the scan wins.
const pendingScanMax = 256

// pendingTable finds the call an answer's id belongs to. A client usually
// has a handful of calls in flight, which a short slice scans faster than
// a map hashes; under a burst it switches to a map, and back once the
// burst has drained.
type pendingTable struct {
	small []*pendingCall
	big   map[uint32]*pendingCall
	// size mirrors len for readers without the table's lock.
	size atomic.Int32
}

func (t *pendingTable) add(pc *pendingCall) {
	t.size.Add(1)
	if t.big == nil && len(t.small) < pendingScanMax {
		t.small = append(t.small, pc)
		return
	}
	if t.big == nil {
		t.big = make(map[uint32]*pendingCall, 2*pendingScanMax)
		for _, p := range t.small {
			t.big[p.id] = p
		}
		clear(t.small)
		t.small = t.small[:0]
	}
	t.big[pc.id] = pc
}

func (t *pendingTable) get(id uint32) *pendingCall {
	if t.big != nil {
		return t.big[id]
	}
	for _, p := range t.small {
		if p.id == id {
			return p
		}
	}
	return nil
}

// remove takes the call with id out of the table and returns it, or nil.
func (t *pendingTable) remove(id uint32) *pendingCall {
	if t.big != nil {
		pc, ok := t.big[id]
		if !ok {
			return nil
		}
		t.size.Add(-1)
		delete(t.big, id)
		if len(t.big) <= pendingScanMax/2 {
			for _, p := range t.big {
				t.small = append(t.small, p)
			}
			t.big = nil
		}
		return pc
	}
	for i, p := range t.small {
		if p.id == id {
			last := len(t.small) - 1
			t.small[i] = t.small[last]
			t.small[last] = nil
			t.small = t.small[:last]
			t.size.Add(-1)
			return p
		}
	}
	return nil
}

// drain removes and returns every call.
func (t *pendingTable) drain() []*pendingCall {
	all := append([]*pendingCall(nil), t.small...)
	for _, p := range t.big {
		all = append(all, p)
	}
	clear(t.small)
	t.small, t.big = t.small[:0], nil
	t.size.Store(0)
	return all
}

func (t *pendingTable) len() int { return len(t.small) + len(t.big) }

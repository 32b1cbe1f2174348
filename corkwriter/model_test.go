//go:build unix

package corkwriter

import (
	"bytes"
	"testing"
)

type opKind uint8

const (
	opWrite opKind = iota
	opShared
	opCork
	opUncork
	opFlush
	numOps
)

type op struct {
	kind opKind
	size int
}

// modelRun drives a Writer on a fake descriptor with ops and checks, after
// every step, that the bytes the descriptor accepted are exactly the bytes
// written so far, in order, minus what the Writer reports as buffered.
type modelRun struct {
	t        testing.TB
	fd       *fakeFD
	w        *Writer
	blocking bool
	want     []byte
	off      int
	scratch  []byte
	corks    int
	checked  int
}

func runModel(t testing.TB, seed uint64, blocking, partial bool, failures, threshold int, ops []op) {
	t.Helper()
	fd := newFakeFD(seed, partial, failures)
	m := &modelRun{t: t, fd: fd, blocking: blocking,
		w: newFakeWriter(fd, blocking, &Options{FlushThreshold: threshold})}
	for i, o := range ops {
		m.apply(i, o)
	}
	m.finish()
}

// payload returns the next n bytes of the stream, as a slice of pattern: it
// is never modified, so it may be passed to WriteShared.
func (m *modelRun) payload(n int) []byte {
	p := pattern[m.off : m.off+n]
	m.off = (m.off + n) % patternPeriod
	return p
}

func (m *modelRun) apply(i int, o op) {
	m.t.Helper()
	var err error
	switch o.kind {
	case opWrite:
		p := m.payload(o.size)
		m.scratch = append(m.scratch[:0], p...)
		m.want = append(m.want, p...)
		var n int
		n, err = m.w.Write(m.scratch)
		if err == nil && n != len(p) {
			m.t.Fatalf("op %d: Write returned %d, want %d", i, n, len(p))
		}
		// Write must not keep p: scribble over it.
		for j := range m.scratch {
			m.scratch[j] = ^m.scratch[j]
		}
	case opShared:
		p := m.payload(o.size)
		m.want = append(m.want, p...)
		_, err = m.w.WriteShared(p)
	case opCork:
		m.w.Cork()
		m.corks++
	case opUncork:
		err = m.w.Uncork()
		if m.corks > 0 {
			m.corks--
		}
	case opFlush:
		err = m.w.Flush()
	}
	if err != nil && !(err == ErrWouldBlock && !m.blocking) {
		m.t.Fatalf("op %d (%v): %v", i, o, err)
	}
	m.check(i, o)
}

func (m *modelRun) check(i int, o op) {
	m.t.Helper()
	got := m.fd.out
	if len(got) > len(m.want) {
		m.t.Fatalf("op %d (%v): %d bytes sent, only %d written", i, o, len(got), len(m.want))
	}
	// Bytes up to m.checked matched before; compare only the new ones.
	if !bytes.Equal(got[m.checked:], m.want[m.checked:len(got)]) {
		m.t.Fatalf("op %d (%v): stream diverges at byte %d", i, o, m.checked+mismatch(m.want[m.checked:], got[m.checked:]))
	}
	m.checked = len(got)
	if len(got)+m.w.Buffered() != len(m.want) {
		m.t.Fatalf("op %d (%v): sent %d + buffered %d != written %d", i, o, len(got), m.w.Buffered(), len(m.want))
	}
	if m.blocking && m.corks == 0 && m.w.Buffered() != 0 {
		m.t.Fatalf("op %d (%v): %d bytes still buffered outside a turn", i, o, m.w.Buffered())
	}
	if m.w.Buffered() == 0 && m.w.b != nil {
		m.t.Fatalf("op %d (%v): an empty writer holds a batch", i, o)
	}
	if m.fd.maxIov > iovMax {
		m.t.Fatalf("op %d (%v): writev with %d iovecs", i, o, m.fd.maxIov)
	}
}

func (m *modelRun) finish() {
	m.t.Helper()
	for range 100000 {
		err := m.w.Flush()
		if err == nil {
			break
		}
		if err != ErrWouldBlock {
			m.t.Fatalf("final flush: %v", err)
		}
	}
	if !bytes.Equal(m.fd.out, m.want) {
		m.t.Fatalf("final stream: %d bytes, want %d, first difference at %d", len(m.fd.out), len(m.want), mismatch(m.want, m.fd.out))
	}
	if m.w.b != nil {
		m.t.Fatal("a drained writer holds a batch")
	}
}

// decodeOps turns fuzzer bytes into writer operations, three bytes each: the
// kind, then a size. Sizes are mostly under 1 KiB, like a turn's answers;
// one op in four may be up to 80 KiB, to cross chunks and the threshold. A
// run writes at most 512 KiB, so that each execution stays fast.
func decodeOps(data []byte) []op {
	var ops []op
	total := 0
	for len(data) >= 3 && len(ops) < 512 && total < 512<<10 {
		kind := opKind(data[0] % byte(numOps))
		size := int(data[1])<<8 | int(data[2])
		if data[0]&0xc0 == 0xc0 {
			size += size >> 2
		} else {
			size &= 0x3ff
		}
		ops = append(ops, op{kind, size})
		total += size
		data = data[3:]
	}
	return ops
}

package segmentqueue

import (
	"container/list"
	"testing"
)

// The segment container was chosen by BenchmarkSegmentContainer: the same
// push/walk/pop pattern run on the ring the Queue uses and on the three
// other shapes a queue of segments is usually built on.

// resliceSegments pops by reslicing the front away and pushes with append.
// The front capacity is lost, so append reallocates every few pops.
type resliceSegments struct{ segs []segment }

func (r *resliceSegments) push(s segment)    { r.segs = append(r.segs, s) }
func (r *resliceSegments) at(i int) *segment { return &r.segs[i] }
func (r *resliceSegments) pop() {
	r.segs[0] = segment{}
	r.segs = r.segs[1:]
}

// compactSegments keeps a head index into a slice and, when the slice is
// full, moves the live segments back to the front before appending.
type compactSegments struct {
	segs []segment
	head int
}

func (c *compactSegments) push(s segment) {
	if len(c.segs) == cap(c.segs) && c.head > 0 {
		n := copy(c.segs, c.segs[c.head:])
		clear(c.segs[n:])
		c.segs, c.head = c.segs[:n], 0
	}
	c.segs = append(c.segs, s)
}
func (c *compactSegments) at(i int) *segment { return &c.segs[c.head+i] }
func (c *compactSegments) pop() {
	c.segs[c.head] = segment{}
	c.head++
}

// listSegments is a container/list of segments: one node per push.
type listSegments struct{ l list.List }

func (l *listSegments) push(s segment) { l.l.PushBack(s) }
func (l *listSegments) pop()           { l.l.Remove(l.l.Front()) }

// backlog is how many segments stay buffered throughout (a partial
// message). Each round of the benchmark pushes k = 1..7 segments behind
// them, walks the first k+backlog as Peek and Segments do, and pops k.
const backlog = 3

func BenchmarkSegmentContainer(b *testing.B) {
	seg := segment{buf: make([]byte, 100)}
	var sink int
	b.Run("ring", func(b *testing.B) {
		var q Queue
		for range backlog {
			q.pushBack(seg)
		}
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			k := 1 + i%7
			for range k {
				q.pushBack(seg)
			}
			for j := range k + backlog {
				sink += len(q.at(j).buf)
			}
			for range k {
				q.popFront()
			}
		}
	})
	b.Run("reslice", func(b *testing.B) {
		var r resliceSegments
		for range backlog {
			r.push(seg)
		}
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			k := 1 + i%7
			for range k {
				r.push(seg)
			}
			for j := range k + backlog {
				sink += len(r.at(j).buf)
			}
			for range k {
				r.pop()
			}
		}
	})
	b.Run("compact", func(b *testing.B) {
		var c compactSegments
		for range backlog {
			c.push(seg)
		}
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			k := 1 + i%7
			for range k {
				c.push(seg)
			}
			for j := range k + backlog {
				sink += len(c.at(j).buf)
			}
			for range k {
				c.pop()
			}
		}
	})
	b.Run("list", func(b *testing.B) {
		var l listSegments
		for range backlog {
			l.push(seg)
		}
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			k := 1 + i%7
			for range k {
				l.push(seg)
			}
			e := l.l.Front()
			for range k + backlog {
				sink += len(e.Value.(segment).buf)
				e = e.Next()
			}
			for range k {
				l.pop()
			}
		}
	})
	if sink == 0 {
		b.Fatal("the walks read nothing")
	}
}

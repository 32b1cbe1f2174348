package deflatecache

// history is the tail of what one direction of a connection has compressed
// or inflated: the LZ77 window a peer with context takeover refers back
// to. It holds at most size bytes, in one slice so it can prime a
// compressor or an inflater directly, and grows to size only as traffic
// fills it.
type history struct {
	buf  []byte
	size int
}

// minHistoryAlloc is the first allocation of a history: one small message
// should not cost a whole window.
const minHistoryAlloc = 512

func newHistory(size int) *history { return &history{size: size} }

// bytes returns the window, oldest byte first. It is valid until the next
// add.
func (h *history) bytes() []byte { return h.buf }

// add appends p to the window, dropping the oldest bytes beyond size.
func (h *history) add(p []byte) {
	if len(p) >= h.size {
		h.reserve(h.size)
		h.buf = h.buf[:h.size]
		copy(h.buf, p[len(p)-h.size:])
		return
	}
	if over := len(h.buf) + len(p) - h.size; over > 0 {
		n := copy(h.buf, h.buf[over:])
		h.buf = h.buf[:n]
	}
	h.reserve(len(h.buf) + len(p))
	h.buf = append(h.buf, p...)
}

// reserve makes the capacity at least n (n <= size), doubling up to size.
func (h *history) reserve(n int) {
	if n <= cap(h.buf) {
		return
	}
	c := min(h.size, max(n, 2*cap(h.buf), minHistoryAlloc))
	nb := make([]byte, len(h.buf), c)
	copy(nb, h.buf)
	h.buf = nb
}

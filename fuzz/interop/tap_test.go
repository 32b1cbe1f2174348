package interop

import (
	"bytes"
	"context"
	"encoding/binary"
	"net"
	"sync"
)

// tap is a client connection that counts the WebSocket frames crossing it
// in each direction, and how many carry RSV1 (compressed, RFC 7692 §6),
// so a test sees on the wire what the libraries negotiated and did.
type tap struct {
	net.Conn
	in, out frameCounter // in: server to client; out: client to server
}

func (t *tap) Read(b []byte) (int, error) {
	n, err := t.Conn.Read(b)
	t.in.feed(b[:n])
	return n, err
}

func (t *tap) Write(b []byte) (int, error) {
	n, err := t.Conn.Write(b)
	t.out.feed(b[:n])
	return n, err
}

// taps collects the taps of every connection a dialer opened.
type taps struct {
	mu  sync.Mutex
	all []*tap
}

func (ts *taps) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	var d net.Dialer
	nc, err := d.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	t := &tap{Conn: nc}
	ts.mu.Lock()
	ts.all = append(ts.all, t)
	ts.mu.Unlock()
	return t, nil
}

// counts sums the data frames and compressed data frames of every tap,
// each way.
func (ts *taps) counts() (in, out frameCount) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	for _, t := range ts.all {
		in = in.add(t.in.snapshot())
		out = out.add(t.out.snapshot())
	}
	return in, out
}

type frameCount struct {
	data       int // first frames of data messages
	compressed int // of those, with RSV1 set
}

func (a frameCount) add(b frameCount) frameCount {
	return frameCount{a.data + b.data, a.compressed + b.compressed}
}

// frameCounter parses one direction of a connection: the HTTP head, then
// frame headers, skipping payloads.
type frameCounter struct {
	mu       sync.Mutex
	upgraded bool
	head     []byte // bytes of the HTTP head or of a frame header so far
	skip     uint64 // payload bytes of the current frame still to come
	n        frameCount
}

func (c *frameCounter) snapshot() frameCount {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n
}

func (c *frameCounter) feed(b []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for len(b) > 0 {
		switch {
		case !c.upgraded:
			c.head = append(c.head, b...)
			i := bytes.Index(c.head, []byte("\r\n\r\n"))
			if i < 0 {
				return
			}
			rest := c.head[i+4:]
			c.upgraded, c.head = true, nil
			b = rest
		case c.skip > 0:
			n := min(c.skip, uint64(len(b)))
			c.skip -= n
			b = b[n:]
		default:
			c.head = append(c.head, b[0])
			b = b[1:]
			if length, ok := frameHeader(c.head); ok {
				c.count(c.head[0])
				c.skip = length
				c.head = c.head[:0]
			}
		}
	}
}

// count records a frame by its first byte: text and binary frames start
// messages, and only they may carry RSV1.
func (c *frameCounter) count(b0 byte) {
	if op := b0 & 0x0F; op == 1 || op == 2 {
		c.n.data++
		if b0&0x40 != 0 {
			c.n.compressed++
		}
	}
}

// frameHeader reports the payload length once h holds a whole frame
// header (RFC 6455 §5.2).
func frameHeader(h []byte) (uint64, bool) {
	if len(h) < 2 {
		return 0, false
	}
	need := 2
	switch h[1] & 0x7F {
	case 126:
		need += 2
	case 127:
		need += 8
	}
	if h[1]&0x80 != 0 {
		need += 4
	}
	if len(h) < need {
		return 0, false
	}
	switch l := h[1] & 0x7F; l {
	case 126:
		return uint64(binary.BigEndian.Uint16(h[2:4])), true
	case 127:
		return binary.BigEndian.Uint64(h[2:10]), true
	default:
		return uint64(l), true
	}
}

package wsframe

import (
	"bytes"
	"errors"
	"io"
	"testing"
)

// testKey is the masking key of the examples of RFC 6455 §5.7.
var testKey = [4]byte{0x37, 0xfa, 0x21, 0x3d}

// clientFrame is a frame as a client sends it: masked with testKey. It is
// built from AppendHeader, which writes the control frames RFC 6455 §5.5
// forbids too (AppendFrame would panic), since the tests send those on
// purpose.
func clientFrame(op Opcode, payload string, flags Flags) []byte {
	b := AppendHeader(nil, Header{Flags: flags, Opcode: op, Length: int64(len(payload)), Masked: true, Key: testKey})
	start := len(b)
	b = append(b, payload...)
	Mask(b[start:], testKey, 0)
	return b
}

// serverFrame is a frame as a server sends it: unmasked. Like clientFrame,
// it writes any frame.
func serverFrame(op Opcode, payload string, flags Flags) []byte {
	b := AppendHeader(nil, Header{Flags: flags, Opcode: op, Length: int64(len(payload))})
	return append(b, payload...)
}

func cat(frames ...[]byte) []byte { return bytes.Join(frames, nil) }

// got is a decoded message with its payload copied out of the decoder's
// buffers.
type got struct {
	op         Opcode
	compressed bool
	code       CloseCode
	payload    string
}

// decodeAll decodes every message of in, fed in one slice. It returns the
// messages and the error that stopped it: nil when in ended on a frame
// boundary, ErrNeedMore when it ended inside one.
func decodeAll(cfg Config, in []byte) ([]got, error) {
	d := NewDecoder(cfg)
	var buf []byte
	var out []got
	for {
		m, n, err := d.DecodeMessage(in, &buf)
		in = in[n:]
		if err != nil {
			if errors.Is(err, ErrNeedMore) && len(in) == 0 && !d.inMsg {
				return out, nil
			}
			if errors.Is(err, io.EOF) {
				return out, nil
			}
			return out, err
		}
		out = append(out, got{m.Opcode, m.Compressed, m.CloseCode, string(m.Payload)})
	}
}

// wantCode fails t unless err is a *ProtocolError carrying code.
func wantCode(t *testing.T, err error, want *ProtocolError) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Fatalf("error = %v, want %v", err, want)
	}
	if got := CloseCodeOf(err); got != want.Code {
		t.Fatalf("CloseCodeOf = %d, want %d", got, want.Code)
	}
}

// fakeQueue implements Source over separately allocated segments, with the
// semantics promised by segmentqueue.Queue: Peek and Next copy only when
// the bytes span segments, Next's copy lives in memory lent until the next
// removing call, Segments returns whole segments (the last one may extend
// past n, which the real queue trims). It counts the copies it makes.
type fakeQueue struct {
	segs   [][]byte
	loan   []byte // what Next returns when it copies: valid until the next removal
	copies int
}

// newFakeQueue splits data at the given cut points (taken modulo
// len(data)+1, in any order) into separately allocated segments.
func newFakeQueue(data []byte, cuts ...int) *fakeQueue {
	q := &fakeQueue{}
	at := make([]bool, len(data)+1)
	for _, c := range cuts {
		if c < 0 {
			c = -c
		}
		at[c%(len(data)+1)] = true
	}
	start := 0
	for i := 1; i <= len(data); i++ {
		if at[i] || i == len(data) {
			q.Push(data[start:i])
			start = i
		}
	}
	return q
}

// Push appends a copy of b as a new segment.
func (q *fakeQueue) Push(b []byte) {
	if len(b) > 0 {
		q.segs = append(q.segs, append([]byte(nil), b...))
	}
}

// PushShared appends b itself as a new segment, as a read loop hands over
// the buffer it read into.
func (q *fakeQueue) PushShared(b []byte) {
	if len(b) > 0 {
		q.segs = append(q.segs, b)
	}
}

func (q *fakeQueue) Len() int {
	n := 0
	for _, s := range q.segs {
		n += len(s)
	}
	return n
}

var errShortQueue = errors.New("fakeQueue: fewer bytes than asked for")

func (q *fakeQueue) Peek(n int, scratch []byte) ([]byte, error) {
	if n > q.Len() {
		return nil, errShortQueue
	}
	if len(q.segs) > 0 && len(q.segs[0]) >= n {
		return q.segs[0][:n:n], nil
	}
	q.copies++
	out := scratch[:n]
	q.copyOut(out)
	return out, nil
}

func (q *fakeQueue) copyOut(out []byte) {
	k := 0
	for _, s := range q.segs {
		k += copy(out[k:], s)
		if k == len(out) {
			return
		}
	}
}

// drop removes the first n bytes.
func (q *fakeQueue) drop(n int) error {
	if n > q.Len() {
		return errShortQueue
	}
	for n > 0 {
		if len(q.segs[0]) > n {
			q.segs[0] = q.segs[0][n:]
			return nil
		}
		n -= len(q.segs[0])
		q.segs = q.segs[:copy(q.segs, q.segs[1:])] // keep the array for reuse
	}
	return nil
}

func (q *fakeQueue) Next(n int) ([]byte, error) {
	if n > q.Len() {
		return nil, errShortQueue
	}
	if len(q.segs) > 0 && len(q.segs[0]) >= n {
		out := q.segs[0][:n:n]
		return out, q.drop(n)
	}
	q.copies++
	if cap(q.loan) < n {
		q.loan = make([]byte, n)
	}
	out := q.loan[:n:n]
	q.copyOut(out)
	return out, q.drop(n)
}

func (q *fakeQueue) Segments(n int, dst [][]byte) ([][]byte, error) {
	if n > q.Len() {
		return dst, errShortQueue
	}
	for _, s := range q.segs {
		if n <= 0 {
			break
		}
		dst = append(dst, s)
		n -= len(s)
	}
	return dst, nil
}

var _ Source = (*fakeQueue)(nil)

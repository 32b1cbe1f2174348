package wsframe

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"
)

func readAll(r *Reader) ([]got, error) {
	var out []got
	for {
		m, err := r.ReadMessage()
		if err != nil {
			return out, err
		}
		out = append(out, got{m.Opcode, m.Compressed, m.CloseCode, string(m.Payload)})
	}
}

func TestReaderMatchesDecoder(t *testing.T) {
	pristine, want := mixedStream()
	sources := map[string]func([]byte) io.Reader{
		"whole":       func(b []byte) io.Reader { return bytes.NewReader(b) },
		"one byte":    func(b []byte) io.Reader { return iotest.OneByteReader(bytes.NewReader(b)) },
		"half":        func(b []byte) io.Reader { return iotest.HalfReader(bytes.NewReader(b)) },
		"data + EOF":  func(b []byte) io.Reader { return iotest.DataErrReader(bytes.NewReader(b)) },
		"tiny buffer": func(b []byte) io.Reader { return bytes.NewReader(b) },
	}
	for name, mk := range sources {
		size := 0
		if name == "tiny buffer" {
			size = 16
		}
		r := NewReader(mk(append([]byte(nil), pristine...)), NewDecoder(Config{MaxMessageSize: 1 << 17}), size)
		msgs, err := readAll(r)
		if err != io.EOF {
			t.Fatalf("%s: ended with %v", name, err)
		}
		sameMessages(t, name, msgs, want)
	}
}

func TestReaderEndOfStream(t *testing.T) {
	whole := clientFrame(OpText, "hello", Fin)
	cases := []struct {
		name string
		in   []byte
		want error
	}{
		{"between frames", whole, io.EOF},
		{"inside a header", whole[:1], io.ErrUnexpectedEOF},
		{"inside a payload", whole[:8], io.ErrUnexpectedEOF},
		{"between fragments", clientFrame(OpText, "hel", 0), io.ErrUnexpectedEOF},
	}
	for _, c := range cases {
		r := NewReader(bytes.NewReader(c.in), NewDecoder(Config{}), 0)
		_, err := readAll(r)
		if err != c.want {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
	}
	// A read error other than EOF is returned as is.
	boom := errors.New("connection reset")
	r := NewReader(iotest.ErrReader(boom), NewDecoder(Config{}), 0)
	if _, err := r.ReadMessage(); err != boom {
		t.Errorf("read error: %v", err)
	}
}

func TestReaderProtocolError(t *testing.T) {
	in := cat(clientFrame(OpText, "ok", Fin), clientFrame(OpText, "\xff", Fin))
	r := NewReader(bytes.NewReader(in), NewDecoder(Config{}), 0)
	if m, err := r.ReadMessage(); err != nil || string(m.Payload) != "ok" {
		t.Fatalf("%q %v", m.Payload, err)
	}
	_, err := r.ReadMessage()
	wantCode(t, err, ErrInvalidUTF8)
}

// A frame larger than the read buffer grows it for that frame only; the
// limit is enforced before the buffer grows.
func TestReaderBufferGrowsAndShrinks(t *testing.T) {
	big := strings.Repeat("b", 10000)
	in := cat(clientFrame(OpBinary, big, Fin), clientFrame(OpText, "small", Fin))
	r := NewReader(bytes.NewReader(in), NewDecoder(Config{}), 512)
	m, err := r.ReadMessage()
	if err != nil || string(m.Payload) != big {
		t.Fatalf("big: %d bytes, %v", len(m.Payload), err)
	}
	if m, err := r.ReadMessage(); err != nil || string(m.Payload) != "small" {
		t.Fatalf("small: %q %v", m.Payload, err)
	}
	if _, err := r.ReadMessage(); err != io.EOF {
		t.Fatal(err)
	}
	if cap(r.buf) > 512 {
		t.Errorf("read buffer still %d bytes after the big frame", cap(r.buf))
	}

	huge := AppendHeader(nil, Header{Flags: Fin, Opcode: OpBinary, Masked: true, Length: 1 << 30})
	r = NewReader(bytes.NewReader(huge), NewDecoder(Config{}), 512)
	_, err = r.ReadMessage()
	wantCode(t, err, ErrFrameTooBig)
	if cap(r.buf) > 512 {
		t.Errorf("buffer grew to %d for a frame over the limit", cap(r.buf))
	}
}

// A header announcing a large frame does not make the Reader allocate the
// frame's size: its buffer grows with the bytes that arrive. A peer that
// sent 14-byte headers of 1 MiB frames and stopped made a server hold
// 1 MiB per connection. The whole frame, when it comes, is read as
// before.
func TestReaderGrowsWithWhatArrives(t *testing.T) {
	const size = 1 << 20
	payload := strings.Repeat("x", size)
	frame := clientFrame(OpBinary, payload, Fin)
	dec := NewDecoder(Config{MaxMessageSize: 2 * size})
	sent := frame[:14+1000] // the header and the first 1000 bytes, then the peer stops
	r := NewReader(bytes.NewReader(sent), dec, 0)
	if _, err := r.ReadMessage(); err != io.ErrUnexpectedEOF {
		t.Fatalf("a frame cut short: %v", err)
	}
	if held := cap(r.buf); held > 2*DefaultReaderSize {
		t.Fatalf("the reader holds a buffer of %d bytes for %d received", held, len(sent))
	}
	for name, src := range map[string]io.Reader{
		"whole":    bytes.NewReader(frame),
		"one byte": iotest.OneByteReader(bytes.NewReader(frame)),
		"half":     iotest.HalfReader(bytes.NewReader(frame)),
	} {
		r := NewReader(src, NewDecoder(Config{MaxMessageSize: 2 * size}), 0)
		m, err := r.ReadMessage()
		if err != nil || string(m.Payload) != payload {
			t.Fatalf("%s: %d bytes, %v", name, len(m.Payload), err)
		}
	}
}

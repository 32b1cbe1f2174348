package deflatecache

import (
	"bytes"
	stdflate "compress/flate"
	"io"
	"math/rand/v2"
	"strconv"
	"testing"

	"github.com/hotpath-go/hotpath/wsframe"
)

// event returns a chat-room event of about 90 bytes: the same shape every
// time, with the values that change between events (sequence, user, time,
// a random token) as they would in a real stream.
func event(r *rand.Rand, seq int) []byte {
	b := make([]byte, 0, 128)
	b = append(b, `{"t":"msg","room":"lobby","seq":`...)
	b = strconv.AppendInt(b, int64(seq), 10)
	b = append(b, `,"user":"u`...)
	b = strconv.AppendInt(b, int64(10000+r.IntN(90000)), 10)
	b = append(b, `","ts":`...)
	b = strconv.AppendInt(b, int64(1767225600000+seq*37+r.IntN(30)), 10)
	b = append(b, `,"text":"`...)
	b = strconv.AppendUint(b, r.Uint64()>>24, 36)
	b = append(b, `"}`...)
	return b
}

// tick returns a 90-byte event of which only a counter and the time
// change from one to the next: a presence or price tick.
func tick(seq int) []byte {
	b := make([]byte, 0, 96)
	b = append(b, `{"t":"tick","room":"lobby","online":1024,"seq":`...)
	b = strconv.AppendInt(b, int64(seq), 10)
	b = append(b, `,"ts":`...)
	b = strconv.AppendInt(b, int64(1767225600000+seq*250), 10)
	b = append(b, `,"ok":true}`...)
	return b
}

// document returns a JSON array of events of exactly n bytes (cut at n):
// the 512 B, 4 KiB and 32 KiB messages of the benchmarks.
func document(seed uint64, n int) []byte {
	r := rand.New(rand.NewPCG(seed, 7))
	b := []byte{'['}
	for i := 0; len(b) < n; i++ {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, event(r, i)...)
	}
	return b[:n]
}

// noise returns n random bytes: incompressible.
func noise(seed uint64, n int) []byte {
	r := rand.New(rand.NewPCG(seed, 9))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// stdInflate inflates one RFC 7692 message payload with the standard
// library, given the history the sender compressed against.
func stdInflate(t testing.TB, payload, history []byte) []byte {
	t.Helper()
	in := append(append([]byte(nil), payload...), 0x00, 0x00, 0xff, 0xff, 0x01, 0x00, 0x00, 0xff, 0xff)
	fr := stdflate.NewReaderDict(bytes.NewReader(in), history)
	out, err := io.ReadAll(fr)
	if err != nil {
		t.Fatalf("compress/flate cannot inflate: %v", err)
	}
	return out
}

// mustConn returns a Conn or fails the test.
func mustConn(t testing.TB, p Params, role wsframe.Role, opts Options) *Conn {
	t.Helper()
	c, err := NewConn(p, role, opts)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// pair returns a server Conn and a client Conn that agreed on p.
func pair(t testing.TB, p Params, opts Options) (server, client *Conn) {
	return mustConn(t, p, wsframe.Server, opts), mustConn(t, p, wsframe.Client, opts)
}

// frameBody parses a whole frame and returns its header and unmasked
// payload.
func frameBody(t testing.TB, f []byte) (wsframe.Header, []byte) {
	t.Helper()
	h, n, err := wsframe.ParseHeader(f)
	if err != nil {
		t.Fatal(err)
	}
	body := append([]byte(nil), f[n:]...)
	if int64(len(body)) != h.Length {
		t.Fatalf("frame holds %d payload bytes, header says %d", len(body), h.Length)
	}
	if h.Masked {
		wsframe.Mask(body, h.Key, 0)
	}
	return h, body
}

// iterations returns n, or under the race detector the smaller raceN.
func iterations(n, raceN int) int {
	if raceEnabled {
		return raceN
	}
	return n
}

package deflatecache_test

import (
	"bytes"
	"math/rand/v2"
	"testing"

	dc "github.com/hotpath-go/hotpath/deflatecache"
	"github.com/hotpath-go/hotpath/wsframe"
)

// A compressed message that came out longer than the original, which a
// connection with context takeover sends when its history is empty, may
// need a larger frame header than the original's (RFC 6455 §5.2: 7-bit
// lengths end at 125, 16-bit at 65,535). AppendCompressedFrame reserved
// the original's header and cut the body's end when it slid the body to
// the real header: the peer inflated other bytes without an error (a
// modules audit: every incompressible message of 120-125 or
// 65,530-65,535 bytes). Each size here goes from each role to the other,
// into dst of several capacities, and must come back the same.
func TestCompressedFrameHeaderGrowth(t *testing.T) {
	rng := rand.NewChaCha8([32]byte{1})
	var sizes []int
	for n := 100; n <= 130; n++ {
		sizes = append(sizes, n)
	}
	for n := 65_500; n <= 65_540; n++ {
		sizes = append(sizes, n)
	}
	for _, role := range []wsframe.Role{wsframe.Server, wsframe.Client} {
		peer := wsframe.Client
		if role == wsframe.Client {
			peer = wsframe.Server
		}
		for _, n := range sizes {
			payload := make([]byte, n)
			rng.Read(payload) // incompressible
			for _, dst := range [][]byte{nil, make([]byte, 3), make([]byte, 0, n+20)} {
				// Fresh connections: the history is empty.
				send, err := dc.NewConn(dc.Params{}, role, dc.Options{})
				if err != nil {
					t.Fatal(err)
				}
				recv, err := dc.NewConn(dc.Params{}, peer, dc.Options{})
				if err != nil {
					t.Fatal(err)
				}
				prefix := append([]byte(nil), dst...)
				f, ok := send.AppendCompressedFrame(dst, wsframe.OpBinary, payload)
				if !ok {
					t.Fatalf("%v, %d bytes: not compressed", role, n)
				}
				if !bytes.Equal(f[:len(prefix)], prefix) {
					t.Fatalf("%v, %d bytes: dst's bytes changed", role, n)
				}
				d := wsframe.NewDecoder(wsframe.Config{Role: peer, Extensions: wsframe.Rsv1})
				frame := f[len(prefix):]
				m, used, err := d.DecodeMessage(frame, nil)
				if err != nil || used != len(frame) {
					t.Fatalf("%v, %d bytes: decode: %v, %d of %d bytes used", role, n, err, used, len(frame))
				}
				got, err := recv.Inflate(nil, m.Payload, 0)
				if err != nil || !bytes.Equal(got, payload) {
					t.Fatalf("%v, %d bytes into cap %d: inflated %d bytes, equal %v, err %v", role, n, cap(dst), len(got), bytes.Equal(got, payload), err)
				}
			}
		}
	}
}

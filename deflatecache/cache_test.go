package deflatecache

import (
	"bytes"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/hotpath-go/hotpath/wsframe"
)

// TestSharedFrameBuiltOncePerWindow: many connections on every window read
// one message's frame at the same time; each window's frame is deflated
// exactly once, every connection of a window gets the very same bytes, and
// each frame inflates to the message (-race checks the lock-free reads).
func TestSharedFrameBuiltOncePerWindow(t *testing.T) {
	const perWindow = 25
	msg := document(9, 512)
	pm, _ := wsframe.NewPrepared(wsframe.OpText, msg)
	var conns []*Conn
	for bits := MinWindowBits; bits <= MaxWindowBits; bits++ {
		for i := range perWindow {
			// Half with context takeover: the same slot serves both.
			p := Params{ServerNoContextTakeover: i%2 == 0, ServerMaxWindowBits: bits}
			conns = append(conns, mustConn(t, p, wsframe.Server, Options{}))
		}
	}
	before := Deflates()
	frames := make([][]byte, len(conns))
	var start, wg sync.WaitGroup
	start.Add(1)
	for i, c := range conns {
		wg.Go(func() {
			start.Wait()
			f, err := c.BroadcastFrame(pm)
			if err != nil {
				t.Error(err)
			}
			frames[i] = f
		})
	}
	start.Done()
	wg.Wait()
	if got := Deflates() - before; got != MaxWindowBits-MinWindowBits+1 {
		t.Fatalf("%d deflates for %d windows", got, MaxWindowBits-MinWindowBits+1)
	}
	for w := range MaxWindowBits - MinWindowBits + 1 {
		first := frames[w*perWindow]
		for _, f := range frames[w*perWindow : (w+1)*perWindow] {
			if &f[0] != &first[0] || len(f) != len(first) {
				t.Fatalf("window %d: connections got different frames", w+MinWindowBits)
			}
		}
		h, body := frameBody(t, first)
		if h.Flags&wsframe.Rsv1 == 0 || h.Opcode != wsframe.OpText || h.Masked {
			t.Fatalf("window %d: header %+v", w+MinWindowBits, h)
		}
		got, err := mustConn(t, Params{}, wsframe.Client, Options{}).Inflate(nil, body, 0)
		if err != nil || !bytes.Equal(got, msg) {
			t.Fatalf("window %d: %v", w+MinWindowBits, err)
		}
	}
	// Read again: no deflate at all.
	before = Deflates()
	for _, c := range conns {
		c.BroadcastFrame(pm)
	}
	if got := Deflates() - before; got != 0 {
		t.Fatalf("%d deflates on the second pass", got)
	}
}

// TestSharedFramesKeepTakeoverInSync: a connection with context takeover
// receives shared broadcast frames between its own messages; its peer's
// inflater and its compressor must agree on the history throughout, so
// the own messages (which refer back to the broadcasts) inflate.
func TestSharedFramesKeepTakeoverInSync(t *testing.T) {
	for _, bits := range []int{9, 12, 15} {
		p := Params{ServerMaxWindowBits: bits}
		server, client := pair(t, p, Options{})
		other := mustConn(t, Params{ServerNoContextTakeover: true, ServerMaxWindowBits: bits}, wsframe.Server, Options{})
		r := rand.New(rand.NewPCG(uint64(bits), 5))
		n := 300
		if raceEnabled {
			n = 40
		}
		for i := range n {
			var f, want []byte
			switch i % 3 {
			case 0, 1:
				want = document(uint64(i), 200+r.IntN(400))
				pm, _ := wsframe.NewPrepared(wsframe.OpText, want)
				other.BroadcastFrame(pm) // a connection without takeover may build it
				var err error
				if f, err = server.BroadcastFrame(pm); err != nil {
					t.Fatal(err)
				}
			default:
				want = event(r, i)
				var ok bool
				if f, ok = server.AppendCompressedFrame(nil, wsframe.OpText, want); !ok {
					f = wsframe.AppendFrame(nil, wsframe.OpText, want, wsframe.Fin)
				}
			}
			h, body := frameBody(t, f)
			got := body
			if h.Flags&wsframe.Rsv1 != 0 {
				var err error
				if got, err = client.Inflate(nil, body, 0); err != nil {
					t.Fatalf("bits=%d message %d: %v", bits, i, err)
				}
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("bits=%d message %d differs", bits, i)
			}
		}
	}
}

// TestSharedFrameIncompressible: a message that does not shrink is sent
// plain to everyone, and deflated once to find out, not once per
// recipient.
func TestSharedFrameIncompressible(t *testing.T) {
	pm, _ := wsframe.NewPrepared(wsframe.OpBinary, noise(1, 1000))
	before := Deflates()
	for range 10 {
		c := mustConn(t, Params{}, wsframe.Server, Options{})
		f, err := c.BroadcastFrame(pm)
		if err != nil || !bytes.Equal(f, pm.Frame()) {
			t.Fatalf("got % x..., %v", f[:4], err)
		}
	}
	if got := Deflates() - before; got != 1 {
		t.Fatalf("%d deflates", got)
	}
}

func TestSharedFrameBelowThreshold(t *testing.T) {
	pm, _ := wsframe.NewPrepared(wsframe.OpText, []byte(`{"t":"ping"}`))
	before := Deflates()
	f, err := mustConn(t, Params{}, wsframe.Server, Options{}).BroadcastFrame(pm)
	if err != nil || !bytes.Equal(f, pm.Frame()) || Deflates() != before {
		t.Fatalf("short message: % x %v", f, err)
	}
}

// A client's BroadcastFrame is refused also once a server connection has
// built the message's shared frame: that frame is unmasked, and a client
// that sent it would be closed with 1002 (RFC 6455 §5.1). The check was on
// the slow path only, so a client got the server's frame and no error.
func TestBroadcastNeedsServerRole(t *testing.T) {
	pm, _ := wsframe.NewPrepared(wsframe.OpText, document(1, 500))
	noTakeover := Params{ServerNoContextTakeover: true, ClientNoContextTakeover: true} // the fast path's case
	client := mustConn(t, noTakeover, wsframe.Client, Options{})
	if _, err := client.BroadcastFrame(pm); err != ErrClientBroadcast {
		t.Fatalf("client role: %v", err)
	}
	if _, err := mustConn(t, noTakeover, wsframe.Server, Options{}).BroadcastFrame(pm); err != nil {
		t.Fatal(err)
	}
	if f, err := client.BroadcastFrame(pm); err != ErrClientBroadcast {
		t.Fatalf("client role, after a server built the shared frame: % x, %v; want ErrClientBroadcast", f[:min(len(f), 4)], err)
	}
}

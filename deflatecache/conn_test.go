package deflatecache

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"runtime"
	"sync"
	"testing"

	"github.com/hotpath-go/hotpath/wsframe"
)

// TestRoundTripEveryConfiguration sends a stream of events both ways for
// every window and takeover combination, through AppendCompressedFrame and
// Inflate, and checks every message arrives intact.
func TestRoundTripEveryConfiguration(t *testing.T) {
	for bits := MinWindowBits; bits <= MaxWindowBits; bits++ {
		for _, takeover := range []bool{false, true} {
			p := Params{
				ServerNoContextTakeover: !takeover, ClientNoContextTakeover: !takeover,
				ServerMaxWindowBits: bits, ClientMaxWindowBits: bits,
			}
			server, client := pair(t, p, Options{})
			r := rand.New(rand.NewPCG(uint64(bits), 1))
			for i := range iterations(200, 20) {
				msg := event(r, i)
				if i%17 == 0 {
					msg = document(uint64(i), 3000)
				}
				for _, dir := range []struct {
					from, to *Conn
					name     string
				}{{server, client, "server→client"}, {client, server, "client→server"}} {
					f, ok := dir.from.AppendCompressedFrame(nil, wsframe.OpText, msg)
					if !ok {
						if takeover || len(msg) >= DefaultMinSize {
							t.Fatalf("bits=%d takeover=%v %s message %d (%d bytes) not compressed", bits, takeover, dir.name, i, len(msg))
						}
						continue
					}
					h, body := frameBody(t, f)
					if h.Flags&wsframe.Rsv1 == 0 || !h.Fin() || h.Opcode != wsframe.OpText {
						t.Fatalf("%s frame header %+v", dir.name, h)
					}
					if h.Masked != (dir.from == client) {
						t.Fatalf("%s frame masked=%v", dir.name, h.Masked)
					}
					got, err := dir.to.Inflate(nil, body, 0)
					if err != nil {
						t.Fatalf("bits=%d takeover=%v %s message %d: %v", bits, takeover, dir.name, i, err)
					}
					if !bytes.Equal(got, msg) {
						t.Fatalf("bits=%d takeover=%v %s message %d differs", bits, takeover, dir.name, i)
					}
				}
			}
		}
	}
}

// TestTakeoverCompressesBetter is the reason takeover exists: a stream of
// similar events shrinks several times more with history than without.
func TestTakeoverCompressesBetter(t *testing.T) {
	ratio := func(takeover bool) float64 {
		c := mustConn(t, Params{ServerNoContextTakeover: !takeover}, wsframe.Server, Options{MinSize: 1})
		r := rand.New(rand.NewPCG(1, 2))
		plain, sent := 0, 0
		for i := range iterations(500, 100) {
			msg := event(r, i)
			out, ok := c.AppendCompressed(nil, msg)
			plain += len(msg)
			if ok {
				sent += len(out)
			} else {
				sent += len(msg)
			}
		}
		return float64(plain) / float64(sent)
	}
	oneShot, takeover := ratio(false), ratio(true)
	t.Logf("90 B events: one-shot %.2fx, takeover %.2fx", oneShot, takeover)
	// Measured about 1.0 and 2.9: assert with a 2x margin.
	if takeover < 1.5*oneShot {
		t.Fatalf("takeover ratio %.2f not above one-shot %.2f", takeover, oneShot)
	}
}

// TestConcurrentReadAndWrite runs Inflate on one goroutine and the sending
// methods on another, as a connection's read and write loops do (-race).
func TestConcurrentReadAndWrite(t *testing.T) {
	p := Params{ServerMaxWindowBits: 12, ClientMaxWindowBits: 12}
	server, client := pair(t, p, Options{})
	var toServer [][]byte
	r := rand.New(rand.NewPCG(3, 4))
	var want [][]byte
	n := iterations(300, 40)
	for i := range n {
		msg := event(r, i)
		f, ok := client.AppendCompressedFrame(nil, wsframe.OpBinary, msg)
		if !ok {
			t.Fatal("not compressed")
		}
		_, body := frameBody(t, f)
		toServer = append(toServer, body)
		want = append(want, msg)
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		var dst []byte
		for i, body := range toServer {
			var err error
			if dst, err = server.Inflate(dst[:0], body, 0); err != nil || !bytes.Equal(dst, want[i]) {
				t.Errorf("message %d: %v", i, err)
				return
			}
		}
	})
	wg.Go(func() {
		var dst []byte
		for i := range n {
			dst, _ = server.AppendCompressedFrame(dst[:0], wsframe.OpText, want[i])
			pm, _ := wsframe.NewPrepared(wsframe.OpText, document(uint64(i), 600))
			if _, err := server.BroadcastFrame(pm); err != nil {
				t.Error(err)
				return
			}
		}
	})
	wg.Wait()
}

// TestErrorsCarryCloseCodes checks the typed errors: errors.Is on the
// sentinel, and the close code through wsframe.CloseCodeOf.
func TestErrorsCarryCloseCodes(t *testing.T) {
	c := mustConn(t, Params{}, wsframe.Server, Options{})
	_, err := c.Inflate(nil, []byte{0xff, 0xff, 0xff}, 0)
	if !errors.Is(err, ErrCorrupt) || wsframe.CloseCodeOf(err) != wsframe.CloseInvalidPayload {
		t.Fatalf("corrupt: %v, code %d", err, wsframe.CloseCodeOf(err))
	}
	var de *Error
	if !errors.As(err, &de) || de.Reason != "WS_ERR_INFLATE_CORRUPT" {
		t.Fatalf("errors.As: %v", err)
	}
	if _, again := c.Inflate(nil, []byte{0x01}, 0); again != err {
		t.Fatalf("with takeover the error is sticky: got %v", again)
	}
	big := bytes.Repeat([]byte("a"), 10000)
	comp, _ := mustConn(t, Params{}, wsframe.Client, Options{}).AppendCompressed(nil, big)
	_, err = mustConn(t, Params{}, wsframe.Server, Options{}).Inflate(nil, comp, 100)
	if !errors.Is(err, ErrTooLarge) || wsframe.CloseCodeOf(err) != wsframe.CloseMessageTooBig {
		t.Fatalf("too large: %v, code %d", err, wsframe.CloseCodeOf(err))
	}
	if !bytes.Equal(wsframe.CloseFrameFor(wsframe.CloseCodeOf(err)), wsframe.FrameCloseMessageTooBig) {
		t.Fatal("no precompiled close frame for the code")
	}
}

// NewConn refuses a role that is neither wsframe.Server nor wsframe.Client:
// the connection would compress with one side's parameters and never know
// which, and BroadcastFrame would fail far from the cause.
func TestNewConnRefusesUnknownRole(t *testing.T) {
	if c, err := NewConn(Params{}, wsframe.Role(7), Options{}); err == nil {
		c.Close()
		t.Fatal("NewConn accepted role 7")
	}
}

// TestTakeoverResume: a connection that sends several messages in a row
// resumes its pooled compressor's stream without priming; a message sent
// plain, a broadcast, or another connection using the compressor in
// between makes it prime again from its history. The peer inflates every
// message in all cases.
func TestTakeoverResume(t *testing.T) {
	server, client := pair(t, Params{}, Options{})
	other, _ := pair(t, Params{}, Options{})
	builder := mustConn(t, Params{ServerNoContextTakeover: true}, wsframe.Server, Options{})
	r := rand.New(rand.NewPCG(8, 9))
	send := func(i int, want []byte) {
		t.Helper()
		f, ok := server.AppendCompressedFrame(nil, wsframe.OpText, want)
		if !ok {
			t.Fatalf("message %d not compressed", i)
		}
		_, body := frameBody(t, f)
		if got, err := client.Inflate(nil, body, 0); err != nil || !bytes.Equal(got, want) {
			t.Fatalf("message %d: %v", i, err)
		}
	}
	for i := range iterations(120, 30) {
		switch i % 6 {
		case 1:
			other.AppendCompressed(nil, event(r, i)) // takes the compressor over
			send(i, event(r, i))
		case 2:
			// Does not shrink: sent plain, so the peer never sees it, and
			// the compressor that tried must not be resumed.
			if _, ok := server.AppendCompressedFrame(nil, wsframe.OpBinary, noise(uint64(i), 300)); ok {
				t.Fatal("noise compressed")
			}
		case 4:
			// A broadcast whose frame another connection built: no
			// compressor runs, but the history grows behind the one that
			// holds this connection's stream.
			doc := document(uint64(i), 700)
			pm, _ := wsframe.NewPrepared(wsframe.OpText, doc)
			builder.BroadcastFrame(pm)
			send(i, event(r, i))
			f, err := server.BroadcastFrame(pm)
			if err != nil {
				t.Fatal(err)
			}
			_, body := frameBody(t, f)
			if got, err := client.Inflate(nil, body, 0); err != nil || !bytes.Equal(got, doc) {
				t.Fatalf("broadcast %d: %v", i, err)
			}
		default:
			send(i, event(r, i))
		}
	}
}

// TestTakeoverStaleCompressor: a connection's stream can be in several
// pooled compressors at once when its goroutine moves between Ps; only
// the one that compressed its last message may resume it. Here a
// compressor that holds the stream as of the first message comes back
// after a second message went through another compressor.
func TestTakeoverStaleCompressor(t *testing.T) {
	if raceEnabled {
		t.Skip("sync.Pool drops items under the race detector")
	}
	server, client := pair(t, Params{}, Options{})
	bits, level := server.sendBits, server.level
	send := func(i int, msg []byte) {
		t.Helper()
		out, ok := server.AppendCompressed(nil, msg)
		if !ok {
			t.Fatalf("message %d not compressed", i)
		}
		if got, err := client.Inflate(nil, out, 0); err != nil || !bytes.Equal(got, msg) {
			t.Fatalf("message %d: %v", i, err)
		}
	}
	r := rand.New(rand.NewPCG(10, 11))
	send(0, event(r, 0))
	stale := getCompressor(bits, level) // holds the stream after message 0
	if stale.owner != server.id {
		t.Skip("the pool did not hand back the compressor just used")
	}
	send(1, document(1, 700)) // through a new compressor
	current := getCompressor(bits, level)
	putCompressor(stale, bits, level)
	send(2, event(r, 2)) // gets the stale one back: must prime, not resume
	putCompressor(current, bits, level)
}

// TestTakeoverManyConnsConcurrently: connections with context takeover on
// several goroutines share the compressor pools, so a connection's stream
// moves between compressors, and compressors between connections and Ps.
// Every message must still inflate at the peer.
func TestTakeoverManyConnsConcurrently(t *testing.T) {
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			p := Params{ServerMaxWindowBits: 10 + g%2*5}
			server, client := pair(t, p, Options{})
			r := rand.New(rand.NewPCG(uint64(g), 12))
			for i := range iterations(300, 30) {
				msg := event(r, i)
				if i%7 == 3 {
					msg = document(uint64(i), 200+r.IntN(2000))
				}
				out, ok := server.AppendCompressed(nil, msg)
				if i%3 == 0 {
					runtime.Gosched()
				}
				if !ok {
					continue
				}
				if got, err := client.Inflate(nil, out, 0); err != nil || !bytes.Equal(got, msg) {
					t.Errorf("goroutine %d message %d: %v", g, i, err)
					return
				}
			}
		})
	}
	wg.Wait()
}

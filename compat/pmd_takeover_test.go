package compat

import (
	"context"
	"errors"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/hotpath-go/hotpath/compat/internal/wstest"
	"github.com/hotpath-go/hotpath/compat/wire"
	"github.com/hotpath-go/hotpath/deflatecache"
	"github.com/hotpath-go/hotpath/dispatch"
	"github.com/hotpath-go/hotpath/wsframe"
)

// takeoverInflater inflates what a server with context takeover sends on
// c, as the peer's permessage-deflate must (RFC 7692 §7.2.2).
func takeoverInflater(t *testing.T, c *wstest.Conn, offer deflatecache.ClientOffer) *deflatecache.Conn {
	t.Helper()
	params, ok, err := deflatecache.ParseResponse(c.Extensions(), offer)
	if err != nil || !ok {
		t.Fatalf("extensions %q: %v", c.Extensions(), err)
	}
	if params.ServerNoContextTakeover {
		t.Fatalf("the server keeps no window: %q", c.Extensions())
	}
	dc, err := deflatecache.NewConn(params, wsframe.Client, deflatecache.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return dc
}

// stallUntilDropped sends events to p, whose client does not read, until
// the outbox refuses one; it returns that event's payload.
func stallUntilDropped(t *testing.T, send func(v string) error) (sent []string, dropped string) {
	t.Helper()
	rng := rand.New(rand.NewChaCha8([32]byte{3}))
	words := make([]string, 512)
	for i := range words {
		b := make([]byte, 6)
		for j := range b {
			b[j] = 'a' + byte(rng.IntN(26))
		}
		words[i] = string(b)
	}
	// Bounded by count, not time: the socket buffers take about 1,700 of
	// these events before the outbox fills, which took from 3 to more than
	// 10 s under -race on a loaded machine (a 10 s deadline here failed a
	// loaded run with 'the outbox never filled').
	for i := 0; i < 20000; i++ {
		// About 8 KiB of words from a set of 512: compressed, even alone.
		var sb strings.Builder
		for sb.Len() < 8<<10 {
			sb.WriteString(words[rng.IntN(len(words))])
			sb.WriteByte(' ')
		}
		v := sb.String()
		err := send(v)
		if err == nil {
			sent = append(sent, v)
			continue
		}
		if errors.Is(err, ErrOverloaded) {
			return sent, v
		}
		t.Fatalf("send %d: %v", i, err)
	}
	t.Fatal("the outbox never filled")
	return nil, ""
}

// readInflated reads the data messages on c until want of them arrived,
// inflating with dc, and returns their decoded packets. Each read waits
// up to 20 s: once this client reads again after its stall, loopback TCP
// itself can pause for seconds (seen at 13 s in a loaded run: the
// server's window probes backed off while the client's 128 KiB receive
// buffer, emptied, advertised less than an MSS), and 5 s failed such
// runs as a server that stopped sending.
func readInflated(t *testing.T, c *wstest.Conn, dc *deflatecache.Conn, want int) (got []wire.Packet, err error) {
	t.Helper()
	for len(got) < want {
		m, rerr := c.ReadMessage(20 * time.Second)
		if rerr != nil {
			return got, rerr
		}
		if m.Opcode != wsframe.OpBinary {
			if m.Opcode == wsframe.OpClose {
				return got, errors.New("closed: " + string(m.CloseReason()))
			}
			continue
		}
		payload := m.Payload
		if m.Compressed {
			if payload, err = dc.Inflate(nil, m.Payload, 64<<20); err != nil {
				return got, err
			}
		}
		p, derr := wire.Decode(payload)
		if derr != nil {
			return got, derr
		}
		p.Payload = append([]byte(nil), p.Payload...)
		got = append(got, p)
	}
	return got, nil
}

// With ContextTakeover, a server event that the full outbox refused had
// joined the connection's compression history already: every later message
// referring to it inflated, on the client, against bytes it never got.
func TestPMDTakeoverDroppedEventKeepsStream(t *testing.T) {
	peers := make(chan *Peer, 1)
	_, addr := newTestServer(t, Options{
		Compression: Compression{ContextTakeover: true, Threshold: 16},
		Limits:      Limits{MaxOutboxBytes: 64 << 10},
		OnConnect:   func(p *Peer) { peers <- p },
	})
	offer := deflatecache.ClientOffer{}
	c := dialPMD(t, addr, "permessage-deflate")
	dc := takeoverInflater(t, c, offer)
	p := <-peers
	sent, dropped := stallUntilDropped(t, func(v string) error { return p.Event("tick", v) })
	// The client reads again; the same bytes as the dropped event, sent
	// once there is room, compress into references to the dropped one.
	type result struct {
		got []wire.Packet
		err error
	}
	done, reading := make(chan result, 1), make(chan struct{})
	go func() {
		defer close(reading)
		got, err := readInflated(t, c, dc, len(sent)+1)
		done <- result{got, err}
	}()
	sendWhenRoom(t, p, dropped, reading)
	all := append(sent, dropped)
	r := <-done
	for i := range r.got {
		if want := `"` + all[i] + `"`; string(r.got[i].Payload) != want {
			t.Fatalf("event %d of %d inflated to %d other bytes (%.40q...)", i, len(all), len(r.got[i].Payload), r.got[i].Payload)
		}
	}
	if r.err != nil {
		t.Fatalf("after %d of %d events: %v", len(r.got), len(all), r.err)
	}
}

// The same with a room emit under the default SlowConsumer policy
// (DropEvent): the member that missed an emit stays connected, so its
// stream must stay whole.
func TestPMDTakeoverDroppedEmitKeepsStream(t *testing.T) {
	peers := make(chan *Peer, 1)
	s, addr := newTestServer(t, Options{
		Compression: Compression{ContextTakeover: true, Threshold: 16},
		Limits:      Limits{MaxOutboxBytes: 64 << 10},
		NoPresence:  true,
		OnConnect:   func(p *Peer) { peers <- p },
	})
	c := dialPMD(t, addr, "permessage-deflate")
	dc := takeoverInflater(t, c, deflatecache.ClientOffer{})
	c.WriteMessage(wsframe.OpBinary, []byte{10, 1, 1, 'r'}) // Join id 1 room "r"
	waitFor(t, func() bool { return s.Members("r") == 1 })
	emit := func(v string) error {
		res, err := s.Emit("r", "tick", v)
		if err == nil && res.Dropped > 0 {
			return ErrOverloaded
		}
		return err
	}
	sent, dropped := stallUntilDropped(t, emit)
	type result struct {
		got []wire.Packet
		err error
	}
	done, reading := make(chan result, 1), make(chan struct{})
	go func() {
		defer close(reading)
		got, err := readInflated(t, c, dc, len(sent)+2) // the Join's answer first
		done <- result{got, err}
	}()
	// An event of the same bytes, compressed against the connection's
	// window, which holds the dropped emit.
	p := <-peers
	sendWhenRoom(t, p, dropped, reading)
	all := append(sent, dropped)
	r := <-done
	for i, p := range r.got[min(1, len(r.got)):] {
		if want := `"` + all[i] + `"`; string(p.Payload) != want {
			t.Fatalf("emit %d of %d inflated to %d other bytes (%.40q...)", i, len(all), len(p.Payload), p.Payload)
		}
	}
	if r.err != nil {
		t.Fatalf("after %d of %d emits: %v", len(r.got), len(all), r.err)
	}
}

// sendWhenRoom sends v to p as event "tick" once p's outbox takes it.
// The outbox has room once the client has read what the socket buffers
// hold before it, megabytes inflated one message at a time: 0.2 to 1.7 s
// under -race beside a CPU burner, and past the 2 s this waited before
// ('the outbox never drained' in a loaded run of the package). So it
// tries for as long as the client reads: until reading ends, which
// before this event arrives means an error, or 20 s without a message
// (readInflated), the bound of a server that stopped sending.
func sendWhenRoom(t *testing.T, p *Peer, v string, reading <-chan struct{}) {
	t.Helper()
	for {
		if p.Event("tick", v) == nil {
			return
		}
		select {
		case <-reading: // the caller reports why
			t.Error("the client stopped reading before the outbox took the event: the outbox never drained")
			return
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// With ContextTakeover, a turn's answers that do not fit the outbox wait
// for room, as without it: an answer is compressed only when the outbox
// takes it, so one refused is sent again, plain or compressed, without a
// gap in the windows. The reading client was disconnected (1006) at the
// first answer the outbox refused.
func TestPMDTakeoverAnswersWaitForRoom(t *testing.T) {
	r := testRouter()
	Handle(r, "rand", func(ctx context.Context, n int) ([]byte, error) {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(rand.Uint32()) // incompressible: fills the outbox
		}
		return b, nil
	})
	_, addr := newTestServer(t, Options{
		Router:      r,
		Compression: Compression{ContextTakeover: true, Threshold: 16},
		Limits:      Limits{MaxOutboxBytes: 64 << 10},
	})
	c := dialPMD(t, addr, "permessage-deflate")
	dc := takeoverInflater(t, c, deflatecache.ClientOffer{})
	// Eight calls in one write, read in one turn: 160 KiB of answers
	// against a 64 KiB outbox.
	const calls, size = 8, 20 << 10
	var burst []byte
	for id := uint32(1); id <= calls; id++ {
		pkt := wire.AppendCall(nil, dispatch.KindCall, id, "rand", 0, []byte("20480"))
		burst = wsframe.AppendMaskedFrame(burst, wsframe.OpBinary, pkt, wsframe.Fin, wsframe.NewMaskKey())
	}
	if err := c.WriteRaw(burst); err != nil {
		t.Fatal(err)
	}
	got, err := readInflated(t, c, dc, calls)
	if err != nil {
		t.Fatalf("after %d of %d answers: %v", len(got), calls, err)
	}
	for _, p := range got {
		if p.Kind != dispatch.KindResult || len(p.Payload) != size {
			t.Fatalf("answer %d: kind %v, %d bytes, want a result of %d", p.ID, p.Kind, len(p.Payload), size)
		}
	}
}

package compat

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hotpath-go/hotpath/compat/internal/wstest"
	"github.com/hotpath-go/hotpath/compat/wire"
	"github.com/hotpath-go/hotpath/deflatecache"
	"github.com/hotpath-go/hotpath/dictionary"
	"github.com/hotpath-go/hotpath/dispatch"
	"github.com/hotpath-go/hotpath/wsframe"
	"github.com/quic-go/quic-go"
)

// TestMixedLoadWithBadPeers holds the promise of the limits ("bad input
// gets a clear error and loses nothing; no other connection affected; no
// goroutine leak; memory bounded") with everything at once on one server:
// good clients on every carrier (half with the dictionary) and raw
// permessage-deflate members (one with context takeover) share a room
// while bad peers come and go beside them: malformed frames, messages
// over the limit, invalid UTF-8, a compression bomb, garbage on QUIC,
// bad packets on SCTP and WebTransport, slow consumers, peers that
// vanish mid-frame or stall in their handshake. The bad WebSocket peers
// are members of the shared room with a call running when they
// misbehave. The other tests of bad input each run alone.
//
// Every good member must get every good emit of the shared room exactly
// once and in order per sender (counted against the total sent), every
// bad peer the close code its case has alone, and afterwards the server's
// counters must add up, its connections and goroutines be gone, and its
// heap be back near where it started. Bounded in counts, not time.
func TestMixedLoadWithBadPeers(t *testing.T) {
	if testing.Short() {
		t.Skip("mixed load: some seconds on every carrier")
	}
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	heapBefore := ms.HeapAlloc
	goroutinesBefore := runtime.NumGoroutine()

	t.Run("load", mixedLoadWithBadPeers) // the env's listeners close with the subtest

	checkGoroutinesBack(t, goroutinesBefore, 10*time.Second, "10 s after the server and every peer ended")
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&ms)
	t.Logf("heap: %d KiB live before, %d KiB after", heapBefore>>10, ms.HeapAlloc>>10)
	if grew := int64(ms.HeapAlloc) - int64(heapBefore); grew > 64<<20 {
		t.Errorf("heap: %d MiB live after the run and GC, %d MiB before; want less than 64 MiB of growth", ms.HeapAlloc>>20, heapBefore>>20)
	}
}

// chaosSeq is the payload of a good client's emit.
type chaosSeq struct {
	From int    `json:"from"`
	Seq  int    `json:"seq"`
	Pad  string `json:"pad,omitempty"` // past Compression.Threshold now and then
}

// chaosMember is a good client and what it received.
type chaosMember struct {
	id   int
	name string
	c    *Client
	own  string // a room of its own

	mu       sync.Mutex
	next     []int // the next seq expected from each sender in the shared room
	shared   int   // shared emits received
	ownNext  int   // the next seq expected in its own room
	problems []string
	states   []State
}

func (m *chaosMember) problem(format string, args ...any) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.problems) < 10 {
		m.problems = append(m.problems, fmt.Sprintf(format, args...))
	}
}

func (m *chaosMember) progress() (shared, own int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.shared, m.ownNext
}

const (
	chaosIterations = 60       // each good client's loop
	chaosRepeats    = 3        // each bad case
	chaosMaxMessage = 64 << 10 // Limits.MaxMessageSize
	chaosOutbox     = 256 << 10
	chaosFloodMax   = 4000 // emits of 16 KiB at most to fill a slow consumer
)

func mixedLoadWithBadPeers(t *testing.T) {
	e := newCarrierEnv(t, Options{
		Limits:       Limits{MaxMessageSize: chaosMaxMessage, MaxOutboxBytes: chaosOutbox},
		SlowConsumer: Disconnect,
		Compression:  Compression{ContextTakeover: true},
	})
	wsAddr := strings.TrimSuffix(strings.TrimPrefix(e.urls[CarrierWebSocket], "ws://"), "/ws")
	ctx := context.Background()

	// Good clients, all members of the shared room before anyone emits;
	// the second of each carrier compresses with the router's dictionary.
	dict, err := RouterDictionary(testRouter())
	if err != nil {
		t.Fatal(err)
	}
	var members []*chaosMember
	for _, carrier := range []Carrier{CarrierWebSocket, CarrierQUIC, CarrierWebTransport, CarrierSCTP, CarrierWebRTC} {
		n := 2
		if carrier == CarrierWebRTC {
			n = 1 // a dial costs ICE and DTLS
		}
		for i := range n {
			m := &chaosMember{id: len(members), name: fmt.Sprintf("%s#%d", carrierName(carrier), i)}
			m.own = "own-" + m.name
			members = append(members, m)
			var d *dictionary.Dictionary
			if i == 1 {
				d = dict
			}
			m.c = e.dial(t, carrier, ClientOptions{
				Dictionary: d,
				Reconnect:  Reconnect{Disabled: true},
				OnState: func(s State) {
					m.mu.Lock()
					m.states = append(m.states, s)
					m.mu.Unlock()
				},
			})
		}
	}
	good := len(members)
	for _, m := range members {
		m.next = make([]int, good)
		m.c.OnRoom("mix", "seq", func(msg Message) {
			var v chaosSeq
			if err := msg.Decode(&v); err != nil || v.From < 0 || v.From >= good {
				m.problem("shared room: undecodable or foreign emit %q: %v", msg.Data, err)
				return
			}
			m.mu.Lock()
			want := m.next[v.From]
			m.next[v.From] = v.Seq + 1
			m.shared++
			m.mu.Unlock()
			if v.Seq != want {
				m.problem("shared room: from %s seq %d, want %d (lost, repeated or reordered)", members[v.From].name, v.Seq, want)
			}
		})
		m.c.OnRoom(m.own, "seq", func(msg Message) {
			var v chaosSeq
			if err := msg.Decode(&v); err != nil || v.From != m.id {
				m.problem("own room: emit %q not its own: %v", msg.Data, err)
				return
			}
			m.mu.Lock()
			want := m.ownNext
			m.ownNext = v.Seq + 1
			m.mu.Unlock()
			if v.Seq != want {
				m.problem("own room: seq %d, want %d (lost, repeated or reordered)", v.Seq, want)
			}
		})
		for _, room := range []string{"mix", m.own} {
			if _, err := m.c.Join(ctx, room); err != nil {
				t.Fatalf("%s: Join %s before the load: %v", m.name, room, err)
			}
		}
	}

	want := map[wsframe.CloseCode]uint64{wsframe.CloseNormal: uint64(good)} // the server's Closes at the end

	// Raw WebSocket members that negotiated permessage-deflate: one keeps
	// the server's compression history (context takeover), one has a
	// window of its own without. The shared room's emits past the
	// threshold reach them compressed; they read and check every good
	// emit as the Go clients do.
	type pmdMember struct {
		name string
		c    *wstest.Conn
		dc   *deflatecache.Conn
		done chan error
	}
	var pmdMembers []*pmdMember
	for _, offer := range []deflatecache.ClientOffer{{}, {ServerNoContextTakeover: true, ServerMaxWindowBits: 9}} {
		header := string(deflatecache.AppendOffer(nil, offer))
		c, err := wstest.Dial(wsAddr, "/ws", "Sec-WebSocket-Extensions: "+header)
		if err != nil {
			t.Fatalf("raw member offering %q: %v", header, err)
		}
		t.Cleanup(func() { c.NC.Close() })
		c.NC.SetWriteDeadline(time.Time{}) // Dial's 10 s: it writes its close at the end
		params, ok, err := deflatecache.ParseResponse(c.Extensions(), offer)
		if err != nil || !ok || params.ServerNoContextTakeover != offer.ServerNoContextTakeover {
			t.Fatalf("raw member offering %q: answered %q (%v); want permessage-deflate as offered", header, c.Extensions(), err)
		}
		dc, err := deflatecache.NewConn(params, wsframe.Client, deflatecache.Options{})
		if err != nil {
			t.Fatal(err)
		}
		c.WriteMessage(wsframe.OpBinary, wire.Append(nil, &wire.Packet{Kind: dispatch.KindJoin, ID: 1, Room: []byte("mix")}))
		for joined := false; !joined; {
			msg, err := c.ReadMessage(10 * time.Second)
			if err != nil {
				t.Fatalf("raw member %q: reading its Join's answer: %v", c.Extensions(), err)
			}
			payload := msg.Payload
			if msg.Compressed {
				if payload, err = dc.Inflate(nil, msg.Payload, 1<<20); err != nil {
					t.Fatalf("raw member %q: inflating: %v", c.Extensions(), err)
				}
			}
			p, err := wire.Decode(payload)
			joined = err == nil && p.Kind == dispatch.KindResult && p.ID == 1
		}
		pmdMembers = append(pmdMembers, &pmdMember{name: c.Extensions(), c: c, dc: dc, done: make(chan error, 1)})
	}
	want[wsframe.CloseNormal] += uint64(len(pmdMembers))

	bombBody := deflateBomb(t, chaosMaxMessage)

	start := make(chan struct{})
	var wg sync.WaitGroup
	run := func(f func()) {
		wg.Go(func() {
			<-start
			f()
		})
	}
	malformed := 0
	// expectCloses counts a bad case's repeats as closes with code, and
	// as malformed packets for 1008.
	expectCloses := func(code wsframe.CloseCode) {
		want[code] += chaosRepeats
		if code == wsframe.ClosePolicyViolation {
			malformed += chaosRepeats
		}
	}

	// Good loops.
	for _, m := range members {
		run(func() {
			for i := range chaosIterations {
				payload := fmt.Appendf(nil, "%s call %d ", m.name, i)
				payload = append(payload, bytes.Repeat([]byte{byte('a' + i%26)}, i*997%(8<<10))...)
				cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
				var got []byte
				if err := m.c.Call(cctx, "echo/raw", payload, &got); err != nil || !bytes.Equal(got, payload) {
					m.problem("call %d: %d bytes back, %v; want the %d bytes sent and no error", i, len(got), err, len(payload))
				}
				if n, err := m.c.Join(cctx, "mix"); err != nil || n < good {
					m.problem("join of the shared room, iteration %d: %d members, %v; want at least the %d good clients", i, n, err, good)
				}
				if _, err := m.c.Join(cctx, m.own); err != nil {
					m.problem("join of its own room, iteration %d: %v", i, err)
				}
				cancel()
				v := chaosSeq{From: m.id, Seq: i}
				if i%4 == 0 {
					v.Pad = strings.Repeat("pad ", 80)
				}
				if err := m.c.Emit("mix", "seq", v, false); err != nil {
					m.problem("emit %d to the shared room: %v", i, err)
				}
				if err := m.c.Emit(m.own, "seq", v, false); err != nil {
					m.problem("emit %d to its own room: %v", i, err)
				}
			}
		})
	}

	// Bad WebSocket peers: each must get its case's close code.
	wsCases := []struct {
		name    string
		headers []string
		send    func(c *wstest.Conn) error
		code    wsframe.CloseCode
		reason  string
	}{
		{"reserved bit RSV2", nil, func(c *wstest.Conn) error {
			return c.WriteFrame(wsframe.OpBinary, wire.AppendCall(nil, dispatch.KindCall, 1, "echo/raw", 0, nil), wsframe.Fin|wsframe.Rsv2)
		}, wsframe.CloseProtocolError, "WS_ERR_UNEXPECTED_RSV"},
		{"unmasked client frame", nil, func(c *wstest.Conn) error {
			return c.WriteRaw(wsframe.AppendFrame(nil, wsframe.OpBinary, []byte{1}, wsframe.Fin))
		}, wsframe.CloseProtocolError, "WS_ERR_EXPECTED_MASK"},
		{"invalid UTF-8 in a text frame", nil, func(c *wstest.Conn) error {
			return c.WriteMessage(wsframe.OpText, []byte{'o', 'k', 0xff})
		}, wsframe.CloseInvalidPayload, "WS_ERR_INVALID_UTF8"},
		{"text message", nil, func(c *wstest.Conn) error {
			return c.WriteMessage(wsframe.OpText, []byte("hi"))
		}, wsframe.CloseUnsupportedData, "HP_ERR_TEXT_MESSAGE"},
		{"one frame over the message limit", nil, func(c *wstest.Conn) error {
			return c.WriteMessage(wsframe.OpBinary, make([]byte, chaosMaxMessage+1))
		}, wsframe.CloseMessageTooBig, ""},
		{"fragments over the message limit", nil, func(c *wstest.Conn) error {
			if err := c.WriteFrame(wsframe.OpBinary, make([]byte, 40<<10), 0); err != nil {
				return err
			}
			return c.WriteFrame(wsframe.OpContinuation, make([]byte, 40<<10), wsframe.Fin)
		}, wsframe.CloseMessageTooBig, ""},
		{"permessage-deflate bomb", []string{"Sec-WebSocket-Extensions: permessage-deflate"}, func(c *wstest.Conn) error {
			if !strings.HasPrefix(c.Extensions(), "permessage-deflate") {
				return fmt.Errorf("extensions answered %q, want permessage-deflate", c.Extensions())
			}
			return c.WriteRaw(wsframe.AppendMaskedFrame(nil, wsframe.OpBinary, bombBody, wsframe.Fin|wsframe.Rsv1, wsframe.NewMaskKey()))
		}, wsframe.CloseMessageTooBig, "WS_ERR_INFLATE_TOO_BIG"},
		{"ping over 125 bytes", nil, func(c *wstest.Conn) error {
			return c.WriteFrame(wsframe.OpPing, make([]byte, 126), wsframe.Fin)
		}, wsframe.CloseProtocolError, "WS_ERR_CONTROL_TOO_LONG"},
		{"close with a code no endpoint may send", nil, func(c *wstest.Conn) error {
			// 1005 on the wire (AppendClosePayload would send no body).
			return c.WriteFrame(wsframe.OpClose, []byte{0x03, 0xed}, wsframe.Fin)
		}, wsframe.CloseProtocolError, "WS_ERR_INVALID_CLOSE_CODE"},
		{"close with an invalid UTF-8 reason", nil, func(c *wstest.Conn) error {
			return c.WriteFrame(wsframe.OpClose, append(wsframe.AppendClosePayload(nil, wsframe.CloseNormal, ""), 0xff), wsframe.Fin)
		}, wsframe.CloseInvalidPayload, "WS_ERR_INVALID_UTF8"},
		{"malformed packet", nil, func(c *wstest.Conn) error {
			return c.WriteMessage(wsframe.OpBinary, []byte{1})
		}, wsframe.ClosePolicyViolation, "HP_ERR_MALFORMED_PACKET"},
	}
	for _, tc := range wsCases {
		expectCloses(tc.code)
		run(func() {
			for r := range chaosRepeats {
				c, err := wstest.Dial(wsAddr, "/ws", tc.headers...)
				if err != nil {
					t.Errorf("WebSocket %s #%d: upgrade: %v; want 101", tc.name, r, err)
					continue
				}
				chaosMemberWithCallInFlight(c)
				if err := tc.send(c); err != nil {
					t.Errorf("WebSocket %s #%d: sending: %v", tc.name, r, err)
				}
				code, reason := c.ReadClose(10 * time.Second)
				if code != tc.code || tc.reason != "" && reason != tc.reason {
					t.Errorf("WebSocket %s #%d: close %d %q; want %d %q", tc.name, r, code, reason, tc.code, tc.reason)
				}
				c.NC.Close()
			}
		})
	}

	// Peers that vanish mid-frame: the server sees the connection end
	// without a close frame (1006).
	for _, cut := range []struct {
		name  string
		bytes []byte
	}{
		{"in the header", wsframe.AppendHeader(nil, wsframe.Header{Flags: wsframe.Fin, Opcode: wsframe.OpBinary, Masked: true, Length: 1000})[:3]},
		{"in the payload", append(wsframe.AppendHeader(nil, wsframe.Header{Flags: wsframe.Fin, Opcode: wsframe.OpBinary, Masked: true, Length: 1000}), make([]byte, 100)...)},
	} {
		want[wsframe.CloseAbnormal] += chaosRepeats
		run(func() {
			for r := range chaosRepeats {
				c, err := wstest.Dial(wsAddr, "/ws")
				if err != nil {
					t.Errorf("WebSocket cut %s #%d: upgrade: %v; want 101", cut.name, r, err)
					continue
				}
				chaosMemberWithCallInFlight(c)
				if err := c.WriteRaw(cut.bytes); err != nil {
					t.Errorf("WebSocket cut %s #%d: %v", cut.name, r, err)
				}
				c.NC.Close()
			}
		})
	}

	// Slow consumers: a WebSocket member of the shared room and of a
	// flooded room of its own, that stops reading. Under Disconnect its
	// outbox fills and it is dropped (1006, no close frame), whichever
	// room's emit finds it full.
	want[wsframe.CloseAbnormal] += chaosRepeats
	for r := range chaosRepeats {
		run(func() {
			flood := fmt.Sprintf("flood-%d", r)
			var headers []string
			if r%2 == 1 { // the server compresses for it with its history
				headers = append(headers, "Sec-WebSocket-Extensions: permessage-deflate")
			}
			c, err := wstest.Dial(wsAddr, "/ws", headers...)
			if err != nil {
				t.Errorf("slow consumer %d: upgrade: %v; want 101", r, err)
				return
			}
			defer c.NC.Close()
			// Its receive buffer stays small without SetReadBuffer: the
			// kernel grows it only for a reader. Shrunk further (4 KiB),
			// what the server queued before the drop left at the pace of
			// zero-window probes, seconds apart.
			c.WriteMessage(wsframe.OpBinary, wire.Append(nil, &wire.Packet{Kind: dispatch.KindJoin, ID: 1, Room: []byte(flood)}))
			c.WriteMessage(wsframe.OpBinary, wire.Append(nil, &wire.Packet{Kind: dispatch.KindJoin, ID: 2, Room: []byte("mix")}))
			for answered := 0; answered < 2; {
				msg, err := c.ReadMessage(10 * time.Second)
				if err != nil {
					t.Errorf("slow consumer %d: reading its Joins' answers: %v", r, err)
					return
				}
				if msg.Compressed {
					continue // not an answer: answers are under the threshold
				}
				if p, err := wire.Decode(msg.Payload); err == nil && p.Kind == dispatch.KindResult && (p.ID == 1 || p.ID == 2) {
					answered++
				}
			}
			payload := make([]byte, 16<<10) // half zeros, half noise: compressed to about half
			rand.Read(payload[8<<10:])
			sent := 0
			for ; sent < chaosFloodMax && e.srv.Members(flood) > 0; sent++ {
				res, err := e.srv.Emit(flood, "flood", payload)
				if err != nil {
					t.Errorf("slow consumer %d: Emit: %v", r, err)
					return
				}
				if res.Dropped > 0 {
					break
				}
			}
			if sent == chaosFloodMax {
				t.Errorf("slow consumer %d: %d emits of 16 KiB all taken; want its %d KiB outbox full and the member dropped", r, sent, chaosOutbox>>10)
				return
			}
			t.Logf("slow consumer %d: dropped after %d emits of 16 KiB to its room", r, sent+1)
			// ReadClose says 1006 for a read that timed out too.
			if code, reason := c.ReadClose(10 * time.Second); code != wsframe.CloseAbnormal || strings.Contains(reason, "timeout") {
				t.Errorf("slow consumer %d: close %d %q; want the connection dropped without a close frame (1006)", r, code, reason)
			}
		})
	}

	// Garbage on QUIC control streams.
	quicCases := []struct {
		name  string
		bytes []byte
		code  wsframe.CloseCode
	}{
		{"length prefix over the limit", appendPrefix(nil, 2*chaosMaxMessage), wsframe.CloseMessageTooBig},
		{"length prefix longer than five bytes", []byte{0x80, 0x80, 0x80, 0x80, 0x80, 0x01}, wsframe.CloseProtocolError},
		{"malformed packet", framed([]byte{1}), wsframe.ClosePolicyViolation},
	}
	for _, tc := range quicCases {
		expectCloses(tc.code)
		run(func() {
			for r := range chaosRepeats {
				qc, str, err := chaosRawQUIC(e, true)
				if err != nil {
					t.Errorf("QUIC %s #%d: %v", tc.name, r, err)
					continue
				}
				str.Write(tc.bytes)
				code, reason, err := chaosQUICEnd(qc, str)
				if err != nil || code != tc.code {
					t.Errorf("QUIC %s #%d: close %d %q, %v; want %d", tc.name, r, code, reason, err, tc.code)
				}
				qc.CloseWithError(0, "")
			}
		})
	}

	// Bad packets from Go clients on SCTP and WebTransport, as
	// TestCarrierBadInput sends them.
	injected := []struct {
		name string
		pkt  []byte
		code wsframe.CloseCode
	}{
		{"malformed", []byte{1}, wsframe.ClosePolicyViolation},
		{"over the message limit", wire.AppendCall(nil, dispatch.KindCall, 1, "echo/raw", 0, make([]byte, chaosMaxMessage+1)), wsframe.CloseMessageTooBig},
	}
	for _, carrier := range []Carrier{CarrierSCTP, CarrierWebTransport} {
		for _, tc := range injected {
			expectCloses(tc.code)
			// Concurrently: a packet over the limit costs each
			// connection the closing handshake's bound (closeTimeout),
			// both ends waiting for the other to close the carrier.
			for r := range chaosRepeats {
				run(func() {
					if err := chaosInject(e, carrier, tc.pkt, tc.code); err != nil {
						t.Errorf("%s %s #%d: %v", carrierName(carrier), tc.name, r, err)
					}
				})
			}
		}
	}

	// Handshakes that stall: half an upgrade request, a QUIC connection
	// without its control stream. Held until the load is over.
	var stalledMu sync.Mutex
	var stalled []func()
	for r := range chaosRepeats {
		run(func() {
			nc, err := net.Dial("tcp", wsAddr)
			if err != nil {
				t.Errorf("stalled upgrade %d: %v", r, err)
				return
			}
			if _, err := io.WriteString(nc, "GET /ws HTTP/1.1\r\nHost: "+wsAddr+"\r\nUpgrade: websocket\r\n"); err != nil {
				t.Errorf("stalled upgrade %d: %v", r, err)
			}
			qc, _, err := chaosRawQUIC(e, false)
			if err != nil {
				t.Errorf("stalled QUIC handshake %d: %v", r, err)
				nc.Close()
				return
			}
			stalledMu.Lock()
			stalled = append(stalled, func() { nc.Close() }, func() { qc.CloseWithError(0, "") })
			stalledMu.Unlock()
		})
	}

	for _, pm := range pmdMembers {
		go func() { pm.done <- chaosReadShared(pm.c, pm.dc, good, chaosIterations) }()
	}
	began := time.Now()
	close(start)
	wg.Wait()
	t.Logf("load and bad peers done after %v", time.Since(began))

	// Every good emit reaches every good member: the loops are over, so
	// what is missing is in flight or lost.
	wantShared := good * chaosIterations
	for _, m := range members {
		deadline := time.Now().Add(20 * time.Second)
		for {
			shared, own := m.progress()
			if shared >= wantShared && own >= chaosIterations {
				break
			}
			if time.Now().After(deadline) {
				t.Errorf("%s: %d of %d shared emits and %d of %d emits to its own room arrived within 20 s of the last", m.name, shared, wantShared, own, chaosIterations)
				break
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	for _, pm := range pmdMembers {
		if err := <-pm.done; err != nil {
			t.Errorf("raw member with %s: %v", pm.name, err)
		}
		// The closing handshake in full: a socket closed with unread
		// bytes (presence events, emits to bad members) resets the
		// connection, and the server may lose the close frame (1006).
		if err := pm.c.WriteFrame(wsframe.OpClose, wsframe.AppendClosePayload(nil, wsframe.CloseNormal, ""), wsframe.Fin); err != nil {
			t.Errorf("raw member with %s: sending its close: %v", pm.name, err)
		}
		if code, reason := pm.c.ReadClose(10 * time.Second); code != wsframe.CloseNormal {
			t.Errorf("raw member with %s: its close answered %d %q; want 1000 echoed", pm.name, code, reason)
		}
		pm.c.NC.Close()
	}
	stalledMu.Lock()
	handshakes := len(stalled)
	for _, end := range stalled {
		end()
	}
	stalledMu.Unlock()
	for _, m := range members {
		m.mu.Lock()
		if m.shared != wantShared || m.ownNext != chaosIterations {
			t.Errorf("%s: %d shared emits and %d in its own room; want exactly %d and %d", m.name, m.shared, m.ownNext, wantShared, chaosIterations)
		}
		for from, next := range m.next {
			if next != chaosIterations {
				t.Errorf("%s: last seq from %s was %d; want %d", m.name, members[from].name, next-1, chaosIterations-1)
			}
		}
		for _, p := range m.problems {
			t.Errorf("%s: %s", m.name, p)
		}
		if len(m.states) > 0 {
			t.Errorf("%s: connection states %v during the load; want none (the connection never dropped)", m.name, m.states)
		}
		m.mu.Unlock()
		m.c.Close()
	}

	// The server's account.
	deadline := time.Now().Add(10 * time.Second)
	for e.srv.Metrics().Connections != 0 || e.srv.Metrics().HandshakeFailures < uint64(handshakes) {
		if time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	got := e.srv.Metrics()
	t.Logf("connections ended after %v", time.Since(began))
	t.Logf("server: %d connections accepted, closes by code %v, %d emits (%d members skipped), %d slow consumers, %d handshake failures, %d malformed",
		got.ConnectionsTotal, got.Closes, got.Emits, got.EmitDrops, got.SlowConsumers, got.HandshakeFailures, got.Malformed)
	if got.Connections != 0 || e.srv.Peers() != 0 {
		t.Errorf("connections: %d counted open, %d peers, 10 s after every peer closed; want 0", got.Connections, e.srv.Peers())
	}
	var ended uint64
	for _, n := range got.Closes {
		ended += n
	}
	if ended != got.ConnectionsTotal {
		t.Errorf("closes: %d connections ended by code (%v), %d accepted; want every accepted connection ended once", ended, got.Closes, got.ConnectionsTotal)
	}
	if !maps.Equal(got.Closes, want) {
		codes := slices.Sorted(maps.Keys(want))
		t.Errorf("closes by code: %v; want %v (codes %v)", got.Closes, want, codes)
	}
	if got.SlowConsumers != chaosRepeats {
		t.Errorf("SlowConsumers = %d; want %d, the slow peers alone", got.SlowConsumers, chaosRepeats)
	}
	if got.HandshakeFailures != uint64(handshakes) {
		t.Errorf("HandshakeFailures = %d; want %d, the stalled handshakes alone", got.HandshakeFailures, handshakes)
	}
	if got.Malformed != uint64(malformed) {
		t.Errorf("Malformed = %d; want %d, the malformed packets sent", got.Malformed, malformed)
	}
	if got.DroppedEvents != 0 || got.Panics != 0 || got.Overloaded != 0 || got.UnknownMethods != 0 || got.IdleTimeouts != 0 {
		t.Errorf("DroppedEvents %d, Panics %d, Overloaded %d, UnknownMethods %d, IdleTimeouts %d; want all 0", got.DroppedEvents, got.Panics, got.Overloaded, got.UnknownMethods, got.IdleTimeouts)
	}
	if min := uint64(2 * good * chaosIterations); got.Emits < min {
		t.Errorf("Emits = %d; want at least the %d of the good clients", got.Emits, min)
	}
}

// chaosReadShared reads c until it has the shared room's emits of every
// good sender (senders of iterations each) and checks that each came
// once and in order per sender.
func chaosReadShared(c *wstest.Conn, dc *deflatecache.Conn, senders, iterations int) error {
	next := make([]int, senders)
	compressed := 0
	for got := 0; got < senders*iterations; {
		m, err := c.ReadMessage(20 * time.Second)
		if err != nil {
			return fmt.Errorf("after %d of %d shared emits: %w", got, senders*iterations, err)
		}
		if m.Opcode != wsframe.OpBinary {
			continue
		}
		payload := m.Payload
		if m.Compressed {
			compressed++
			if payload, err = dc.Inflate(nil, m.Payload, 1<<20); err != nil {
				return fmt.Errorf("after %d of %d shared emits: inflating: %v", got, senders*iterations, err)
			}
		}
		p, err := wire.Decode(payload)
		if err != nil {
			return fmt.Errorf("after %d of %d shared emits: a message that does not decode (compressed %v): %v", got, senders*iterations, m.Compressed, err)
		}
		if p.Kind != dispatch.KindEmit || string(p.Room) != "mix" || string(p.Name) != "seq" {
			continue
		}
		var v chaosSeq
		if err := json.Unmarshal(p.Payload, &v); err != nil || v.From < 0 || v.From >= senders {
			return fmt.Errorf("emit %q: %v; want a good sender's", p.Payload, err)
		}
		if v.Seq != next[v.From] {
			return fmt.Errorf("from sender %d seq %d, want %d (lost, repeated or reordered)", v.From, v.Seq, next[v.From])
		}
		next[v.From]++
		got++
	}
	if compressed == 0 {
		return errors.New("no emit came compressed, though every fourth is past the threshold")
	}
	return nil
}

// chaosMemberWithCallInFlight makes a raw WebSocket peer a member of the
// shared room, whose emits then reach it while it misbehaves, and leaves
// an Async call of its running, whose answer finds it gone.
func chaosMemberWithCallInFlight(c *wstest.Conn) {
	c.WriteMessage(wsframe.OpBinary, wire.Append(nil, &wire.Packet{Kind: dispatch.KindJoin, ID: 1, Room: []byte("mix")}))
	c.WriteMessage(wsframe.OpBinary, wire.AppendCall(nil, dispatch.KindCall, 2, "test/sleep", 0, []byte("20")))
}

// chaosRawQUIC opens a bare native QUIC connection, and its control
// stream when stream is set; it reports failures instead of ending the
// test, for use off the test's goroutine.
func chaosRawQUIC(e *carrierEnv, stream bool) (*quic.Conn, *quic.Stream, error) {
	tc := e.cert.ClientTLSConfig()
	tc.NextProtos = []string{ALPN}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	qc, err := quic.DialAddr(ctx, strings.TrimPrefix(e.urls[CarrierQUIC], "quic://"), tc, QUICConfig(0))
	if err != nil {
		return nil, nil, fmt.Errorf("dial: %w", err)
	}
	if !stream {
		return qc, nil, nil
	}
	str, err := qc.OpenStreamSync(ctx)
	if err != nil {
		qc.CloseWithError(0, "")
		return nil, nil, fmt.Errorf("control stream: %w", err)
	}
	return qc, str, nil
}

// chaosQUICEnd waits for the server to close qc and returns its code.
func chaosQUICEnd(qc *quic.Conn, str *quic.Stream) (wsframe.CloseCode, string, error) {
	str.SetReadDeadline(time.Now().Add(10 * time.Second))
	io.Copy(io.Discard, str)
	select {
	case <-qc.Context().Done():
	case <-time.After(10 * time.Second):
		return 0, "", errors.New("the server did not close the connection within 10 s")
	}
	var ae *quic.ApplicationError
	if cause := context.Cause(qc.Context()); !errors.As(cause, &ae) {
		return 0, "", fmt.Errorf("the connection ended with %v, not an application close", cause)
	}
	return wsframe.CloseCode(ae.ErrorCode), ae.ErrorMessage, nil
}

// chaosInject dials a Go client on carrier, sends pkt on its connection
// as it is, and checks that the connection ends with want, as the
// client's next call reports it.
func chaosInject(e *carrierEnv, carrier Carrier, pkt []byte, want wsframe.CloseCode) error {
	states := make(chan State, 4)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := Dial(ctx, e.urls[carrier], ClientOptions{
		TLSConfig:  e.cert.ClientTLSConfig(),
		DTLSConfig: e.cert.ClientDTLSConfig(),
		Reconnect:  Reconnect{Disabled: true},
		Logger:     slog.New(slog.DiscardHandler),
		OnState:    sendState(states),
	})
	if err != nil {
		return fmt.Errorf("dial: %w", err)
	}
	defer c.Close()
	cc, err := c.current()
	if err != nil {
		return fmt.Errorf("connection after dial: %w", err)
	}
	cc.link.sendBuilt(append(beginFrame(nil), pkt...))
	select {
	case s := <-states:
		if s != Closed {
			return fmt.Errorf("state %v after the bad packet; want closed", s)
		}
	case <-time.After(10 * time.Second):
		return errors.New("the connection was not closed within 10 s of the bad packet")
	}
	err = c.Call(context.Background(), "echo/say", echoReq{Text: "after"}, nil)
	if code := CloseStatus(err); !errors.Is(err, ErrDisconnected) || code != want {
		return fmt.Errorf("call after the bad packet: %v (close %d); want ErrDisconnected with close %d", err, code, want)
	}
	return nil
}

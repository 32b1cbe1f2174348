package compat

// Tests of the rules of PROTOCOL.md that no other test checked at the
// wire, each named by its section. compat/PROTOCOL-MUSTS.md lists every
// rule of the spec with the test that checks it, here or elsewhere.

import (
	"bytes"
	"context"
	"errors"
	"net"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gobwas/ws/wsutil"
	"github.com/hotpath-go/hotpath/compat/internal/wstest"
	"github.com/hotpath-go/hotpath/compat/wire"
	"github.com/hotpath-go/hotpath/dispatch"
	"github.com/hotpath-go/hotpath/wsframe"
)

// batchOf is a Batch packet holding items as they are, whatever they are.
func batchOf(items ...[]byte) []byte {
	var payload []byte
	for _, it := range items {
		payload = wire.AppendItem(payload, it)
	}
	return wire.Append(nil, &wire.Packet{Kind: dispatch.KindBatch, Count: uint32(len(items)), Payload: payload})
}

// PROTOCOL.md §1, §2, §3, §4.7, §4.9, §7 at the server: each violation
// closes the connection with its code and its stable reason (§7: "the
// close reason is a stable machine-readable code"), on a batch's items as
// on packets alone. TestBadInputCloseCodes checks some of the codes; this
// checks the reasons, and the kinds and batches it did not send.
func TestProtocolServerClosesWithCodeAndReason(t *testing.T) {
	_, addr := newTestServer(t, Options{Limits: Limits{MaxMessageSize: 1024, MaxBatch: 2}})
	call := wire.AppendCall(nil, dispatch.KindCall, 1, "echo/raw", 0, nil)
	cases := []struct {
		name   string
		op     wsframe.Opcode
		msg    []byte
		code   wsframe.CloseCode
		reason string
	}{
		{"§1 a text message", wsframe.OpText, []byte("hi"), wsframe.CloseUnsupportedData, "HP_ERR_TEXT_MESSAGE"},
		{"§3 an empty message", wsframe.OpBinary, nil, wsframe.ClosePolicyViolation, "HP_ERR_MALFORMED_PACKET"},
		{"§3 kind 0", wsframe.OpBinary, []byte{0}, wsframe.ClosePolicyViolation, "HP_ERR_UNKNOWN_KIND"},
		{"§3 kind 0x7f", wsframe.OpBinary, []byte{0x7f}, wsframe.ClosePolicyViolation, "HP_ERR_UNKNOWN_KIND"},
		{"§3 a Result from a client", wsframe.OpBinary, wire.AppendResult(nil, 1, nil), wsframe.ClosePolicyViolation, "HP_ERR_UNKNOWN_KIND"},
		{"§3 an Error from a client", wsframe.OpBinary, wire.AppendError(nil, 1, 1, "x", nil), wsframe.ClosePolicyViolation, "HP_ERR_UNKNOWN_KIND"},
		{"§3 an Ask from a client", wsframe.OpBinary, wire.AppendCall(nil, dispatch.KindAsk, 1, "a/b", 0, nil), wsframe.ClosePolicyViolation, "HP_ERR_UNKNOWN_KIND"},
		{"§3 the compressed bit before negotiation", wsframe.OpBinary, wire.AppendCompressed(nil, dispatch.KindCall, []byte{1, 2, 3}), wsframe.ClosePolicyViolation, "HP_ERR_UNNEGOTIATED_COMPRESSION"},
		{"§2 a name not UTF-8", wsframe.OpBinary, []byte{byte(dispatch.KindEvent), 1, 0xff}, wsframe.ClosePolicyViolation, "HP_ERR_MALFORMED_PACKET"},
		{"§2 an id not in shortest form", wsframe.OpBinary, []byte{byte(dispatch.KindCall), 0x81, 0x00, 1, 'a', 0}, wsframe.ClosePolicyViolation, "HP_ERR_MALFORMED_PACKET"},
		{"§2 a Join with an empty room", wsframe.OpBinary, []byte{byte(dispatch.KindJoin), 1, 0}, wsframe.ClosePolicyViolation, "HP_ERR_MALFORMED_PACKET"},
		{"§4.7 a batch of count 0", wsframe.OpBinary, []byte{byte(dispatch.KindBatch), 0}, wsframe.ClosePolicyViolation, "HP_ERR_MALFORMED_PACKET"},
		{"§4.7 a batch in a batch", wsframe.OpBinary, batchOf(batchOf(call)), wsframe.ClosePolicyViolation, "HP_ERR_MALFORMED_PACKET"},
		{"§4.7 capabilities in a batch", wsframe.OpBinary, batchOf(call, wire.Append(nil, &wire.Packet{Kind: dispatch.KindCapabilities})), wsframe.ClosePolicyViolation, "HP_ERR_MALFORMED_PACKET"},
		{"§4.7 a compressed item", wsframe.OpBinary, batchOf(wire.AppendCompressed(nil, dispatch.KindCall, []byte{1})), wsframe.ClosePolicyViolation, "HP_ERR_MALFORMED_PACKET"},
		{"§3 a Result in a batch", wsframe.OpBinary, batchOf(call, wire.AppendResult(nil, 1, nil)), wsframe.ClosePolicyViolation, "HP_ERR_UNKNOWN_KIND"},
		{"§3 an unknown kind in a batch", wsframe.OpBinary, batchOf([]byte{0x7f}), wsframe.ClosePolicyViolation, "HP_ERR_UNKNOWN_KIND"},
		{"§3 a malformed item", wsframe.OpBinary, batchOf([]byte{byte(dispatch.KindCall)}), wsframe.ClosePolicyViolation, "HP_ERR_MALFORMED_PACKET"},
		{"§4.7 a batch over maxBatch", wsframe.OpBinary, batchOf(call, call, call), wsframe.CloseMessageTooBig, "HP_ERR_BATCH_TOO_LARGE"},
		{"§4.9 a message over maxMessage", wsframe.OpBinary, wire.AppendCall(nil, dispatch.KindCall, 1, "echo/raw", 0, make([]byte, 1024)), wsframe.CloseMessageTooBig, ""},
	}
	for _, tc := range cases {
		c := dial(t, addr)
		if err := c.WriteMessage(tc.op, tc.msg); err != nil {
			t.Fatal(err)
		}
		code, reason := c.ReadClose(10 * time.Second)
		if code != tc.code || tc.reason != "" && reason != tc.reason {
			t.Errorf("%s: close %d %q, want %d %q", tc.name, code, reason, tc.code, tc.reason)
		}
		c.NC.Close()
	}
}

// PROTOCOL.md §4.9: the server sends its capabilities only to a client
// that sent its own, and answers those with codec, maxMessage,
// maxInFlight, maxBatch and server, ignoring keys it does not know.
func TestProtocolCapabilitiesAnswer(t *testing.T) {
	_, addr := newTestServer(t, Options{Limits: Limits{MaxMessageSize: 5000, MaxInFlight: 7, MaxBatch: 9}})
	// No capabilities: the first packet is the answer to the call.
	c := dial(t, addr)
	c.WriteMessage(wsframe.OpBinary, wire.AppendCall(nil, dispatch.KindCall, 1, "echo/raw", 0, []byte("x")))
	if p := readPacket(t, c); p.Kind != dispatch.KindResult || p.ID != 1 {
		t.Errorf("a client that sent no capabilities first got %+v, want the Result", p)
	}
	c.NC.Close()

	c = dial(t, addr)
	pairs := wire.AppendPair(nil, "future", "whatever")
	pairs = wire.AppendPair(pairs, "codec", "cbor, json")
	pairs = wire.AppendPair(pairs, "", "")
	c.WriteMessage(wsframe.OpBinary, wire.Append(nil, &wire.Packet{Kind: dispatch.KindCapabilities, Count: 3, Payload: pairs}))
	p := readPacket(t, c)
	if p.Kind != dispatch.KindCapabilities {
		t.Fatalf("capabilities answered with %+v", p)
	}
	got := map[string]string{}
	for k, v := range p.Pairs() {
		got[string(k)] = string(v)
	}
	want := map[string]string{"codec": "json", "maxMessage": "5000", "maxInFlight": "7", "maxBatch": "9", "server": "hotpath/" + Version}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("capability %s = %q, want %q (all: %v)", k, got[k], v, got)
		}
	}
	if _, ok := got["dict"]; ok {
		t.Errorf("dict chosen without an offer: %v", got)
	}
	if _, ok := got["maxEmit"]; ok {
		t.Errorf("maxEmit announced without Limits.MaxEmitSize: %v", got)
	}
	c.WriteMessage(wsframe.OpBinary, wire.AppendCall(nil, dispatch.KindCall, 2, "echo/raw", 0, []byte("y")))
	if p := readPacket(t, c); p.Kind != dispatch.KindResult || p.ID != 2 {
		t.Errorf("after capabilities with unknown keys: %+v, want the Result", p)
	}
}

// PROTOCOL.md §4.9: the server announces Limits.MaxEmitSize as maxEmit
// when it bounds an emit below maxMessage, and not otherwise (one at or
// over maxMessage bounds nothing more than maxMessage does).
func TestProtocolCapabilitiesMaxEmit(t *testing.T) {
	for _, tc := range []struct {
		maxEmit int
		want    string // "" for absent
	}{{100, "100"}, {4999, "4999"}, {5000, ""}, {6000, ""}, {0, ""}, {-1, ""}} {
		_, addr := newTestServer(t, Options{Limits: Limits{MaxMessageSize: 5000, MaxEmitSize: tc.maxEmit}})
		c := dial(t, addr)
		c.WriteMessage(wsframe.OpBinary, wire.Append(nil, &wire.Packet{Kind: dispatch.KindCapabilities}))
		p := readPacket(t, c)
		if p.Kind != dispatch.KindCapabilities {
			t.Fatalf("capabilities answered with %+v", p)
		}
		got, ok := "", false
		for k, v := range p.Pairs() {
			if string(k) == "maxEmit" {
				got, ok = string(v), true
			}
		}
		if got != tc.want || ok != (tc.want != "") {
			t.Errorf("MaxEmitSize %d: maxEmit %q (announced %v), want %q", tc.maxEmit, got, ok, tc.want)
		}
		c.NC.Close()
	}
}

// PROTOCOL.md §4.9: a client sends Capabilities at most once per
// connection; the server closes a repeat with 1008
// HP_ERR_REPEATED_CAPABILITIES instead of answering it. It answered each,
// and switched to the dictionary codec a repeat chose while packets
// compressed with the first could still be on their way.
func TestProtocolCapabilitiesOnce(t *testing.T) {
	_, addr := newTestServer(t, Options{})
	d, err := RouterDictionary(testRouter())
	if err != nil {
		t.Fatal(err)
	}
	caps := func(offer string) []byte {
		return wire.Append(nil, &wire.Packet{Kind: dispatch.KindCapabilities, Count: 1, Payload: wire.AppendPair(nil, "dict", offer)})
	}
	c := dial(t, addr)
	c.WriteMessage(wsframe.OpBinary, caps("deflate:"+d.ID()))
	if p := readPacket(t, c); p.Kind != dispatch.KindCapabilities {
		t.Fatalf("capabilities answered with %+v", p)
	}
	c.WriteMessage(wsframe.OpBinary, caps("zstd:"+d.ID()))
	if code, reason := c.ReadClose(hangBound); code != wsframe.ClosePolicyViolation || reason != errRepeatedCapabilities.Reason {
		t.Errorf("capabilities sent again: close %d (%s), want 1008 %s", code, reason, errRepeatedCapabilities.Reason)
	}
}

// PROTOCOL.md §4.4: an Answer whose id was never asked is ignored (and
// counted as late): the connection lives on.
func TestProtocolAnswerNeverAskedIgnored(t *testing.T) {
	s, addr := newTestServer(t, Options{})
	c := dial(t, addr)
	c.WriteMessage(wsframe.OpBinary, wire.Append(nil, &wire.Packet{Kind: dispatch.KindAnswer, ID: 12345, Status: wire.AnswerOK, Payload: []byte(`1`)}))
	c.WriteMessage(wsframe.OpBinary, wire.Append(nil, &wire.Packet{Kind: dispatch.KindAnswer, ID: 6789, Status: wire.AnswerError, Code: 1000, Message: []byte("no")}))
	c.WriteMessage(wsframe.OpBinary, wire.AppendCall(nil, dispatch.KindCall, 1, "echo/raw", 0, []byte("x")))
	if p := readPacket(t, c); p.Kind != dispatch.KindResult || p.ID != 1 {
		t.Fatalf("after answers never asked: %+v, want the Result", p)
	}
	if n := s.Metrics().LateAnswers; n != 2 {
		t.Errorf("late answers %d, want 2", n)
	}
}

// PROTOCOL.md §4.4: the server's ask fails with Canceled when the
// connection closes before the answer.
func TestProtocolAskCanceledWhenTheConnectionCloses(t *testing.T) {
	r := testRouter()
	result := make(chan error, 1)
	Handle(r, "test/askforever", func(ctx context.Context, _ int) (int, error) {
		err := PeerFrom(ctx).Ask(context.WithoutCancel(ctx), "never/answered", nil, nil)
		result <- err
		return 0, err
	}, Async())
	_, addr := newTestServer(t, Options{Router: r, AskTimeout: time.Minute})
	c := dial(t, addr)
	c.WriteMessage(wsframe.OpBinary, wire.AppendCall(nil, dispatch.KindCall, 1, "test/askforever", 0, []byte("0")))
	if p := readPacket(t, c); p.Kind != dispatch.KindAsk {
		t.Fatalf("got %+v, want the Ask", p)
	}
	c.Close()
	select {
	case err := <-result:
		if !errors.Is(err, ErrCanceled) {
			t.Errorf("Ask = %v, want ErrCanceled", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Ask did not return when the connection closed")
	}
}

// PROTOCOL.md §4.5: a server MAY limit the rooms per connection; a Join
// past the limit is answered Error 1 (BadRequest) and the connection
// lives on.
func TestProtocolJoinPastRoomLimit(t *testing.T) {
	_, addr := newTestServer(t, Options{Limits: Limits{MaxRooms: 1}})
	c := dial(t, addr)
	for i, room := range []string{"a", "b"} {
		c.WriteMessage(wsframe.OpBinary, wire.Append(nil, &wire.Packet{Kind: dispatch.KindJoin, ID: uint32(i + 1), Room: []byte(room)}))
	}
	var answers []string
	for len(answers) < 2 {
		p := readPacket(t, c)
		switch p.Kind {
		case dispatch.KindResult:
			answers = append(answers, "result")
		case dispatch.KindError:
			answers = append(answers, "error "+string(rune('0'+p.Code)))
		}
	}
	if got := strings.Join(answers, ", "); got != "result, error 1" {
		t.Errorf("join a, join b past MaxRooms 1: %s; want result, error 1", got)
	}
}

// PROTOCOL.md §4.2: a handler that panics is answered Internal (4), its
// details logged, not sent; a handler's error with a reserved code keeps
// its message and data under Internal.
func TestProtocolInternalErrors(t *testing.T) {
	r := testRouter()
	Handle(r, "err/reserved", func(context.Context, int) (int, error) {
		return 0, &Error{Code: 500, Message: "reserved", Data: []byte(`{"k":1}`)}
	})
	_, addr := newTestServer(t, Options{Router: r})
	c := dial(t, addr)
	c.WriteMessage(wsframe.OpBinary, wire.AppendCall(nil, dispatch.KindCall, 1, "test/panic", 0, []byte(`{}`)))
	if p := readPacket(t, c); p.Kind != dispatch.KindError || p.Code != wire.CodeInternal || bytes.Contains(p.Message, []byte("boom")) || bytes.Contains(p.Payload, []byte("boom")) {
		t.Errorf("a panic answered %+v, want Internal without the panic's value", p)
	}
	c.WriteMessage(wsframe.OpBinary, wire.AppendCall(nil, dispatch.KindCall, 2, "err/reserved", 0, []byte(`1`)))
	if p := readPacket(t, c); p.Kind != dispatch.KindError || p.Code != wire.CodeInternal || string(p.Message) != "reserved" || string(p.Payload) != `{"k":1}` {
		t.Errorf("code 500 answered %+v, want Internal with message and data kept", p)
	}
}

// PROTOCOL.md §3, §4.7 at the Go client: a kind only clients send, one
// in a batch, and a batch holding what no batch may hold close the
// connection with 1008 and their reason. TestClientBadServerInput checks
// a Call and the WebSocket violations.
func TestProtocolClientClosesWithCodeAndReason(t *testing.T) {
	frame := func(pkt []byte) []byte { return wsframe.AppendFrame(nil, wsframe.OpBinary, pkt, wsframe.Fin) }
	result := wire.AppendResult(nil, 1, nil)
	cases := []struct {
		name   string
		pkt    []byte
		reason string
	}{
		{"§3 a Join from a server", wire.Append(nil, &wire.Packet{Kind: dispatch.KindJoin, ID: 1, Room: []byte("r")}), "HP_ERR_UNKNOWN_KIND"},
		{"§3 a Leave from a server", wire.Append(nil, &wire.Packet{Kind: dispatch.KindLeave, ID: 1, Room: []byte("r")}), "HP_ERR_UNKNOWN_KIND"},
		{"§3 an Answer from a server", wire.Append(nil, &wire.Packet{Kind: dispatch.KindAnswer, ID: 1}), "HP_ERR_UNKNOWN_KIND"},
		{"§3 a Call in a batch", batchOf(wire.AppendCall(nil, dispatch.KindCall, 1, "a/b", 0, nil)), "HP_ERR_UNKNOWN_KIND"},
		// An item's kind is read before its body, as at the server.
		{"§3 a Call without its body in a batch", batchOf([]byte{byte(dispatch.KindCall)}), "HP_ERR_UNKNOWN_KIND"},
		{"§3 an unknown kind in a batch", batchOf([]byte{0x7f}), "HP_ERR_UNKNOWN_KIND"},
		{"§3 a malformed item", batchOf([]byte{byte(dispatch.KindResult)}), "HP_ERR_MALFORMED_PACKET"},
		{"§3 kind 0", []byte{0}, "HP_ERR_UNKNOWN_KIND"},
		{"§3 an empty message", nil, "HP_ERR_MALFORMED_PACKET"},
		{"§4.7 a batch in a batch", batchOf(batchOf(result)), "HP_ERR_MALFORMED_PACKET"},
		{"§4.7 a compressed item", batchOf(wire.AppendCompressed(nil, dispatch.KindResult, []byte{1})), "HP_ERR_MALFORMED_PACKET"},
		{"§4.7 a batch of count 0", []byte{byte(dispatch.KindBatch), 0}, "HP_ERR_MALFORMED_PACKET"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ln := listenLoopback(t)
			got := make(chan rawClose, 1)
			go func() { got <- badServer(ln, frame(tc.pkt)) }()
			c := dialClient(t, ln.Addr().String(), ClientOptions{Reconnect: Reconnect{Disabled: true}})
			err := callWithin(t, c, context.Background(), "echo/say", echoReq{Text: "hi"}, nil)
			var ce *CloseError
			if !errors.Is(err, ErrDisconnected) || !errors.As(err, &ce) || ce.Remote || ce.Code != wsframe.ClosePolicyViolation || ce.Reason != tc.reason {
				t.Errorf("call: %v, want ErrDisconnected with this end's close 1008 %s", err, tc.reason)
			}
			wantClientClose(t, got, wsframe.ClosePolicyViolation, "")
		})
	}
}

// PROTOCOL.md §4.9: the Go client that receives exactly the capabilities
// it sent (a server in echo mode) closes with 1008 HP_ERR_ECHO_SERVER,
// and Dial says so. TestDialAnEchoServer checks Dial's message.
func TestProtocolClientClosesOnItsOwnCapabilities(t *testing.T) {
	_, addr := newTestServer(t, Options{Echo: true})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := Dial(ctx, "ws://"+addr+"/ws", ClientOptions{Reconnect: Reconnect{Disabled: true}})
	if err == nil {
		c.Close()
		t.Fatal("Dial of an echo server succeeded")
	}
	var ce *CloseError
	if !errors.As(err, &ce) || ce.Remote || ce.Code != wsframe.ClosePolicyViolation || ce.Reason != "HP_ERR_ECHO_SERVER" {
		t.Errorf("Dial: %v, want this end's close 1008 HP_ERR_ECHO_SERVER", err)
	}
}

// PROTOCOL.md §4.1: when a call's timeout passes, the server cancels the
// handler's context and answers Error 5.
func TestProtocolCallTimeoutCancelsTheHandler(t *testing.T) {
	r := testRouter()
	ended := make(chan error, 1)
	Handle(r, "test/block", func(ctx context.Context, _ int) (int, error) {
		select {
		case <-ctx.Done():
			ended <- ctx.Err()
		case <-time.After(10 * time.Second):
			ended <- nil
		}
		return 0, ctx.Err()
	}, Async())
	_, addr := newTestServer(t, Options{Router: r})
	c := dial(t, addr)
	c.WriteMessage(wsframe.OpBinary, wire.AppendCall(nil, dispatch.KindCall, 4, "test/block", 20, []byte("0")))
	if p := readPacket(t, c); p.Kind != dispatch.KindError || p.ID != 4 || p.Code != wire.CodeTimeout {
		t.Errorf("got %+v, want Error 5 for call 4", p)
	}
	if err := <-ended; !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("the handler's ctx ended with %v, want DeadlineExceeded", err)
	}
}

// PROTOCOL.md §4.7: the server answers a batch of calls with batches of
// answers, each within 64 KiB, a larger answer alone: three answers of
// 40 KiB leave in three packets, none of them over 64 KiB.
func TestProtocolBatchAnswersWithin64KiB(t *testing.T) {
	_, addr := newTestServer(t, Options{})
	c := dial(t, addr)
	var calls [][]byte
	for i := range 3 {
		calls = append(calls, wire.AppendCall(nil, dispatch.KindCall, uint32(i+1), "echo/raw", 0, make([]byte, 40<<10)))
	}
	c.WriteMessage(wsframe.OpBinary, batchOf(calls...))
	answered := 0
	for answered < 3 {
		m, err := c.ReadMessage(10 * time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if m.Opcode != wsframe.OpBinary {
			continue
		}
		if len(m.Payload) > 64<<10 {
			t.Errorf("a message of %d bytes, over 64 KiB", len(m.Payload))
		}
		p, err := wire.Decode(m.Payload)
		switch {
		case err != nil:
			t.Fatal(err)
		case p.Kind == dispatch.KindBatch:
			answered += int(p.Count)
		default:
			answered++
		}
	}
}

// PROTOCOL.md §4.5: on join the joiner gets the $join too; on leave the
// leaver gets no $leave, the members left do.
func TestProtocolPresenceJoinerIncludedLeaverExcluded(t *testing.T) {
	_, addr := newTestServer(t, Options{PresenceInterval: -1}) // one per change, at once
	a, b := dial(t, addr), dial(t, addr)
	// until reads c's packets up to the answer to id and returns the
	// presence events on the way.
	until := func(c *wstest.Conn, id uint32) (presence []string) {
		t.Helper()
		for {
			p := readPacket(t, c)
			if p.Kind == dispatch.KindEmit && p.Name[0] == '$' {
				presence = append(presence, string(p.Name)+string(p.Payload))
			}
			if (p.Kind == dispatch.KindResult || p.Kind == dispatch.KindError) && p.ID == id {
				return presence
			}
		}
	}
	send := func(c *wstest.Conn, kind dispatch.Kind, id uint32) {
		c.WriteMessage(wsframe.OpBinary, wire.Append(nil, &wire.Packet{Kind: kind, ID: id, Room: []byte("r")}))
	}
	send(a, dispatch.KindJoin, 1)
	until(a, 1)
	send(b, dispatch.KindJoin, 2)
	if got := strings.Join(until(b, 2), " "); got != `$join{"members":2}` {
		t.Errorf("the joiner's presence events: %s, want its own $join", got)
	}
	send(b, dispatch.KindLeave, 3)
	until(b, 3)
	// a sees b's join and leave; the $leave reached a before b's next
	// answer leaves: b, were it sent one, would read it first.
	for got := []string(nil); len(got) < 2; {
		p := readPacket(t, a)
		if p.Kind == dispatch.KindEmit && p.Name[0] == '$' {
			got = append(got, string(p.Name)+string(p.Payload))
		}
		if len(got) == 2 && strings.Join(got, " ") != `$join{"members":2} $leave{"members":1}` {
			t.Errorf("the member's presence events: %v", got)
		}
	}
	b.WriteMessage(wsframe.OpBinary, wire.AppendCall(nil, dispatch.KindCall, 4, "echo/raw", 0, nil))
	if got := until(b, 4); len(got) != 0 {
		t.Errorf("the leaver got %v after its leave, want nothing", got)
	}
}

// PROTOCOL.md §4.9 at the Go client: unknown capability keys are
// ignored; the client goes on with what it knows.
func TestProtocolClientIgnoresUnknownCapabilities(t *testing.T) {
	ln := listenLoopback(t)
	go rawServer(ln, "", func(nc net.Conn, p wire.Packet) {
		switch p.Kind {
		case dispatch.KindCapabilities:
			wsutil.WriteServerBinary(nc, capsOf("future", "x", "codec", "json", "", ""))
		case dispatch.KindCall:
			wsutil.WriteServerBinary(nc, wire.AppendResult(nil, p.ID, []byte(`"ok"`)))
		}
	})
	c := dialClient(t, ln.Addr().String(), ClientOptions{Reconnect: Reconnect{Disabled: true}})
	var out string
	if err := callWithin(t, c, context.Background(), "any/method", nil, &out); err != nil || out != "ok" {
		t.Errorf("a call after capabilities with unknown keys: %q, %v", out, err)
	}
}

// PROTOCOL.md §4.9 at the Go client: a server sends its Capabilities
// once per connection; the client closes a repeat with 1008
// HP_ERR_REPEATED_CAPABILITIES, as the server closes a client's. It took
// a repeat's limits (not its dictionary) and went on. A reconnection is a
// new connection, whose first Capabilities are taken.
func TestProtocolClientClosesOnRepeatedCapabilities(t *testing.T) {
	ln := listenLoopback(t)
	closed := make(chan rawClose, 1)
	go func() {
		for i := range 2 {
			cl := rawServer(ln, "", func(nc net.Conn, p wire.Packet) {
				switch {
				case p.Kind == dispatch.KindCapabilities:
					wsutil.WriteServerBinary(nc, capsOf("codec", "json", "maxMessage", "4194304"))
				case p.Kind == dispatch.KindCall && i == 0:
					wsutil.WriteServerBinary(nc, capsOf("codec", "json", "maxMessage", "64")) // the repeat
					wsutil.WriteServerBinary(nc, wire.AppendResult(nil, p.ID, []byte(`"first"`)))
				case p.Kind == dispatch.KindCall:
					wsutil.WriteServerBinary(nc, wire.AppendResult(nil, p.ID, []byte(`"second"`)))
				}
			})
			if i == 0 {
				closed <- cl
			}
		}
	}()
	states := make(chan State, 8)
	c := dialClient(t, ln.Addr().String(), ClientOptions{Reconnect: Reconnect{MinDelay: time.Millisecond}, OnState: sendState(states)})
	var out string
	err := callWithin(t, c, context.Background(), "any/method", nil, &out)
	var ce *CloseError
	if !errors.Is(err, ErrDisconnected) || !errors.As(err, &ce) || ce.Remote || ce.Code != wsframe.ClosePolicyViolation || ce.Reason != errRepeatedCapabilities.Reason {
		t.Errorf("a call answered after a repeat of the capabilities: %q, %v; want ErrDisconnected with this end's close 1008 %s", out, err, errRepeatedCapabilities.Reason)
	}
	wantClientClose(t, closed, wsframe.ClosePolicyViolation, "")
	for s := State(0); s != Connected; {
		select {
		case s = <-states:
		case <-time.After(hangBound):
			t.Fatal("the client did not reconnect")
		}
	}
	if err := callWithin(t, c, context.Background(), "any/method", nil, &out); err != nil || out != "second" {
		t.Errorf("a call after reconnecting: %q, %v; want \"second\"", out, err)
	}
}

// PROTOCOL.md §4.9 at the Go client: a server's maxEmit holds for its
// connection, and a reconnection takes the next server's (here none, so
// maxMessage alone bounds an emit).
func TestProtocolClientTakesEachConnectionsMaxEmit(t *testing.T) {
	ln := listenLoopback(t)
	emits := make(chan string, 8)
	drop := make(chan struct{}) // closed to drop the first connection
	dropped := false
	defer func() {
		if !dropped {
			close(drop) // a test that failed first ends the connection too
		}
	}()
	go func() {
		for i := range 2 {
			nc, err := acceptRaw(ln, "")
			if err != nil {
				return
			}
			if i == 0 {
				go func() { <-drop; nc.Close() }()
			}
			serveRaw(nc, func(p wire.Packet) {
				switch p.Kind {
				case dispatch.KindCapabilities:
					if i == 0 {
						wsutil.WriteServerBinary(nc, capsOf("codec", "json", "maxEmit", "16"))
					} else {
						wsutil.WriteServerBinary(nc, capsOf("codec", "json"))
					}
				case dispatch.KindEmit:
					emits <- strconv.Itoa(i) + " " + string(p.Payload)
				}
			})
		}
	}()
	states := make(chan State, 8)
	c := dialClient(t, ln.Addr().String(), ClientOptions{Reconnect: Reconnect{MinDelay: time.Millisecond}, OnState: sendState(states)})
	over := strings.Repeat("x", 15) // 17 bytes encoded
	if err := c.Emit("r", "e", over, false); !errors.Is(err, ErrMessageTooBig) {
		t.Errorf("an emit over the server's maxEmit: %v, want ErrMessageTooBig", err)
	}
	if err := c.Emit("r", "e", strings.Repeat("x", 14), false); err != nil {
		t.Fatalf("an emit at the server's maxEmit: %v", err)
	}
	for _, want := range []string{`0 "` + strings.Repeat("x", 14) + `"`, `1 "` + over + `"`} {
		select {
		case got := <-emits:
			if got != want {
				t.Fatalf("the server received %q, want %q", got, want)
			}
		case <-time.After(hangBound):
			t.Fatalf("the server never received %q", want)
		}
		if want[0] == '1' {
			break
		}
		close(drop) // the client reconnects
		dropped = true
		for s := State(0); s != Connected; {
			select {
			case s = <-states:
			case <-time.After(hangBound):
				t.Fatal("the client did not reconnect")
			}
		}
		if err := c.Emit("r", "e", over, false); err != nil {
			t.Errorf("an emit of 17 bytes to a server that announced no maxEmit: %v", err)
		}
	}
}

// PROTOCOL.md §4.8 at the Go client: a Pong is as long as its Ping, so a
// server's Ping whose Pong would be over the server's announced
// maxMessage closes with 1009 HP_ERR_MESSAGE_TOO_BIG instead of being
// answered with a Pong the server would close on, as the server does on
// a client's such Ping (TestPingWhosePongPassesTheClientLimit).
func TestProtocolClientPongWithinTheServerLimit(t *testing.T) {
	const limit = 100
	ln := listenLoopback(t)
	data := strings.Repeat("p", limit-1) // a Pong of exactly the limit
	ping := func(data string) []byte {
		return wire.Append(nil, &wire.Packet{Kind: dispatch.KindPing, Payload: []byte(data)})
	}
	pongs := make(chan string, 2)
	closed := make(chan rawClose, 1)
	go func() {
		closed <- rawServer(ln, "", func(nc net.Conn, p wire.Packet) {
			switch p.Kind {
			case dispatch.KindCapabilities:
				wsutil.WriteServerBinary(nc, capsOf("codec", "json", "maxMessage", strconv.Itoa(limit)))
			case dispatch.KindCall:
				wsutil.WriteServerBinary(nc, ping(data))
			case dispatch.KindPong:
				select {
				case pongs <- string(p.Payload):
				default:
				}
				if len(pongs) == 1 {
					wsutil.WriteServerBinary(nc, ping(data+"p"))
				}
			}
		})
	}()
	c := dialClient(t, ln.Addr().String(), ClientOptions{Reconnect: Reconnect{Disabled: true}})
	err := callWithin(t, c, context.Background(), "any/method", nil, nil)
	var ce *CloseError
	if !errors.Is(err, ErrDisconnected) || !errors.As(err, &ce) || ce.Remote || ce.Code != wsframe.CloseMessageTooBig || ce.Reason != errMessageTooBig.Reason {
		t.Errorf("a Ping whose Pong is %d bytes, over the server's %d: %v, want ErrDisconnected with this end's close 1009 %s", limit+1, limit, err, errMessageTooBig.Reason)
	}
	wantClientClose(t, closed, wsframe.CloseMessageTooBig, "")
	// The server's goroutine has returned: what it read is in pongs.
	if got := len(pongs); got != 1 {
		t.Errorf("%d Pongs, want 1: the Ping whose Pong is exactly the server's %d bytes answered, the longer one not", got, limit)
	}
	if len(pongs) > 0 {
		if got := <-pongs; got != data {
			t.Errorf("the Pong of a %d-byte Ping carried %d bytes", len(data), len(got))
		}
	}
}

// PROTOCOL.md §4.7 at the Go client: a batch's framing is checked whole
// before any item is handled, then its items are handled one at a time,
// in order, as the server handles a client's: a Result before a bad item
// reaches its caller, and the bad item closes the connection. A batch
// whose framing is bad (a nested batch, a compressed item) is refused
// before any item. compat/js decoded every item first and lost the
// Result; both clients now follow the rule the server does.
func TestProtocolClientBatchItemsInOrder(t *testing.T) {
	cases := []struct {
		name      string
		bad       []byte
		reason    string
		delivered bool
	}{
		{"an unknown kind", []byte{0x7f}, "HP_ERR_UNKNOWN_KIND", true},
		{"a Call", wire.AppendCall(nil, dispatch.KindCall, 1, "a/b", 0, nil), "HP_ERR_UNKNOWN_KIND", true},
		{"a Result without its id", []byte{byte(dispatch.KindResult)}, "HP_ERR_MALFORMED_PACKET", true},
		{"a batch", batchOf([]byte{byte(dispatch.KindPong)}), "HP_ERR_MALFORMED_PACKET", false},
		{"a compressed item", wire.AppendCompressed(nil, dispatch.KindResult, []byte{1}), "HP_ERR_MALFORMED_PACKET", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ln := listenLoopback(t)
			closed := make(chan rawClose, 1)
			go func() {
				closed <- rawServer(ln, "", func(nc net.Conn, p wire.Packet) {
					switch p.Kind {
					case dispatch.KindCapabilities:
						wsutil.WriteServerBinary(nc, capsOf("codec", "json"))
					case dispatch.KindCall:
						wsutil.WriteServerBinary(nc, batchOf(wire.AppendResult(nil, p.ID, []byte(`"ok"`)), tc.bad))
					}
				})
			}()
			c := dialClient(t, ln.Addr().String(), ClientOptions{Reconnect: Reconnect{Disabled: true}})
			var got string
			err := callWithin(t, c, context.Background(), "any/method", nil, &got)
			var ce *CloseError
			switch {
			case tc.delivered && (err != nil || got != "ok"):
				t.Errorf("the Result before the bad item: %q, %v, want \"ok\"", got, err)
			case !tc.delivered && (!errors.As(err, &ce) || ce.Reason != tc.reason):
				t.Errorf("a call answered in a badly framed batch: %v, want this end's close %s", err, tc.reason)
			}
			wantClientClose(t, closed, wsframe.ClosePolicyViolation, "")
			err = callWithin(t, c, context.Background(), "any/method", nil, nil)
			if !errors.As(err, &ce) || ce.Remote || ce.Code != wsframe.ClosePolicyViolation || ce.Reason != tc.reason {
				t.Errorf("a call after the bad item: %v, want this end's close 1008 %s", err, tc.reason)
			}
		})
	}
}

// PROTOCOL.md §4.7 at the server: a batch's framing is checked whole
// before any item is handled, then its items are handled in order up to
// a bad one, which closes the connection. The clients follow the same
// rule (TestProtocolClientBatchItemsInOrder).
func TestProtocolServerBatchItemsInOrder(t *testing.T) {
	r := testRouter()
	var ran atomic.Int32
	Handle(r, "test/count", func(context.Context, int) (int, error) { return int(ran.Add(1)), nil })
	_, addr := newTestServer(t, Options{Router: r})
	call := wire.AppendCall(nil, dispatch.KindCall, 1, "test/count", 0, []byte("0"))
	for _, tc := range []struct {
		name   string
		bad    []byte
		reason string
		ran    int32
	}{
		{"an unknown kind", []byte{0x7f}, "HP_ERR_UNKNOWN_KIND", 1},
		{"a Result", wire.AppendResult(nil, 1, nil), "HP_ERR_UNKNOWN_KIND", 1},
		{"a Call without its method", []byte{byte(dispatch.KindCall), 2}, "HP_ERR_MALFORMED_PACKET", 1},
		{"a batch", batchOf(call), "HP_ERR_MALFORMED_PACKET", 0},
		{"a compressed item", wire.AppendCompressed(nil, dispatch.KindCall, []byte{1}), "HP_ERR_MALFORMED_PACKET", 0},
	} {
		ran.Store(0)
		c := dial(t, addr)
		c.WriteMessage(wsframe.OpBinary, batchOf(call, tc.bad))
		if code, reason := c.ReadClose(hangBound); code != wsframe.ClosePolicyViolation || reason != tc.reason {
			t.Errorf("%s: close %d %s, want 1008 %s", tc.name, code, reason, tc.reason)
		}
		// An inline handler has run by the time its batch's next item is read.
		if got := ran.Load(); got != tc.ran {
			t.Errorf("%s: the Call before it ran %d times, want %d", tc.name, got, tc.ran)
		}
	}
}

// PROTOCOL.md §4.9 at the Go client: a server that announces no
// maxMessage sets no limit of its own, as a client that announces none,
// so a Ping of any size the carrier and the client take is answered
// (§4.8), here one over compat/js's 1 MiB default maxMessage option, which
// that client took for a silent server's limit.
func TestProtocolClientPongWithoutServerLimit(t *testing.T) {
	ln := listenLoopback(t)
	data := strings.Repeat("p", 2<<20)
	pong := make(chan int, 1)
	go rawServer(ln, "", func(nc net.Conn, p wire.Packet) {
		switch p.Kind {
		case dispatch.KindCapabilities:
			wsutil.WriteServerBinary(nc, capsOf("codec", "json"))
			wsutil.WriteServerBinary(nc, wire.Append(nil, &wire.Packet{Kind: dispatch.KindPing, Payload: []byte(data)}))
		case dispatch.KindPong:
			pong <- len(p.Payload)
		}
	})
	c := dialClient(t, ln.Addr().String(), ClientOptions{Reconnect: Reconnect{Disabled: true}, Limits: Limits{MaxMessageSize: 4 << 20}})
	defer c.Close()
	select {
	case n := <-pong:
		if n != len(data) {
			t.Errorf("a Pong of %d bytes, want %d", n, len(data))
		}
	case <-time.After(hangBound):
		t.Fatal("a Ping of 2 MiB from a server that announced no maxMessage was not answered")
	}
}

package client

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"log/slog"
	"net"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gobwas/ws"
	"github.com/gobwas/ws/wsutil"
	"github.com/hotpath-go/hotpath/compat"
	"github.com/hotpath-go/hotpath/compat/wire"
	"github.com/hotpath-go/hotpath/dictionary"
	"github.com/hotpath-go/hotpath/dispatch"
	"github.com/hotpath-go/hotpath/wsframe"
)

// An input is a list of records, each a big-endian uint16 length and that
// many bytes: one binary WebSocket message from the server, sent as serve
// says. Records, not raw frames, so that the fuzzer spends its time on
// packets (the frame decoder has its own targets).
func records(data []byte) [][]byte {
	var out [][]byte
	for len(data) >= 2 {
		n := min(int(binary.BigEndian.Uint16(data)), len(data)-2)
		out = append(out, data[2:2+n])
		data = data[2+n:]
	}
	return out
}

func appendRecord(dst, pkt []byte) []byte {
	return append(binary.BigEndian.AppendUint16(dst, uint16(len(pkt))), pkt...)
}

// clientMaxMessage is the client's message limit, small so that inputs
// reach it.
const clientMaxMessage = 4 << 10

type point struct {
	X, Y int
}

// askRouter answers the server's asks: an echo of raw bytes, a typed
// method and one that panics.
var askRouter = sync.OnceValue(func() *compat.Router {
	r := compat.NewRouter()
	compat.Handle(r, "ask/raw", func(_ context.Context, req []byte) ([]byte, error) { return req, nil })
	compat.Handle(r, "ask/point", func(_ context.Context, p point) (point, error) { return point{p.Y, p.X}, nil })
	compat.Handle(r, "ask/panic", func(context.Context, struct{}) (struct{}, error) { panic("ask handler panics") })
	compat.Handle(r, "ask/fail", func(context.Context, struct{}) (struct{}, error) {
		return struct{}{}, &compat.Error{Code: 1001, Message: "refused", Data: []byte(`{"why":"test"}`)}
	})
	return r
})

// dict is the dictionary the client offers; an input may choose it and
// send packets compressed with it.
var dict = sync.OnceValue(func() *dictionary.Dictionary {
	d, err := compat.RouterDictionary(askRouter())
	if err != nil {
		panic(err)
	}
	return d
})

// fakeServer is one listener per fuzz process; each input takes one
// connection from it.
type fakeServer struct {
	ln    net.Listener
	conns chan net.Conn
}

var server = sync.OnceValue(func() *fakeServer {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	s := &fakeServer{ln: ln, conns: make(chan net.Conn)}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.conns <- c
		}
	}()
	return s
})

// serve plays the server's part of one connection. It upgrades, reads
// the client's capabilities and sends the records up to the first that
// is a Capabilities packet (Dial returns on it; without one, Dial fails
// when the connection ends). Then it reads the first call, tells the test
// through second to make the second call (so that the calls' ids do not
// depend on scheduling), reads it (unless unsent says the client refused
// the first call unsent), sends the other records, closes with
// 1000 and reads until the client closes. It reads the client's frames to
// the end meanwhile, so the client never waits to write.
func (s *fakeServer) serve(recs [][]byte, second chan<- struct{}, unsent <-chan struct{}, done chan<- error) {
	defer close(second)
	var c net.Conn
	select {
	case c = <-s.conns:
	case <-time.After(5 * time.Second):
		done <- errors.New("the client never connected")
		return
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	up := ws.Upgrader{Protocol: func(p []byte) bool { return string(p) == compat.Subprotocol }}
	if _, err := up.Upgrade(c); err != nil {
		done <- err
		return
	}
	seen := make(chan int, 8)
	end := make(chan error, 1)
	go func() { end <- readPackets(c, seen) }()
	send := func(r []byte) bool {
		_, err := c.Write(wsframe.AppendFrame(nil, wsframe.OpBinary, r, wsframe.Fin))
		return err == nil // an error: the client closed on a record, as it may
	}
	finish := func(err error) {
		c.Write(wsframe.AppendCloseFrame(nil, wsframe.CloseNormal, ""))
		if err == nil {
			err = <-end
		}
		done <- err
	}
	if !waitPackets(seen, end, 1) {
		finish(errors.New("the client ended before its capabilities"))
		return
	}
	ready := false
	for !ready && len(recs) > 0 {
		r := recs[0]
		recs = recs[1:]
		if !send(r) {
			finish(nil)
			return
		}
		ready = len(r) > 0 && dispatch.Kind(r[0]) == dispatch.KindCapabilities
	}
	if !ready { // Dial fails when the connection ends
		finish(nil)
		return
	}
	if !waitPackets(seen, end, 2) {
		finish(errors.New("the client ended before its calls"))
		return
	}
	second <- struct{}{}
	select {
	case <-unsent:
		// The first call was refused before it was sent (over the
		// input's maxMessage), so its second was the client's second
		// packet, sent once unsent was closed: a wait for a third
		// held the second call unanswered until its ctx ended.
	default:
		if !waitPackets(seen, end, 3) {
			finish(errors.New("the client ended before its calls"))
			return
		}
	}
	for _, r := range recs {
		if !send(r) {
			break
		}
	}
	finish(nil)
}

// waitPackets waits until the client has sent n packets; false if its
// connection ended first.
func waitPackets(seen <-chan int, end chan error, n int) bool {
	for {
		select {
		case got := <-seen:
			if got >= n {
				return true
			}
		case err := <-end:
			end <- err // for the caller's final read
			return false
		}
	}
}

// readPackets reads the client's frames until it closes or the
// connection fails, and sends on seen how many packets it has read (a
// batch's items counted) after each of the first three.
func readPackets(c net.Conn, seen chan<- int) error {
	rd := wsutil.Reader{Source: c, State: ws.StateServerSide, CheckUTF8: true}
	n := 0
	for {
		h, err := rd.NextFrame()
		if err != nil {
			return err
		}
		b, err := io.ReadAll(&rd)
		if err != nil {
			return err
		}
		if h.OpCode == ws.OpClose {
			return io.EOF
		}
		if h.OpCode.IsControl() || n >= 3 {
			continue
		}
		if p, err := wire.Decode(b); err == nil && p.Kind == dispatch.KindBatch {
			n += int(p.Count)
		} else {
			n++
		}
		seen <- n
	}
}

// FuzzClient feeds compat's Go client what a server sends: the client
// must never panic, every call must return (answered, failed, or ended with
// the connection), and once closed, the client must leave no goroutine
// behind.
func FuzzClient(f *testing.F) {
	for _, seed := range seeds() {
		f.Add(seed)
	}
	s := server()
	f.Fuzz(func(t *testing.T, data []byte) {
		before := runtime.NumGoroutine()
		done := make(chan error, 1)
		second := make(chan struct{}, 1)
		unsent := make(chan struct{})
		go s.serve(records(data), second, unsent, done)
		// Long enough for a loaded machine; an input ends in milliseconds.
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		c, err := compat.Dial(ctx, "ws://"+s.ln.Addr().String()+"/ws", compat.ClientOptions{
			Handlers:    askRouter(),
			Dictionary:  dict(),
			Limits:      compat.Limits{MaxMessageSize: clientMaxMessage},
			Reconnect:   compat.Reconnect{Disabled: true},
			IdleTimeout: -1,
			Logger:      slog.New(slog.DiscardHandler),
		})
		if err == nil {
			exercise(t, ctx, c, second, unsent)
		} else {
			// No Capabilities packet, or the client closed on a record
			// before one: Dial fails as a call would.
			checkCallError(t, ctx, err)
		}
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			t.Fatal("the connection never ended")
		}
		deadline := time.Now().Add(5 * time.Second)
		for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
		}
		if n := runtime.NumGoroutine(); n > before {
			buf := make([]byte, 1<<16)
			t.Fatalf("%d goroutines after Close, %d before:\n%s", n, before, buf[:runtime.Stack(buf, true)])
		}
	})
}

// exercise makes the two calls of an input, each of which must return,
// and closes the client. The first is a Call, whose caller reads its own
// answer when nobody else reads; the second is started with Go, whose
// answer the read loop delivers on a channel.
func exercise(t *testing.T, ctx context.Context, c *compat.Client, second <-chan struct{}, unsent chan struct{}) {
	c.On("ev", func(m compat.Message) { var p point; _ = m.Decode(&p) })
	c.OnRoom("room", "ev", func(m compat.Message) { var p point; _ = m.Decode(&p) })
	calls := make(chan error, 2)
	// unsent is closed when the first call was refused before it was sent
	// (over a server's maxMessage as small as 1 byte): the server, which
	// waits for it before it lets the second go, would wait for ever.
	go func() {
		var p point
		err := c.Call(ctx, "m/point", point{1, 2}, &p)
		if errors.Is(err, compat.ErrMessageTooBig) {
			close(unsent)
		}
		calls <- err
	}()
	go func() {
		var raw []byte
		select {
		case _, ok := <-second:
			if !ok {
				calls <- errors.New("no second call: the connection ended")
				return
			}
		case <-unsent:
		}
		call := c.Go(ctx, "m/raw", []byte("hello"), &raw, nil)
		<-call.Done
		calls <- call.Err
	}()
	for range 2 {
		select {
		case err := <-calls:
			checkCallError(t, ctx, err)
		case <-time.After(20 * time.Second):
			t.Fatal("a call never returned")
		}
	}
	c.Close()
}

// checkCallError fails the test for a call that ended other than by an
// answer, a decoding error or the end of the connection: the client
// missed the answer or the end (its ctx expired), or closed with a code no
// input should cause (1011 would be an internal failure).
func checkCallError(t *testing.T, ctx context.Context, err error) {
	t.Helper()
	if ctx.Err() != nil {
		t.Fatalf("a call outlived its context (%v): the client missed its answer or the connection's end", err)
	}
	var ce *compat.CloseError
	if !errors.As(err, &ce) {
		return
	}
	switch ce.Code {
	case wsframe.CloseNormal, wsframe.CloseAbnormal, wsframe.CloseProtocolError,
		wsframe.CloseInvalidPayload, wsframe.ClosePolicyViolation, wsframe.CloseMessageTooBig:
	default:
		t.Fatalf("the connection ended with %v", ce)
	}
}

// seeds are inputs that answer the calls, ask, send events and emits,
// negotiate the dictionary, and break the rules a server can break.
func seeds() [][]byte {
	pairs := func(kv ...string) []byte {
		var b []byte
		for i := 0; i+1 < len(kv); i += 2 {
			b = wire.AppendPair(b, kv[i], kv[i+1])
		}
		return wire.Append(nil, &wire.Packet{Kind: dispatch.KindCapabilities, Count: uint32(len(kv) / 2), Payload: b})
	}
	caps := pairs("codec", "json", "maxMessage", "1048576", "maxInFlight", "128", "maxBatch", "1024", "server", "fake")
	result1 := wire.AppendResult(nil, 1, []byte(`{"X":2,"Y":1}`))
	result2 := wire.AppendResult(nil, 2, []byte("hello"))
	batch := func(items ...[]byte) []byte {
		var b []byte
		for _, it := range items {
			b = wire.AppendItem(b, it)
		}
		return wire.Append(nil, &wire.Packet{Kind: dispatch.KindBatch, Count: uint32(len(items)), Payload: b})
	}
	ask := func(id uint32, method, payload string) []byte {
		return wire.AppendCall(nil, dispatch.KindAsk, id, method, 1000, []byte(payload))
	}
	choice := "deflate:" + dict().ID()
	codec := dictionary.NewDeflate(dict(), dictionary.CodecOptions{MaxDecoded: clientMaxMessage})
	compressed := func(pkt []byte) []byte {
		body, ok := codec.AppendCompress(nil, pkt[1:])
		if !ok {
			panic("a compressed seed did not shrink: make it longer")
		}
		return wire.AppendCompressed(nil, dispatch.Kind(pkt[0]), body)
	}
	emit := wire.AppendEmit(nil, "room", "ev", 0, []byte(`{"X":1,"Y":2}`))
	event := wire.Append(nil, &wire.Packet{Kind: dispatch.KindEvent, Name: []byte("ev"), Payload: []byte(`{"X":1}`)})
	inputs := [][][]byte{
		{caps, result1, result2},
		{caps, batch(result2, result1)},
		{caps, wire.AppendError(nil, 1, 1000, "no", []byte(`{"a":1}`)), wire.AppendError(nil, 2, wire.CodeNotFound, "m/raw", nil)},
		{caps, ask(7, "ask/raw", "abc"), ask(8, "ask/point", `{"X":3,"Y":4}`), ask(9, "ask/panic", "{}"), ask(10, "ask/none", "{}"), ask(11, "ask/fail", "{}"), result1, result2},
		{caps, emit, event, wire.Append(nil, &wire.Packet{Kind: dispatch.KindPing, Payload: []byte("p")}), wire.Append(nil, &wire.Packet{Kind: dispatch.KindPong}), result1, result2},
		{pairs("codec", "json", "dict", choice, "maxMessage", "65536"), compressed(wire.AppendResult(nil, 1, []byte(`{"X":2,"Y":1,"padding":"`+strings.Repeat("ab", 200)+`"}`))),
			compressed(wire.AppendEmit(nil, "room", "ev", 0, []byte(`{"X":1,"Y":2,"padding":"`+strings.Repeat("cd", 200)+`"}`))), result2},
		{pairs("codec", "msgpack"), result1},
		{pairs("maxMessage", "0", "maxBatch", "-1", "maxInFlight", "99999999999999999999"), result1, result2},
		{result1, caps, result2},
		{caps, wire.AppendResult(nil, 99, nil), result1, result1, result2},
		{caps, wire.AppendResult(nil, 1, []byte(`"not a point"`)), result2},
		{caps, batch(batch(result1)), result2},
		{caps, {}, result1},
		{caps, {0x7f}, result1},
		{caps, wire.AppendCall(nil, dispatch.KindCall, 3, "m/x", 0, nil)},
		{caps, wire.AppendResult(nil, 2, make([]byte, clientMaxMessage))},
		{caps, wire.Append(nil, &wire.Packet{Kind: dispatch.KindEmit, Room: []byte("room"), Name: []byte("$close"), Payload: []byte(strconv.Itoa(1001))})},
	}
	out := make([][]byte, len(inputs))
	for i, in := range inputs {
		for _, r := range in {
			out[i] = appendRecord(out[i], r)
		}
	}
	return out
}

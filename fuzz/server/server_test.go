package server

import (
	"bufio"
	"bytes"
	"compress/flate"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"runtime/metrics"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gobwas/ws"
	"github.com/hotpath-go/hotpath/compat"
	"github.com/hotpath-go/hotpath/compat/wire"
	"github.com/hotpath-go/hotpath/deflatecache"
	"github.com/hotpath-go/hotpath/dictionary"
	"github.com/hotpath-go/hotpath/dispatch"
	"github.com/hotpath-go/hotpath/wsframe"
)

// The whole-server targets talk to one compat server per fuzz process,
// served on an in-memory listener: each input is one connection, a
// net.Pipe, opened with a valid handshake and then fed the fuzzer's bytes.

// pipeListener is a net.Listener whose connections are the server ends of
// net.Pipe pairs.
type pipeListener struct {
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once
}

func (l *pipeListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *pipeListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

func (l *pipeListener) Addr() net.Addr { return memAddr{} }

// The server's limits, small so that inputs reach them.
const (
	serverMaxMessage  = 32 << 10
	serverMaxBatch    = 16
	serverMaxRooms    = 4
	serverMaxInFlight = 4
)

// fuzzServer is the server of a fuzz process and what a client needs to
// know about it.
type fuzzServer struct {
	ln *pipeListener
	// The dictionary codecs the server offers, by the name a client puts
	// in its "dict" capability.
	codecs map[string]dictionary.Codec
	dictID string
}

// The methods of the fuzz server, each with a known answer.
const (
	methodEcho      = "echo"       // Result: the request, as is
	methodAdd       = "add"        // Result: a+b, or InvalidParams
	methodFail      = "fail"       // Error 1001
	methodPanic     = "panic"      // Error Internal: the handler panics
	methodAsyncEcho = "async/echo" // as echo, on a goroutine of its own
	methodAsyncAsk  = "async/ask"  // asks the client, answers its answer
	eventNote       = "note"
	failCode        = 1001
)

type addRequest struct {
	A int `json:"a"`
	B int `json:"b"`
}

// newFuzzRouter returns the fuzz server's router; withPanic registers
// methodPanic, whose stack trace the server logs, which a target that
// counts allocations leaves out.
func newFuzzRouter(withPanic bool) *compat.Router {
	r := compat.NewRouter()
	echo := func(_ context.Context, req json.RawMessage) (json.RawMessage, error) { return req, nil }
	compat.Handle(r, methodEcho, echo)
	compat.Handle(r, methodAdd, func(_ context.Context, req addRequest) (int, error) { return req.A + req.B, nil })
	compat.Handle(r, methodFail, func(context.Context, json.RawMessage) (json.RawMessage, error) {
		return nil, &compat.Error{Code: failCode, Message: "refused"}
	})
	if withPanic {
		compat.Handle(r, methodPanic, func(context.Context, json.RawMessage) (json.RawMessage, error) {
			panic("fuzz: handler panics on purpose")
		})
	}
	compat.Handle(r, methodAsyncEcho, echo, compat.Async())
	compat.Handle(r, methodAsyncAsk, func(ctx context.Context, req json.RawMessage) (json.RawMessage, error) {
		var out json.RawMessage
		err := compat.PeerFrom(ctx).Ask(ctx, "client/confirm", req, &out)
		return out, err
	}, compat.Async())
	compat.HandleEvent(r, eventNote, func(context.Context, json.RawMessage) {})
	return r
}

var fuzzLimits = compat.Limits{
	MaxMessageSize: serverMaxMessage,
	MaxBatch:       serverMaxBatch,
	MaxRooms:       serverMaxRooms,
	MaxInFlight:    serverMaxInFlight,
}

// serverOnce and memoryServerOnce start the server of a fuzz process.
var (
	serverOnce       = sync.OnceValues(func() (*fuzzServer, error) { return startServer(fuzzLimits, true) })
	memoryServerOnce = sync.OnceValues(func() (*fuzzServer, error) { return startServer(fuzzLimits, false) })
)

// startServer starts a server with the fuzz router; the caller stops it by
// closing its listener.
func startServer(limits compat.Limits, withPanic bool) (*fuzzServer, error) {
	srv, err := compat.NewServer(compat.Options{
		Router: newFuzzRouter(withPanic),
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Limits: limits,
	})
	if err != nil {
		return nil, err
	}
	// The client side of the dictionary negotiation: the same router gives
	// the same dictionary (PROTOCOL.md §6).
	d, err := compat.RouterDictionary(newFuzzRouter(withPanic))
	if err != nil {
		return nil, err
	}
	// The limit is the packet's, and the head byte is not compressed: a
	// body may inflate to one byte under it, as the server's codec is
	// capped (compat's maxDecodedBody). Capped at the limit itself, the
	// model read on past the server's cap into a body's corruption and
	// expected 1007 where the server, stopped at its cap, closed with
	// 1009.
	opts := dictionary.CodecOptions{MaxDecoded: int(limits.MaxMessageSize) - 1}
	z, err := dictionary.NewZstd(d, opts)
	if err != nil {
		return nil, err
	}
	fs := &fuzzServer{
		ln:     &pipeListener{conns: make(chan net.Conn), done: make(chan struct{})},
		dictID: d.ID(),
		codecs: map[string]dictionary.Codec{
			"deflate:" + d.ID(): dictionary.NewDeflate(d, opts),
			"zstd:" + d.ID():    z,
		},
	}
	go srv.Serve(fs.ln)
	return fs, nil
}

// upgradeRequestText is the opening handshake the client sends, with the
// sample nonce of RFC 6455 §1.3, before its extension offer and the blank
// line; acceptKey is its §4.2.2 answer.
const (
	upgradeRequestText = "GET /fuzz HTTP/1.1\r\nHost: fuzz\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n" +
		"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n" +
		"Sec-WebSocket-Protocol: hotpath.v1\r\n"
	acceptKey = "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="
)

// offers are the permessage-deflate offers a fuzz input's handshake picks
// from: none, a browser's, and two that ask for smaller windows or no
// context takeover. The server's policy turns context takeover off in both
// directions, so every compressed message stands alone.
var offers = []*deflatecache.ClientOffer{
	nil,
	{},
	{ServerMaxWindowBits: 9, ClientNoContextTakeover: true},
	{ServerNoContextTakeover: true, ClientMaxWindowBits: 10},
}

// connTimeout bounds one connection of a fuzz input: a server that neither
// answers nor closes by then is hung, which the targets report.
const connTimeout = 10 * time.Second

// conn is the client end of a connection after the handshake.
type conn struct {
	net.Conn
	br  *bufio.Reader        // what follows the server's handshake response
	pmd *deflatecache.Params // permessage-deflate as agreed, nil without
}

// dial opens a connection to the server and completes the handshake with
// the given offer (nil for none), checking the server's answer to it as a
// client must (deflatecache.ParseResponse: RFC 7692 §7).
func (fs *fuzzServer) dial(offer *deflatecache.ClientOffer) (*conn, error) {
	c, s := net.Pipe()
	select {
	case fs.ln.conns <- s:
	case <-time.After(connTimeout):
		return nil, errors.New("the server does not accept connections")
	}
	c.SetDeadline(time.Now().Add(connTimeout))
	req := upgradeRequestText
	if offer != nil {
		req += "Sec-WebSocket-Extensions: " + string(deflatecache.AppendOffer(nil, *offer)) + "\r\n"
	}
	if _, err := io.WriteString(c, req+"\r\n"); err != nil {
		c.Close()
		return nil, fmt.Errorf("writing the handshake: %w", err)
	}
	cc := &conn{Conn: c, br: bufio.NewReader(c)}
	if err := cc.readResponse(offer); err != nil {
		c.Close()
		return nil, err
	}
	return cc, nil
}

func (c *conn) readResponse(offer *deflatecache.ClientOffer) error {
	status, err := c.br.ReadString('\n')
	if err != nil || status != "HTTP/1.1 101 Switching Protocols\r\n" {
		return fmt.Errorf("handshake answered %q, %v", status, err)
	}
	accepted, extensions := false, ""
	for {
		line, err := c.br.ReadString('\n')
		if err != nil {
			return fmt.Errorf("reading the handshake response: %w", err)
		}
		if line == "\r\n" {
			break
		}
		name, value, _ := strings.Cut(strings.TrimSuffix(line, "\r\n"), ":")
		value = strings.TrimSpace(value)
		switch strings.ToLower(name) {
		case "sec-websocket-accept":
			accepted = value == acceptKey
		case "sec-websocket-extensions":
			extensions = value
		}
	}
	if !accepted {
		return errors.New("handshake response without the right Sec-WebSocket-Accept")
	}
	if offer == nil {
		if extensions != "" {
			return fmt.Errorf("the server accepted extensions %q that were not offered", extensions)
		}
		return nil
	}
	params, ok, err := deflatecache.ParseResponse(extensions, *offer)
	switch {
	case err != nil:
		return fmt.Errorf("the server's answer %q to %q: %w", extensions, deflatecache.AppendOffer(nil, *offer), err)
	case !ok:
		return fmt.Errorf("the server declined permessage-deflate offer %q", deflatecache.AppendOffer(nil, *offer))
	}
	c.pmd = &params
	return nil
}

// clientFrame is a masked frame as a client sends it.
func clientFrame(op wsframe.Opcode, payload []byte, flags wsframe.Flags) []byte {
	return wsframe.AppendMaskedFrame(nil, op, payload, flags, [4]byte{0xA1, 0xB2, 0xC3, 0xD4})
}

// serverFrame is one frame the server sent.
type serverFrame struct {
	op         wsframe.Opcode
	compressed bool // RSV1: the payload is permessage-deflate data
	payload    []byte
}

// readServer reads the server's frames until it closes the connection,
// checking each header as a client must (gobwas/ws's ws.CheckHeader for
// the client side: unmasked, no reserved bits or opcodes, control frames
// of at most 125 bytes and unfragmented; RSV1 only on data frames, and
// only with permessage-deflate, RFC 7692 §6). The server never fragments a
// message, so every data frame must have FIN.
func readServer(br *bufio.Reader, pmd bool) ([]serverFrame, error) {
	var frames []serverFrame
	state := ws.StateClientSide
	if pmd {
		state |= ws.StateExtended
	}
	for {
		h, err := ws.ReadHeader(br)
		if errors.Is(err, io.EOF) {
			return frames, nil
		}
		if err != nil {
			return frames, fmt.Errorf("reading a frame header: %w", err)
		}
		if err := ws.CheckHeader(h, state); err != nil {
			return frames, fmt.Errorf("server frame %+v: %w", h, err)
		}
		compressed := h.Rsv == 4 // RSV1 alone
		if h.Rsv != 0 && (!compressed || h.OpCode.IsControl()) {
			return frames, fmt.Errorf("server frame %+v: reserved bits permessage-deflate does not allow", h)
		}
		if !h.Fin {
			return frames, fmt.Errorf("server fragmented a message: %+v", h)
		}
		if h.Length > serverMaxMessage+1024 {
			return frames, fmt.Errorf("server frame of %d bytes, over its own message limit", h.Length)
		}
		p := make([]byte, h.Length)
		if _, err := io.ReadFull(br, p); err != nil {
			return frames, fmt.Errorf("reading a frame payload: %w", err)
		}
		frames = append(frames, serverFrame{op: wsframe.Opcode(h.OpCode), compressed: compressed, payload: p})
	}
}

// maxChunks bounds how many writes an input is cut into. The server buffers
// a frame that arrives in pieces as one segment per read and refuses more
// than 4096 (segmentqueue's default MaxSegments) with 1009; the model does
// not predict that, so inputs stay well below it.
const maxChunks = 1000

// exchange is one connection's traffic: the permessage-deflate parameters
// agreed, what the client wrote (and the server therefore read) and what
// the server sent back, and the bytes the process allocated meanwhile, the
// server's share and the client's.
type exchange struct {
	pmd       *deflatecache.Params
	written   []byte
	frames    []serverFrame
	allocated uint64
}

// heapAllocs returns the bytes allocated on the heap since the process
// started: cheap to read, and without stopping the world.
func heapAllocs() uint64 {
	s := []metrics.Sample{{Name: "/gc/heap/allocs:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// terminator is the close frame the client sends after the input: if the
// input left the connection open between frames, the server must answer
// it with 1000.
var terminator = clientFrame(wsframe.OpClose, wsframe.AppendClosePayload(nil, wsframe.CloseNormal, "fuzz end"), wsframe.Fin)

// padding follows the terminator when the input left the server inside a
// frame: 0xFF bytes complete any frame within the message limit and then
// break the reserved-bit rule, so every connection ends.
var padding = bytes.Repeat([]byte{0xFF}, 4096)

// converse opens a connection with the offer handshake picks, writes
// stream cut into the chunk sizes cuts gives, then the terminator and
// padding until the server closes, and returns the traffic. It fails the
// test when the server neither answers nor closes within connTimeout.
func (fs *fuzzServer) converse(t *testing.T, handshake uint8, stream, cuts []byte) exchange {
	start := heapAllocs()
	c, err := fs.dial(offers[int(handshake)%len(offers)])
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	type result struct {
		frames []serverFrame
		err    error
	}
	done := make(chan result, 1)
	go func() {
		frames, err := readServer(c.br, c.pmd != nil)
		done <- result{frames, err}
	}()
	x := exchange{pmd: c.pmd}
	stream0 := stream
	open := true
	write := func(p []byte) {
		n, err := c.Write(p)
		x.written = append(x.written, p[:n]...)
		switch {
		case errors.Is(err, io.ErrClosedPipe):
			open = false
		case err != nil:
			t.Fatalf("writing to the server: %v, after %d bytes: %s", err, len(x.written), short(x.written))
		}
	}
	for i := 0; open && len(stream) > 0; i++ {
		k := len(stream)
		if i < len(cuts) && i < maxChunks {
			k = min(k, int(cuts[i])+1)
		}
		write(stream[:k])
		stream = stream[k:]
	}
	if open {
		write(terminator)
	}
	for pad := 0; open; pad += len(padding) {
		if pad > serverMaxMessage+len(padding) {
			t.Fatalf("the server read %d bytes of padding without closing; input %s", pad, short(stream0))
		}
		write(padding)
	}
	r := <-done
	if r.err != nil {
		t.Fatalf("%v\nserver sent %d frames for input %s", r.err, len(r.frames), short(x.written))
	}
	x.frames = r.frames
	x.allocated = heapAllocs() - start
	return x
}

// FuzzServer sends a fuzzer-driven byte stream, cut into fuzzer-chosen
// writes, to the compat server after a valid handshake, then a close frame
// and padding until the server closes. The server must never panic (a
// panic kills the fuzz process), never hang, send only valid frames, and
// end with a valid close frame whose code is the one the model predicts
// (the client's own close echoed, or the code for the first violation);
// before that it must answer every ping and Ping packet, every
// Capabilities packet, and every call, join and leave with an id, with an
// answer that fits the request (see servermodel_test.go).
func FuzzServer(f *testing.F) {
	fs, err := serverOnce()
	if err != nil {
		f.Fatal(err)
	}
	for _, s := range serverSeeds(fs) {
		f.Add(s.handshake, s.stream, s.cuts)
	}
	f.Fuzz(func(t *testing.T, handshake uint8, stream, cuts []byte) {
		fs.checkConversation(t, handshake, stream, cuts)
	})
}

// checkConversation is FuzzServer's test of one input: what the server
// sent must be what the model predicts.
func (fs *fuzzServer) checkConversation(t *testing.T, handshake uint8, stream, cuts []byte) {
	t.Helper()
	x := fs.converse(t, handshake, stream, cuts)
	m := fs.predict(x.written, x.pmd)
	r, err := fs.sortOut(x.frames)
	if err == nil {
		err = m.check(r)
	}
	if err != nil {
		t.Fatalf("%v\nclient sent %s\nserver sent %s", err, short(x.written), describeFrames(x.frames))
	}
}

func describeFrames(frames []serverFrame) string {
	var b strings.Builder
	for _, f := range frames {
		fmt.Fprintf(&b, "\n  %v %s", f.op, hexOr(f.payload))
	}
	return b.String()
}

type serverSeed struct {
	handshake    uint8 // the index of the offer in offers
	stream, cuts []byte
}

// serverSeeds are conversations that reach every branch of the model:
// calls of every method, batches, rooms, pings at both layers, the
// dictionary negotiated and used, and each way of ending.
func serverSeeds(fs *fuzzServer) []serverSeed {
	bin := func(pkt []byte) []byte { return clientFrame(wsframe.OpBinary, pkt, wsframe.Fin) }
	call := func(id uint32, method, payload string, timeout uint32) []byte {
		return wire.AppendCall(nil, dispatch.KindCall, id, method, timeout, []byte(payload))
	}
	batch := func(items ...[]byte) []byte {
		var p []byte
		for _, it := range items {
			p = wire.AppendItem(p, it)
		}
		return wire.Append(nil, &wire.Packet{Kind: dispatch.KindBatch, Count: uint32(len(items)), Payload: p})
	}
	room := func(kind dispatch.Kind, id uint32, name string) []byte {
		return wire.Append(nil, &wire.Packet{Kind: kind, ID: id, Room: []byte(name)})
	}
	caps := func(pairs ...string) []byte {
		var p []byte
		for i := 0; i+1 < len(pairs); i += 2 {
			p = wire.AppendPair(p, pairs[i], pairs[i+1])
		}
		return wire.Append(nil, &wire.Packet{Kind: dispatch.KindCapabilities, Count: uint32(len(pairs) / 2), Payload: p})
	}
	closeFrame := func(code wsframe.CloseCode) []byte {
		return clientFrame(wsframe.OpClose, wsframe.AppendClosePayload(nil, code, ""), wsframe.Fin)
	}
	long := `{"text":"` + strings.Repeat("hotpath fuzz ", 20) + `"}`
	offer := "deflate:" + fs.dictID
	compressed := wire.AppendCompressed(nil, dispatch.KindCall, nil)
	if body, ok := fs.codecs[offer].AppendCompress(nil, call(9, methodEcho, long, 0)[1:]); ok {
		compressed = wire.AppendCompressed(nil, dispatch.KindCall, body)
	}
	many := make([][]byte, serverMaxBatch+1)
	for i := range many {
		many[i] = call(uint32(i+1), methodEcho, "1", 0)
	}
	var asyncCalls []byte
	for i := range serverMaxInFlight + 2 {
		asyncCalls = append(asyncCalls, bin(call(uint32(i+1), methodAsyncEcho, `"a"`, 0))...)
	}
	one := bytes.Repeat([]byte{0}, 64)
	deflated := func(op wsframe.Opcode, payload []byte) []byte {
		return clientFrame(op, deflateRaw(payload), wsframe.Fin|wsframe.Rsv1)
	}
	unmasked := wsframe.AppendFrame(nil, wsframe.OpBinary, call(1, methodEcho, "1", 0), wsframe.Fin)
	return []serverSeed{
		{stream: bin(call(1, methodEcho, `{"a":1}`, 0))},
		{stream: slices.Concat(bin(call(1, methodAdd, `{"a":1,"b":2}`, 0)), bin(call(2, methodAdd, `"x"`, 0)),
			bin(call(3, methodFail, "null", 0)), bin(call(4, methodPanic, "null", 0)), bin(call(5, "no/such", "", 0)),
			bin(call(0, methodEcho, "notification", 0)), bin(call(6, methodEcho, "timed", 50)))},
		{stream: bin(batch(call(1, methodEcho, "1", 0), call(2, methodFail, "", 0), room(dispatch.KindJoin, 3, "r"),
			wire.Append(nil, &wire.Packet{Kind: dispatch.KindPing, Payload: []byte("in batch")})))},
		{stream: bin(batch(many...))},
		{stream: bin(batch(call(1, methodEcho, "1", 0), []byte{0x0E}))},
		{stream: slices.Concat(bin(room(dispatch.KindJoin, 1, "lobby")), bin(wire.AppendEmit(nil, "lobby", "msg", 0, []byte(`"hi"`))),
			bin(wire.AppendEmit(nil, "lobby", "msg", wire.EmitExceptSender, []byte(`"hi"`))), bin(room(dispatch.KindLeave, 2, "lobby")),
			bin(room(dispatch.KindJoin, 3, "a")), bin(room(dispatch.KindJoin, 4, "b")), bin(room(dispatch.KindJoin, 5, "c")),
			bin(room(dispatch.KindJoin, 6, "d")), bin(room(dispatch.KindJoin, 7, "e")))},
		{stream: slices.Concat(bin(caps("codec", "json", "dict", "zstd:nope, "+offer)), bin(compressed),
			bin(call(10, methodEcho, long, 0)), bin(wire.AppendCompressed(nil, dispatch.KindCall, []byte{0xFF})))},
		{stream: slices.Concat(bin(caps("dict", "zstd:"+fs.dictID)), bin(wire.Append(nil, &wire.Packet{Kind: dispatch.KindPing, Payload: []byte(long)})))},
		{stream: slices.Concat(bin(caps("codec", "msgpack, cbor", "dict", offer)), bin(call(11, methodEcho, "1", 0)))},
		{stream: bin(compressed)},
		{stream: slices.Concat(clientFrame(wsframe.OpBinary, call(1, methodEcho, "12", 0)[:3], 0),
			clientFrame(wsframe.OpPing, []byte("between"), wsframe.Fin),
			clientFrame(wsframe.OpContinuation, call(1, methodEcho, "12", 0)[3:], wsframe.Fin),
			clientFrame(wsframe.OpPong, nil, wsframe.Fin))},
		{stream: clientFrame(wsframe.OpText, []byte("text is not a packet"), wsframe.Fin)},
		{stream: bin(nil)},
		{stream: bin([]byte{0x01, 0x01})},
		{stream: bin(wire.AppendResult(nil, 1, nil))},
		{stream: bin([]byte{0x81, 0x00})},
		{stream: asyncCalls},
		{stream: slices.Concat(bin(call(1, methodAsyncAsk, `"sure?"`, 2000)),
			bin(wire.Append(nil, &wire.Packet{Kind: dispatch.KindAnswer, ID: 1, Status: wire.AnswerOK, Payload: []byte(`"yes"`)})))},
		{stream: slices.Concat(bin(wire.Append(nil, &wire.Packet{Kind: dispatch.KindEvent, Name: []byte(eventNote), Payload: []byte("{}")})), closeFrame(3000))},
		{stream: clientFrame(wsframe.OpClose, nil, wsframe.Fin)},
		{stream: unmasked},
		{stream: clientFrame(wsframe.OpBinary, one, wsframe.Fin|wsframe.Rsv1)},
		{stream: bin(call(1, methodEcho, string(one), 0)), cuts: []byte{0, 0, 0, 0, 0, 0, 0, 0, 3, 3, 3, 3, 200}},
		{stream: clientFrame(wsframe.OpBinary, make([]byte, serverMaxMessage+1), wsframe.Fin)[:20]},
		// permessage-deflate: compressed calls, a large answer the server
		// compresses, and each way a compressed message fails.
		{handshake: 1, stream: slices.Concat(deflated(wsframe.OpBinary, call(1, methodEcho, long, 0)), bin(call(2, methodEcho, long, 0)))},
		{handshake: 2, stream: slices.Concat(deflated(wsframe.OpBinary, call(1, methodEcho, "1", 0)), deflated(wsframe.OpBinary, nil))},
		{handshake: 3, stream: deflated(wsframe.OpBinary, make([]byte, serverMaxMessage+1))},
		{handshake: 1, stream: clientFrame(wsframe.OpBinary, []byte{0xFF, 0xFF}, wsframe.Fin|wsframe.Rsv1)},
		{handshake: 1, stream: deflated(wsframe.OpText, []byte("caf\xc3"))},
		{handshake: 1, stream: deflated(wsframe.OpText, []byte("café"))},
		{handshake: 2, stream: slices.Concat(clientFrame(wsframe.OpBinary, []byte{1}, wsframe.Rsv1), clientFrame(wsframe.OpContinuation, []byte{2}, wsframe.Fin|wsframe.Rsv1))},
		{handshake: 1, stream: deflated(wsframe.OpBinary, call(1, methodEcho, string(noise(serverMaxMessage-20)), 0))},
	}
}

// noise returns n bytes that do not compress: DEFLATE stores them.
func noise(n int) []byte {
	b := make([]byte, n)
	x := uint32(2463534242)
	for i := range b {
		x ^= x << 13
		x ^= x >> 17
		x ^= x << 5
		b[i] = byte(x)
	}
	return b
}

// deflateRaw compresses a message as RFC 7692 §7.2.1 describes, without
// context takeover: DEFLATE, a sync flush, and its 00 00 ff ff tail
// removed.
func deflateRaw(p []byte) []byte {
	var b bytes.Buffer
	w, _ := flate.NewWriter(&b, flate.BestSpeed)
	w.Write(p)
	w.Flush()
	return bytes.TrimSuffix(b.Bytes(), []byte{0x00, 0x00, 0xff, 0xff})
}

type memAddr struct{}

func (memAddr) Network() string { return "mem" }
func (memAddr) String() string  { return "mem" }

// short shows the start of a long input in hex, for failure messages; the
// whole input is in the file go test writes.
func short(b []byte) string {
	const show = 48
	if len(b) <= show {
		return fmt.Sprintf("% x", b)
	}
	return fmt.Sprintf("% x ... (%d bytes)", b[:show], len(b))
}

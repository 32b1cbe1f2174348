package server

import (
	"bytes"
	"compress/flate"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/hotpath-go/hotpath/deflatecache"
	"github.com/hotpath-go/hotpath/dictionary"
	"github.com/hotpath-go/hotpath/fuzz/internal/refwire"
	"github.com/hotpath-go/hotpath/wsframe"
)

// serverModel predicts what the fuzz server answers to a client's byte
// stream, from PROTOCOL.md and the methods of newFuzzRouter: the close code
// it ends with, the pongs it owes, and the answers each call may get.
// Frames are decoded with wsframe (which the frame differentials hold to
// gobwas/ws and gorilla/websocket), packets with refwire (held to
// compat/wire and golden.json by FuzzWireModel), compressed messages with
// compress/flate.
type serverModel struct {
	fs    *fuzzServer
	codec dictionary.Codec // the dictionary codec negotiated, nil before

	pings       []string // WebSocket ping payloads: the pongs owed, in order
	pingPackets []string // Ping packet data: the Pong packets owed, in order
	caps        int      // Capabilities packets answered: the first only
	clientMax   int64    // the maxMessage the client announced, 0 for none
	asks        bool     // a call that makes the server ask was made
	wants       []want   // calls, joins and leaves with a non-zero id
	end         wsframe.CloseCode
	why         string
}

// want is one request that may get an answer.
type want struct {
	kind    string // call, join or leave
	id      uint32
	method  string // call: the method; join and leave: the room
	payload string
	timeout uint32
	// exact is true when the server must answer exactly once: the answer
	// is produced on the read loop, in the turn that read the request, so
	// it leaves before any close frame. An Async method, and a call whose
	// timeout may pass first (the timeout then answers from another
	// goroutine and can lose the race with the connection's end), may get
	// at most one answer; so may a request in a batch that fails, whose
	// answers are then never sent.
	exact bool
}

// A timeout this long never passes while a handler of the fuzz server runs.
const longTimeout = 10_000

// predict runs the model over the bytes the server read on a connection
// with the given permessage-deflate parameters (nil for none).
func (fs *fuzzServer) predict(written []byte, pmd *deflatecache.Params) *serverModel {
	m := &serverModel{fs: fs}
	cfg := wsframe.Config{Role: wsframe.Server, MaxMessageSize: serverMaxMessage}
	if pmd != nil {
		// With permessage-deflate, compat's frame and message limits count
		// compressed bytes and admit the few that DEFLATE adds to an
		// incompressible message of exactly the limit: n/16 + 64
		// (deflateSlack in compat/transport.go). The message itself, once
		// inflated, or as it came when it was not compressed, is held to
		// the limit below.
		cfg.Extensions = wsframe.Rsv1
		cfg.MaxMessageSize += serverMaxMessage/16 + 64
	}
	d := wsframe.NewDecoder(cfg)
	var buf []byte
	for {
		msg, n, err := d.DecodeMessage(written, &buf)
		written = written[n:]
		switch {
		case errors.Is(err, wsframe.ErrNeedMore) || errors.Is(err, io.EOF):
			m.end, m.why = 0, "the input ran out with the connection open"
			return m
		case err != nil:
			return m.stop(wsframe.CloseCodeOf(err), err.Error())
		}
		switch msg.Opcode {
		case wsframe.OpPing:
			m.pings = append(m.pings, string(msg.Payload))
		case wsframe.OpClose:
			// RFC 6455 §5.5.1: the server echoes the code it received.
			code := msg.CloseCode
			if code == wsframe.CloseNoStatus {
				code = wsframe.CloseNormal
			}
			return m.stop(code, "client close")
		case wsframe.OpText, wsframe.OpBinary:
			payload := msg.Payload
			if !msg.Compressed && int64(len(payload)) > serverMaxMessage {
				// Limits.MaxMessageSize: "bounds a message, after inflating".
				// A compressed one within the decoder's slack is judged
				// once inflated, below: it may fit, or not inflate at all.
				return m.stop(wsframe.CloseMessageTooBig, "uncompressed message over the limit")
			}
			if msg.Compressed {
				// RFC 7692 §7.2.2, each message inflated alone (the server
				// refuses context takeover), capped at the message limit;
				// inflated text is validated then (RFC 6455 §8.1).
				var code wsframe.CloseCode
				if payload, code = inflateStd(payload, serverMaxMessage); code != 0 {
					return m.stop(code, "compressed message")
				}
				if msg.Opcode == wsframe.OpText && !utf8.Valid(payload) {
					return m.stop(wsframe.CloseInvalidPayload, "inflated text is not UTF-8")
				}
			}
			if msg.Opcode == wsframe.OpText {
				// PROTOCOL.md §1: a text message is not a packet.
				return m.stop(wsframe.CloseUnsupportedData, "text message")
			}
			if m.packet(payload) != 0 {
				return m
			}
		}
	}
}

func (m *serverModel) stop(code wsframe.CloseCode, why string) *serverModel {
	m.end, m.why = code, why
	return m
}

// packet follows one binary message and reports the close code it ends
// the connection with, or 0.
func (m *serverModel) packet(p []byte) wsframe.CloseCode {
	if len(p) == 0 {
		m.stop(wsframe.ClosePolicyViolation, "empty packet")
		return m.end
	}
	head, body := p[0], p[1:]
	// PROTOCOL.md §3 and §6: an unknown kind, and one only a server sends,
	// are 1008, read from the head byte before a compressed body is
	// inflated (as §8.4 has it for datagrams), so whether the body
	// inflates does not matter. The head alone, compressed, decodes to its
	// kind whatever the body.
	switch k, v := refwire.Decode([]byte{head | 0x80}); {
	case v == refwire.UnknownKind:
		m.stop(wsframe.ClosePolicyViolation, string(v))
		return m.end
	case k.Kind == "result" || k.Kind == "error" || k.Kind == "ask":
		m.stop(wsframe.ClosePolicyViolation, k.Kind+" from a client")
		return m.end
	}
	if head&0x80 != 0 {
		// PROTOCOL.md §6: the compressed bit before negotiation is 1008; a
		// body that does not decompress 1007, one that inflates past the
		// message limit 1009. The limit is the packet's, head byte
		// included, as for a plain packet: a body of exactly the limit
		// is one byte over.
		if m.codec == nil {
			m.stop(wsframe.ClosePolicyViolation, "compressed before negotiation")
			return m.end
		}
		out, err := m.codec.AppendDecompress(nil, body)
		switch {
		case errors.Is(err, dictionary.ErrTooLarge), err == nil && 1+len(out) > serverMaxMessage:
			m.stop(wsframe.CloseMessageTooBig, "inflates past the limit")
			return m.end
		case err != nil:
			m.stop(wsframe.CloseInvalidPayload, "does not decompress")
			return m.end
		}
		body = out
	}
	return m.dispatch(append([]byte{head & 0x7F}, body...), -1)
}

// dispatch follows one plain packet, at the top level or as item of a
// batch whose first want is at index batch (else -1).
func (m *serverModel) dispatch(p []byte, batch int) wsframe.CloseCode {
	pk, v := refwire.Decode(p)
	if v != refwire.Accepted {
		// PROTOCOL.md §3: an unknown kind, and a malformed packet, are 1008.
		m.stop(wsframe.ClosePolicyViolation, string(v))
		return m.end
	}
	switch pk.Kind {
	case "result", "error", "ask":
		// Kinds only a server sends: the fuzz server has no handler for
		// them, which dispatch reports as an unknown kind.
		m.stop(wsframe.ClosePolicyViolation, pk.Kind+" from a client")
		return m.end
	case "call":
		if pk.ID != 0 {
			async := pk.Method == methodAsyncEcho || pk.Method == methodAsyncAsk
			known := async || slices.Contains([]string{methodEcho, methodAdd, methodFail, methodPanic}, pk.Method)
			exact := !async && (!known || pk.Timeout == 0 || pk.Timeout >= longTimeout)
			m.wants = append(m.wants, want{kind: "call", id: pk.ID, method: pk.Method, payload: pk.Payload, timeout: pk.Timeout, exact: exact})
		}
		m.asks = m.asks || pk.Method == methodAsyncAsk
	case "join", "leave":
		if pk.ID != 0 {
			m.wants = append(m.wants, want{kind: pk.Kind, id: pk.ID, method: pk.Room, exact: true})
		}
	case "ping":
		// PROTOCOL.md §4.8: the Pong is as long as the Ping; one over the
		// client's announced maxMessage (§4.9) is 1009 instead.
		if m.clientMax > 0 && int64(1+len(pk.Data)) > m.clientMax {
			m.stop(wsframe.CloseMessageTooBig, "a Pong over the client's maxMessage")
			return m.end
		}
		m.pingPackets = append(m.pingPackets, pk.Data)
	case "capabilities":
		// PROTOCOL.md §4.9 and §6: a client sends Capabilities once; a
		// repeat is 1008 HP_ERR_REPEATED_CAPABILITIES. The server answers
		// the first, and names the dictionary codec it chose among those
		// offered; the last "dict" offer decides. PROTOCOL.md §4.9: a
		// server whose codec (json) a "codec" offer leaves out closes
		// with 1008 HP_ERR_UNSUPPORTED_CODEC instead of answering; an
		// empty offer is json's.
		if m.caps > 0 {
			m.stop(wsframe.ClosePolicyViolation, "capabilities again")
			return m.end
		}
		for _, kv := range pk.Pairs {
			if kv[0] == "codec" && kv[1] != "" && !slices.ContainsFunc(strings.Split(kv[1], ","), func(name string) bool {
				return strings.TrimSpace(name) == "json"
			}) {
				m.stop(wsframe.ClosePolicyViolation, "a codec offer without json")
				return m.end
			}
		}
		m.caps++
		for _, kv := range pk.Pairs {
			// As the server reads it; the last one decides.
			if n, err := strconv.ParseInt(kv[1], 10, 64); kv[0] == "maxMessage" && err == nil && n > 0 {
				m.clientMax = n
			}
		}
		var chosen dictionary.Codec
		for _, kv := range pk.Pairs {
			if kv[0] != "dict" {
				continue
			}
			chosen = nil
			for _, offer := range strings.Split(kv[1], ",") {
				if c, ok := m.fs.codecs[strings.TrimSpace(offer)]; ok {
					chosen = c
					break
				}
			}
		}
		if chosen != nil {
			m.codec = chosen
		}
	case "batch":
		// PROTOCOL.md §4.7: at most maxBatch items, else 1009; the items
		// run in order, and the answers of the batch leave together after
		// the last, so an item that fails the connection loses them.
		if len(pk.Items) > serverMaxBatch {
			m.stop(wsframe.CloseMessageTooBig, "batch too large")
			return m.end
		}
		first := len(m.wants)
		for _, it := range pk.Items {
			if code := m.dispatch(refwire.Encode(it), first); code != 0 {
				for i := first; i < len(m.wants); i++ {
					m.wants[i].exact = false
				}
				return code
			}
		}
	}
	return 0
}

// deflateTrailer ends a message's compressed payload for an inflater: the
// 00 00 ff ff that RFC 7692 §7.2.2 has the receiver append, and an empty
// final stored block, so that a complete message reads to io.EOF.
var deflateTrailer = []byte{0x00, 0x00, 0xff, 0xff, 0x01, 0x00, 0x00, 0xff, 0xff}

// inflateStd inflates one permessage-deflate message with compress/flate,
// reading at most one byte past limit, and returns it, or the close code
// for a message that inflates past limit (1009) or is not DEFLATE data
// (1007). An empty payload is an empty message.
func inflateStd(payload []byte, limit int64) ([]byte, wsframe.CloseCode) {
	if len(payload) == 0 {
		return nil, 0
	}
	r := flate.NewReader(io.MultiReader(bytes.NewReader(payload), bytes.NewReader(deflateTrailer)))
	out, err := io.ReadAll(io.LimitReader(r, limit+1))
	switch {
	case int64(len(out)) > limit:
		return nil, wsframe.CloseMessageTooBig
	case err != nil:
		return nil, wsframe.CloseInvalidPayload
	}
	return out, 0
}

// answer is one Result or Error the server sent.
type answer struct {
	id      uint32
	kind    string
	code    uint32
	payload string
}

// accepts reports whether a is an answer w may get.
func (w want) accepts(a answer) bool {
	raced := w.timeout > 0 && a.kind == "error" && a.code == 5 // the call's timeout passed first
	switch w.kind {
	case "join", "leave":
		if a.kind == "error" {
			// Error 1: too many rooms (Limits.MaxRooms).
			return w.kind == "join" && a.code == 1
		}
		var res struct {
			Room    string `json:"room"`
			Members int    `json:"members"`
		}
		return json.Unmarshal([]byte(a.payload), &res) == nil && res.Room == w.method && res.Members >= 0
	}
	switch w.method {
	case methodEcho:
		return a.kind == "result" && a.payload == w.payload || raced
	case methodAdd:
		return a.kind == "result" || a.kind == "error" && a.code == 2 || raced
	case methodFail:
		return a.kind == "error" && a.code == failCode || raced
	case methodPanic:
		return a.kind == "error" && a.code == 4 || raced
	case methodAsyncEcho:
		// Error 7: more than MaxInFlight async calls at once.
		return a.kind == "result" && a.payload == w.payload || a.kind == "error" && a.code == 7 || raced
	case methodAsyncAsk:
		return true
	}
	return a.kind == "error" && a.code == 3 // method not found
}

// received is what the server sent, sorted out.
type received struct {
	close       *serverFrame
	pongs       []string
	pongPackets []string
	answers     []answer
	caps        int
	asks        int
}

// sortOut reads the server's frames, decompressing packets with the codec
// its Capabilities packet names, and reports the first thing a server may
// never send.
func (fs *fuzzServer) sortOut(frames []serverFrame) (received, error) {
	var r received
	var codec dictionary.Codec
	for i, f := range frames {
		if r.close != nil {
			return r, fmt.Errorf("frame %d (%v) after the close frame", i, f.op)
		}
		switch f.op {
		case wsframe.OpClose:
			r.close = &frames[i]
			continue
		case wsframe.OpPong:
			r.pongs = append(r.pongs, string(f.payload))
			continue
		case wsframe.OpPing:
			continue
		case wsframe.OpBinary:
		default:
			return r, fmt.Errorf("frame %d: the server sent a %v message", i, f.op)
		}
		p := f.payload
		if f.compressed {
			var code wsframe.CloseCode
			if p, code = inflateStd(p, 4*serverMaxMessage); code != 0 {
				return r, fmt.Errorf("frame %d: the server's compressed message does not inflate (%d): %s", i, code, short(f.payload))
			}
		}
		if len(p) > 0 && p[0]&0x80 != 0 {
			if codec == nil {
				return r, fmt.Errorf("frame %d: compressed packet before the server chose a dictionary", i)
			}
			body, err := codec.AppendDecompress(nil, p[1:])
			if err != nil {
				return r, fmt.Errorf("frame %d: the server's compressed packet does not decompress: %v", i, err)
			}
			p = append([]byte{p[0] & 0x7F}, body...)
		}
		pk, v := refwire.Decode(p)
		if v != refwire.Accepted {
			return r, fmt.Errorf("frame %d: the server sent a %s packet %s", i, v, short(p))
		}
		switch pk.Kind {
		case "result", "error":
			r.answers = append(r.answers, answerOf(pk))
		case "batch":
			for _, it := range pk.Items {
				if it.Kind != "result" && it.Kind != "error" {
					return r, fmt.Errorf("frame %d: a batch of answers holds %+v", i, it)
				}
				r.answers = append(r.answers, answerOf(it))
			}
		case "pong":
			r.pongPackets = append(r.pongPackets, pk.Data)
		case "capabilities":
			r.caps++
			for _, kv := range pk.Pairs {
				if kv[0] == "dict" {
					if codec = fs.codecs[kv[1]]; codec == nil {
						return r, fmt.Errorf("frame %d: the server chose dictionary codec %q, which was not offered", i, kv[1])
					}
				}
			}
		case "ask":
			r.asks++
		case "emit":
		default:
			return r, fmt.Errorf("frame %d: the server sent a %s packet", i, pk.Kind)
		}
	}
	return r, nil
}

func answerOf(m refwire.Model) answer {
	if m.Kind == "result" {
		return answer{id: m.ID, kind: "result", payload: m.Payload}
	}
	return answer{id: m.ID, kind: "error", code: m.Code, payload: m.Data}
}

// check compares what the server sent with what the model predicts.
func (m *serverModel) check(r received) error {
	if r.close == nil {
		return errors.New("the server closed the connection without a close frame")
	}
	code, reason, err := wsframe.ParseClosePayload(r.close.payload)
	switch {
	case err != nil:
		return fmt.Errorf("the server's close frame % x is invalid: %v", r.close.payload, err)
	case !sendableCloseCode(code):
		return fmt.Errorf("the server closed with %d, a code an endpoint may not send", code)
	case !utf8.Valid(reason):
		return fmt.Errorf("the server's close reason %q is not UTF-8", reason)
	case m.end == 0:
		return fmt.Errorf("the server closed with %d %q; the model expects the connection open (%s)", code, reason, m.why)
	case code != m.end:
		return fmt.Errorf("the server closed with %d %q; the model expects %d (%s)", code, reason, m.end, m.why)
	case !slices.Equal(r.pongs, m.pings):
		return fmt.Errorf("the server sent pongs %q for the pings %q", r.pongs, m.pings)
	case !slices.Equal(r.pongPackets, m.pingPackets):
		return fmt.Errorf("the server sent Pong packets %q for the Ping packets %q", r.pongPackets, m.pingPackets)
	case r.caps != m.caps:
		return fmt.Errorf("the server sent %d Capabilities packets for %d", r.caps, m.caps)
	case r.asks > 0 && !m.asks:
		return fmt.Errorf("the server sent %d asks, but no handler asks", r.asks)
	}
	// Every answer answers a request with its id, and every request gets
	// at most one answer, exactly one when it is exact.
	byID := map[uint32][]want{}
	for _, w := range m.wants {
		byID[w.id] = append(byID[w.id], w)
	}
	got := map[uint32][]answer{}
	for _, a := range r.answers {
		got[a.id] = append(got[a.id], a)
		if !slices.ContainsFunc(byID[a.id], func(w want) bool { return w.accepts(a) }) {
			return fmt.Errorf("answer %+v fits no request with that id: %+v", a, byID[a.id])
		}
	}
	for id, ws := range byID {
		exact := 0
		for _, w := range ws {
			if w.exact {
				exact++
			}
		}
		if n := len(got[id]); n < exact || n > len(ws) {
			return fmt.Errorf("%d answers for id %d, %d requests (%d exact): %+v", n, id, len(ws), exact, got[id])
		}
	}
	return nil
}

// sendableCloseCode reports whether an endpoint may send code (RFC 6455
// §7.4.1 and §7.4.2, with the IANA registry): 1000-1003, 1007-1014 and
// 3000-4999.
func sendableCloseCode(c wsframe.CloseCode) bool {
	return c >= 1000 && c <= 1003 || c >= 1007 && c <= 1014 || c >= 3000 && c <= 4999
}

// hexOr shows the start of b as text when it is, else in hex.
func hexOr(b []byte) string {
	if utf8.Valid(b) && len(b) <= 80 {
		return fmt.Sprintf("%q", b)
	}
	return short(b)
}

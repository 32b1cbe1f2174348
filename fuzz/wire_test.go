package main

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/hotpath-go/hotpath/compat/wire"
	"github.com/hotpath-go/hotpath/dispatch"
	"github.com/hotpath-go/hotpath/fuzz/internal/refwire"
)

// The packet differential holds compat/wire against refwire, a second
// decoder and encoder written from compat/PROTOCOL.md alone: both must
// accept and refuse the same packets, and an accepted packet must mean the
// same thing in the JSON model of compat/wire/testdata/golden.json. The
// model is then encoded again, by refwire and by wire's encoders, and must
// give back the same bytes.

// modelOf turns what wire.Decode returned into the model, decoding batch
// items with wire.Decode too.
func modelOf(p wire.Packet) refwire.Model {
	m := refwire.Model{Kind: p.Kind.String()}
	if p.Compressed {
		m.Compressed, m.BodyHex = true, hex.EncodeToString(p.Body)
		return m
	}
	switch p.Kind {
	case dispatch.KindCall, dispatch.KindAsk:
		m.ID, m.Method, m.Timeout, m.Payload = p.ID, string(p.Name), p.Timeout, string(p.Payload)
	case dispatch.KindResult:
		m.ID, m.Payload = p.ID, string(p.Payload)
	case dispatch.KindError:
		m.ID, m.Code, m.Message, m.Data = p.ID, p.Code, string(p.Message), string(p.Payload)
	case dispatch.KindEvent:
		m.Event, m.Payload = string(p.Name), string(p.Payload)
	case dispatch.KindAnswer:
		m.ID, m.Status = p.ID, p.Status
		if p.Status == wire.AnswerError {
			m.Code, m.Message, m.Data = p.Code, string(p.Message), string(p.Payload)
		} else {
			m.Payload = string(p.Payload)
		}
	case dispatch.KindBatch:
		for item := range p.Items() {
			ip, err := wire.Decode(item)
			if err != nil {
				m.Items = append(m.Items, refwire.Model{Hex: hex.EncodeToString(item)})
				continue
			}
			m.Items = append(m.Items, modelOf(ip))
		}
	case dispatch.KindPing, dispatch.KindPong:
		m.Data = string(p.Payload)
	case dispatch.KindJoin, dispatch.KindLeave:
		m.ID, m.Room = p.ID, string(p.Room)
	case dispatch.KindEmit:
		m.Room, m.Event, m.Flags, m.Payload = string(p.Room), string(p.Name), p.Flags, string(p.Payload)
	case dispatch.KindCapabilities:
		for k, v := range p.Pairs() {
			m.Pairs = append(m.Pairs, [2]string{string(k), string(v)})
		}
	}
	return m
}

// wireEncode encodes a model with compat/wire's encoders.
func wireEncode(m refwire.Model) []byte {
	if m.Hex != "" {
		b, _ := hex.DecodeString(m.Hex)
		return b
	}
	k := dispatch.Kind(refwire.KindNumber(m.Kind))
	if m.Compressed {
		body, _ := hex.DecodeString(m.BodyHex)
		return wire.AppendCompressed(nil, k, body)
	}
	p := wire.Packet{Kind: k, ID: m.ID, Timeout: m.Timeout, Flags: m.Flags, Status: m.Status, Code: m.Code,
		Name: []byte(m.Method + m.Event), Room: []byte(m.Room), Message: []byte(m.Message), Payload: []byte(m.Payload + m.Data)}
	switch m.Kind {
	case "batch":
		p.Payload, p.Count = nil, uint32(len(m.Items))
		for _, it := range m.Items {
			p.Payload = wire.AppendItem(p.Payload, wireEncode(it))
		}
	case "capabilities":
		p.Payload, p.Count = nil, uint32(len(m.Pairs))
		for _, kv := range m.Pairs {
			p.Payload = wire.AppendPair(p.Payload, kv[0], kv[1])
		}
	}
	return wire.Append(nil, &p)
}

func wireVerdict(err error) refwire.Verdict {
	var uk *dispatch.UnknownKindError
	switch {
	case err == nil:
		return refwire.Accepted
	case errors.Is(err, dispatch.ErrEmptyPacket):
		return refwire.Empty
	case errors.As(err, &uk):
		return refwire.UnknownKind
	case errors.Is(err, wire.ErrMalformed):
		return refwire.Malformed
	}
	return refwire.Verdict("unexpected error: " + err.Error())
}

type goldenFile struct {
	Valid []struct {
		Name   string          `json:"name"`
		Hex    string          `json:"hex"`
		Packet json.RawMessage `json:"packet"`
	} `json:"valid"`
	Invalid []struct {
		Name  string          `json:"name"`
		Hex   string          `json:"hex"`
		Error refwire.Verdict `json:"error"`
	} `json:"invalid"`
}

func loadGolden(t testing.TB) goldenFile {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "compat", "wire", "testdata", "golden.json"))
	if err != nil {
		t.Fatal(err)
	}
	var g goldenFile
	if err := json.Unmarshal(data, &g); err != nil {
		t.Fatal(err)
	}
	return g
}

// normalize makes empty lists nil, so that models compare with DeepEqual
// whichever way they were built.
func normalize(m refwire.Model) refwire.Model {
	if len(m.Pairs) == 0 {
		m.Pairs = nil
	}
	if len(m.Items) == 0 {
		m.Items = nil
	}
	for i := range m.Items {
		m.Items[i] = normalize(m.Items[i])
	}
	return m
}

// TestReferenceDecodesGolden holds refwire to the golden vectors, so that
// the fuzz target compares wire with something right.
func TestReferenceDecodesGolden(t *testing.T) {
	g := loadGolden(t)
	for _, v := range g.Valid {
		b, _ := hex.DecodeString(v.Hex)
		var want refwire.Model
		if err := json.Unmarshal(v.Packet, &want); err != nil {
			t.Fatalf("%s: %v", v.Name, err)
		}
		got, verdict := refwire.Decode(b)
		if verdict != refwire.Accepted || !reflect.DeepEqual(normalize(got), normalize(want)) {
			t.Errorf("%s: refwire decodes %s as %+v (%s), golden says %+v", v.Name, v.Hex, got, verdict, want)
		}
		if enc := refwire.Encode(got); !bytes.Equal(enc, b) {
			t.Errorf("%s: refwire encodes %x, golden says %s", v.Name, enc, v.Hex)
		}
	}
	for _, v := range g.Invalid {
		b, _ := hex.DecodeString(v.Hex)
		if _, verdict := refwire.Decode(b); verdict != v.Error {
			t.Errorf("%s: refwire says %s, golden says %s", v.Name, verdict, v.Error)
		}
	}
}

// FuzzWireModel: compat/wire and refwire class every packet alike
// (accepted, empty, unknown kind, malformed); an accepted packet has the
// same JSON model both ways; and the model encoded again, by refwire and
// by wire's encoders, is the packet byte for byte and decodes to the same
// model.
func FuzzWireModel(f *testing.F) {
	g := loadGolden(f)
	for _, v := range g.Valid {
		b, _ := hex.DecodeString(v.Hex)
		f.Add(b)
	}
	for _, v := range g.Invalid {
		b, _ := hex.DecodeString(v.Hex)
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		ref, rv := refwire.Decode(b)
		p, err := wire.Decode(b)
		if wv := wireVerdict(err); wv != rv {
			t.Fatalf("%x: wire says %s (%v), refwire %s", b, wv, err, rv)
		}
		if rv != refwire.Accepted {
			return
		}
		ref = normalize(ref)
		if got := normalize(modelOf(p)); !reflect.DeepEqual(got, ref) {
			t.Fatalf("%x: wire decodes\n%+v\nrefwire\n%+v", b, got, ref)
		}
		if enc := refwire.Encode(ref); !bytes.Equal(enc, b) {
			t.Fatalf("%x: refwire encodes its model as %x", b, enc)
		}
		enc := wireEncode(ref)
		if !bytes.Equal(enc, b) {
			t.Fatalf("%x: wire encodes the model %+v as %x", b, ref, enc)
		}
		again, err := wire.Decode(enc)
		if err != nil || !reflect.DeepEqual(normalize(modelOf(again)), ref) {
			t.Fatalf("%x: re-encoded packet decodes as %+v, %v", b, again, err)
		}
	})
}

package wire

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"regexp"
	"strconv"
	"testing"

	"github.com/hotpath-go/hotpath/dispatch"
)

// goldenPacket is the JSON form of a packet in testdata/golden.json, shared
// with the JavaScript client's tests.
type goldenPacket struct {
	Kind       string         `json:"kind"`
	Compressed bool           `json:"compressed"`
	BodyHex    string         `json:"body_hex"`
	ID         uint32         `json:"id"`
	Method     string         `json:"method"`
	Event      string         `json:"event"`
	Room       string         `json:"room"`
	Timeout    uint32         `json:"timeout"`
	Flags      uint8          `json:"flags"`
	Status     uint8          `json:"status"`
	Code       uint32         `json:"code"`
	Message    string         `json:"message"`
	Payload    string         `json:"payload"`
	Data       string         `json:"data"`
	Items      []goldenPacket `json:"items"`
	Pairs      [][2]string    `json:"pairs"`
}

type golden struct {
	Valid []struct {
		Name   string       `json:"name"`
		Hex    string       `json:"hex"`
		Packet goldenPacket `json:"packet"`
	} `json:"valid"`
	Invalid []struct {
		Name  string `json:"name"`
		Hex   string `json:"hex"`
		Error string `json:"error"`
	} `json:"invalid"`
}

func loadGolden(t testing.TB) golden {
	t.Helper()
	data, err := os.ReadFile("testdata/golden.json")
	if err != nil {
		t.Fatal(err)
	}
	var g golden
	if err := json.Unmarshal(data, &g); err != nil {
		t.Fatal(err)
	}
	return g
}

func kindByName(t testing.TB, name string) Kind {
	for k := Kind(1); k.Valid(); k++ {
		if k.String() == name {
			return k
		}
	}
	t.Fatalf("unknown kind name %q", name)
	return 0
}

// toPacket converts a golden packet to the Packet that Append encodes.
func (g goldenPacket) toPacket(t testing.TB) Packet {
	p := Packet{
		Kind: kindByName(t, g.Kind), ID: g.ID, Room: []byte(g.Room),
		Timeout: g.Timeout, Flags: g.Flags, Status: g.Status, Code: g.Code,
		Message: []byte(g.Message), Payload: []byte(g.Payload),
	}
	p.Name = []byte(g.Method + g.Event)
	switch p.Kind {
	case dispatch.KindError, dispatch.KindAnswer:
		if p.Kind == dispatch.KindError || p.Status == AnswerError {
			p.Payload = []byte(g.Data)
		}
	case dispatch.KindPing, dispatch.KindPong:
		p.Payload = []byte(g.Data)
	case dispatch.KindBatch:
		p.Payload = nil
		for _, it := range g.Items {
			ip := it.toPacket(t)
			p.Payload = AppendItem(p.Payload, Append(nil, &ip))
		}
		p.Count = uint32(len(g.Items))
	case dispatch.KindCapabilities:
		p.Payload = nil
		for _, kv := range g.Pairs {
			p.Payload = AppendPair(p.Payload, kv[0], kv[1])
		}
		p.Count = uint32(len(g.Pairs))
	}
	return p
}

// sameFields compares the decoded fields that a kind defines.
func sameFields(t *testing.T, name string, got, want Packet) {
	t.Helper()
	if got.Kind != want.Kind || got.ID != want.ID || got.Timeout != want.Timeout ||
		got.Flags != want.Flags || got.Status != want.Status || got.Code != want.Code ||
		got.Count != want.Count || !bytes.Equal(got.Name, want.Name) ||
		!bytes.Equal(got.Room, want.Room) || !bytes.Equal(got.Message, want.Message) ||
		!bytes.Equal(got.Payload, want.Payload) {
		t.Errorf("%s: decoded\n %+v\nwant\n %+v", name, got, want)
	}
}

func TestGoldenVectorsDecode(t *testing.T) {
	for _, v := range loadGolden(t).Valid {
		b, err := hex.DecodeString(v.Hex)
		if err != nil {
			t.Fatalf("%s: %v", v.Name, err)
		}
		got, err := Decode(b)
		if err != nil {
			t.Errorf("%s: Decode: %v", v.Name, err)
			continue
		}
		if v.Packet.Compressed {
			body, _ := hex.DecodeString(v.Packet.BodyHex)
			if !got.Compressed || got.Kind != kindByName(t, v.Packet.Kind) || !bytes.Equal(got.Body, body) {
				t.Errorf("%s: decoded %+v", v.Name, got)
			}
			continue
		}
		sameFields(t, v.Name, got, v.Packet.toPacket(t))
		if got.Kind == dispatch.KindBatch {
			i := 0
			for item := range got.Items() {
				ip, err := Decode(item)
				if err != nil {
					t.Fatalf("%s item %d: %v", v.Name, i, err)
				}
				sameFields(t, v.Name, ip, v.Packet.Items[i].toPacket(t))
				i++
			}
			if i != len(v.Packet.Items) {
				t.Errorf("%s: %d items, want %d", v.Name, i, len(v.Packet.Items))
			}
		}
		if got.Kind == dispatch.KindCapabilities {
			i := 0
			for k, val := range got.Pairs() {
				if string(k) != v.Packet.Pairs[i][0] || string(val) != v.Packet.Pairs[i][1] {
					t.Errorf("%s: pair %d = %q=%q", v.Name, i, k, val)
				}
				i++
			}
			if i != len(v.Packet.Pairs) {
				t.Errorf("%s: %d pairs, want %d", v.Name, i, len(v.Packet.Pairs))
			}
		}
	}
}

func TestGoldenVectorsEncode(t *testing.T) {
	for _, v := range loadGolden(t).Valid {
		var got []byte
		if v.Packet.Compressed {
			body, _ := hex.DecodeString(v.Packet.BodyHex)
			got = AppendCompressed(nil, kindByName(t, v.Packet.Kind), body)
		} else {
			p := v.Packet.toPacket(t)
			got = Append(nil, &p)
		}
		if hex.EncodeToString(got) != v.Hex {
			t.Errorf("%s: encoded %x, want %s", v.Name, got, v.Hex)
		}
	}
}

func TestGoldenVectorsInvalid(t *testing.T) {
	for _, v := range loadGolden(t).Invalid {
		b, _ := hex.DecodeString(v.Hex)
		_, err := Decode(b)
		var uk *dispatch.UnknownKindError
		switch v.Error {
		case "empty":
			if !errors.Is(err, dispatch.ErrEmptyPacket) {
				t.Errorf("%s: err = %v, want empty packet", v.Name, err)
			}
		case "unknown kind":
			if !errors.As(err, &uk) {
				t.Errorf("%s: err = %v, want unknown kind", v.Name, err)
			}
		case "malformed":
			if !errors.Is(err, ErrMalformed) {
				t.Errorf("%s: err = %v, want malformed", v.Name, err)
			}
		default:
			t.Fatalf("%s: unknown expected error %q", v.Name, v.Error)
		}
	}
}

func TestHelpersMatchAppend(t *testing.T) {
	call := Packet{Kind: dispatch.KindCall, ID: 9, Name: []byte("a/b"), Timeout: 250, Payload: []byte("{}")}
	if got, want := AppendCall(nil, dispatch.KindCall, 9, "a/b", 250, []byte("{}")), Append(nil, &call); !bytes.Equal(got, want) {
		t.Errorf("AppendCall = %x, Append = %x", got, want)
	}
	res := Packet{Kind: dispatch.KindResult, ID: 1 << 20, Payload: []byte("1")}
	if got, want := AppendResult(nil, 1<<20, []byte("1")), Append(nil, &res); !bytes.Equal(got, want) {
		t.Errorf("AppendResult = %x, Append = %x", got, want)
	}
	e := Packet{Kind: dispatch.KindError, ID: 3, Code: CodeNotFound, Message: []byte("no"), Payload: []byte("x")}
	if got, want := AppendError(nil, 3, CodeNotFound, "no", []byte("x")), Append(nil, &e); !bytes.Equal(got, want) {
		t.Errorf("AppendError = %x, Append = %x", got, want)
	}
	em := Packet{Kind: dispatch.KindEmit, Room: []byte("r"), Name: []byte("e"), Flags: EmitExceptSender, Payload: []byte("p")}
	if got, want := AppendEmit(nil, "r", "e", EmitExceptSender, []byte("p")), Append(nil, &em); !bytes.Equal(got, want) {
		t.Errorf("AppendEmit = %x, Append = %x", got, want)
	}
}

func TestDecodeAllocatesNothing(t *testing.T) {
	b := AppendCall(nil, dispatch.KindCall, 77, "unit/method", 1000, []byte(`{"a":1}`))
	allocs := testing.AllocsPerRun(100, func() {
		if _, err := Decode(b); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Errorf("Decode allocates %v times per packet", allocs)
	}
}

// FuzzDecode checks that Decode never panics and that every packet it
// accepts encodes back to the same bytes: the encoding is canonical.
func FuzzDecode(f *testing.F) {
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
		p, err := Decode(b)
		if err != nil {
			return
		}
		var again []byte
		if p.Compressed {
			again = AppendCompressed(nil, p.Kind, p.Body)
		} else {
			again = Append(nil, &p)
		}
		if !bytes.Equal(again, b) {
			t.Fatalf("Decode(%x) = %+v re-encodes to %x", b, p, again)
		}
		if p.Kind == dispatch.KindBatch {
			for item := range p.Items() {
				Decode(item)
			}
		}
	})
}

func BenchmarkDecodeCall(b *testing.B) {
	pkt := AppendCall(nil, dispatch.KindCall, 77, "unit/method", 1000, []byte(`{"a":1}`))
	b.ReportAllocs()
	b.SetBytes(int64(len(pkt)))
	for b.Loop() {
		if _, err := Decode(pkt); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkAppendResult(b *testing.B) {
	payload := []byte(`{"text":"hello, world"}`)
	buf := make([]byte, 0, 64)
	b.ReportAllocs()
	for b.Loop() {
		buf = AppendResult(buf[:0], 123456, payload)
	}
}

// PROTOCOL.md §2: names are 1-255 bytes, capability keys at most 255, a
// capability value or an error message at most 4096; one byte more is
// malformed (the golden vectors hold the names and keys, too long for
// the messages and values).
func TestStringLimits(t *testing.T) {
	str := func(n int) []byte { return binary.AppendUvarint(nil, uint64(n)) }
	errorWith := func(n int) []byte {
		b := append([]byte{byte(dispatch.KindError), 1, 1}, str(n)...)
		return append(b, bytes.Repeat([]byte("m"), n)...)
	}
	capsWith := func(n int) []byte {
		b := append([]byte{byte(dispatch.KindCapabilities), 1, 1, 'k'}, str(n)...)
		return append(b, bytes.Repeat([]byte("v"), n)...)
	}
	for _, tc := range []struct {
		name string
		pkt  []byte
		ok   bool
	}{
		{"error message of 4096 bytes", errorWith(MaxValueLen), true},
		{"error message of 4097 bytes", errorWith(MaxValueLen + 1), false},
		{"capability value of 4096 bytes", capsWith(MaxValueLen), true},
		{"capability value of 4097 bytes", capsWith(MaxValueLen + 1), false},
	} {
		_, err := Decode(tc.pkt)
		if tc.ok != (err == nil) || err != nil && !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: Decode = %v", tc.name, err)
		}
	}
}

// ToServer and ToClient follow the direction column of PROTOCOL.md §3's
// kind table, read from the document itself, and are false for every
// value that is not a kind.
func TestDirectionsFollowTheProtocol(t *testing.T) {
	doc, err := os.ReadFile("../PROTOCOL.md")
	if err != nil {
		t.Fatal(err)
	}
	row := regexp.MustCompile(`(?m)^\| *(\d+) \| \w+ \| (client → server|server → client|both) \|`)
	rows := row.FindAllSubmatch(doc, -1)
	if len(rows) != 13 {
		t.Fatalf("%d rows in PROTOCOL.md §3's kind table, want 13", len(rows))
	}
	seen := map[Kind]bool{}
	for _, r := range rows {
		n, _ := strconv.Atoi(string(r[1]))
		k, dir := Kind(n), string(r[2])
		seen[k] = true
		if got, want := ToServer(k), dir != "server → client"; got != want {
			t.Errorf("ToServer(%v) = %v; PROTOCOL.md §3: %s", k, got, dir)
		}
		if got, want := ToClient(k), dir != "client → server"; got != want {
			t.Errorf("ToClient(%v) = %v; PROTOCOL.md §3: %s", k, got, dir)
		}
	}
	for n := range 256 {
		if k := Kind(n); !seen[k] && (ToServer(k) || ToClient(k)) {
			t.Errorf("kind %d, not in the table: ToServer %v, ToClient %v", n, ToServer(k), ToClient(k))
		}
	}
}

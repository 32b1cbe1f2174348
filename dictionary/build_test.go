package dictionary

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata")

// goldenSamples are samples made without any random source, so that the
// learned golden dictionary depends on this package's code alone.
func goldenSamples() [][]byte {
	out := make([][]byte, 300)
	for i := range out {
		w := func(k int) string { return words[(i*k+k)%len(words)] }
		switch i % 3 {
		case 0:
			out[i] = envelope(kindEvent, "room/message", roomMessageEvent{
				RoomID:  fmt.Sprintf("r-%d", i*37%1000),
				Message: chatMessage{ID: fmt.Sprintf("m-%d", 90000+i), Author: author{ID: fmt.Sprintf("u-%d", i%97)}, Text: w(3) + " " + w(5), TS: 1764680000 + int64(i*61)},
			})
		case 1:
			out[i] = envelope(kindCall, "room/send", sendParams{fmt.Sprintf("r-%d", i*53%1000), w(7) + " " + w(11) + " " + w(13), fmt.Sprintf("m-%d", 80000+i)})
		case 2:
			out[i] = envelope(kindEvent, "user/presence", presenceEvent{fmt.Sprintf("u-%d", i%89), statuses[i%len(statuses)], 1764600000 + int64(i*17)})
		}
	}
	return out
}

func checkGolden(t *testing.T, name string, d *Dictionary) {
	t.Helper()
	dictPath := filepath.Join("testdata", name+".dict")
	idPath := filepath.Join("testdata", name+".id")
	if *update {
		if err := os.WriteFile(dictPath, d.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(idPath, []byte(d.ID()+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(dictPath)
	if err != nil {
		t.Fatalf("%v (run go test -run Golden -update once)", err)
	}
	wantID, err := os.ReadFile(idPath)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(d.Bytes(), want) {
		t.Errorf("%s: dictionary bytes differ from %s (%d bytes, want %d)", name, dictPath, d.Len(), len(want))
	}
	if d.ID() != strings.TrimSpace(string(wantID)) {
		t.Errorf("%s: id %s, want %s", name, d.ID(), strings.TrimSpace(string(wantID)))
	}
}

// TestBuildGolden pins the bytes and the id of the test router's
// dictionary, with and without learning: any change of Build's output is a
// change of every deployed id, and must be deliberate.
func TestBuildGolden(t *testing.T) {
	d, err := Build(testSource(), BuildOptions{})
	if err != nil {
		t.Fatal(err)
	}
	checkGolden(t, "router", d)

	learned, err := Build(testSource(), BuildOptions{Samples: goldenSamples()})
	if err != nil {
		t.Fatal(err)
	}
	checkGolden(t, "router-learned", learned)
}

// TestBuildIgnoresEntryOrder: the order of entries within the Source, and
// duplicates, do not change the bytes; only texts and weights do.
func TestBuildIgnoresEntryOrder(t *testing.T) {
	src := testSource()
	want, err := Build(src, BuildOptions{Samples: goldenSamples()})
	if err != nil {
		t.Fatal(err)
	}
	rev := func(e []Entry) []Entry {
		out := make([]Entry, 0, len(e))
		for i := len(e) - 1; i >= 0; i-- {
			out = append(out, e[i])
		}
		return out
	}
	shuffled := Source{
		Methods:   rev(src.Methods),
		Events:    rev(src.Events),
		Fields:    rev(src.Fields),
		Skeletons: rev(src.Skeletons),
		Templates: rev(src.Templates),
	}
	got, err := Build(shuffled, BuildOptions{Samples: goldenSamples()})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got.Bytes(), want.Bytes()) || got.ID() != want.ID() {
		t.Fatal("reordering the entries changed the dictionary")
	}
}

// TestBuildOrdersByWeight: heavier entries come later, nearer the message;
// equal weights fall back to kind, then bytes.
func TestBuildOrdersByWeight(t *testing.T) {
	d, err := Build(Source{
		Methods: []Entry{{"room/join", 5}, {"room/leave", 1}},
		Events:  []Entry{{"room/joined", 5}},
		Fields:  []Entry{{"id", 100}},
	}, BuildOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want := `room/leaveroom/joinroom/joined"id":`
	if got := string(d.Bytes()); got != want {
		t.Fatalf("got %q, want %q", got, want)
	}
}

// TestBuildMergesDuplicates: one text named twice is written once, with
// the weights added.
func TestBuildMergesDuplicates(t *testing.T) {
	d, err := Build(Source{
		Methods: []Entry{{"user/presence", 2}, {"a/b", 3}},
		Events:  []Entry{{"user/presence", 2}},
	}, BuildOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(d.Bytes()), "a/buser/presence"; got != want {
		t.Fatalf("got %q, want %q", got, want)
	}
}

// TestBuildCutsFront: past the cap the least frequent bytes, at the
// front, go.
func TestBuildCutsFront(t *testing.T) {
	full, err := Build(testSource(), BuildOptions{})
	if err != nil {
		t.Fatal(err)
	}
	capped, err := Build(testSource(), BuildOptions{MaxSize: 100})
	if err != nil {
		t.Fatal(err)
	}
	if capped.Len() != 100 || !bytes.HasSuffix(full.Bytes(), capped.Bytes()) {
		t.Fatalf("capped dictionary is %d bytes, not the last 100 of the full one", capped.Len())
	}

	var big Source
	for i := range 5000 {
		big.Methods = append(big.Methods, Entry{Text: fmt.Sprintf("unit%04d/method", i)})
	}
	d, err := Build(big, BuildOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if d.Len() != MaxSize {
		t.Fatalf("default cap: %d bytes, want %d", d.Len(), MaxSize)
	}
}

func TestBuildRejects(t *testing.T) {
	cases := map[string]struct {
		src  Source
		opts BuildOptions
	}{
		"negative weight": {Source{Methods: []Entry{{"a/b", -1}}}, BuildOptions{}},
		"cap too large":   {testSource(), BuildOptions{MaxSize: MaxSize + 1}},
		"negative cap":    {testSource(), BuildOptions{MaxSize: -1}},
	}
	for name, c := range cases {
		if _, err := Build(c.src, c.opts); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
	if _, err := Build(Source{Methods: Entries("")}, BuildOptions{}); !errors.Is(err, ErrEmpty) {
		t.Errorf("empty source: %v, want ErrEmpty", err)
	}
}

func TestFieldsAreJSONKeys(t *testing.T) {
	d, err := Build(Source{Fields: Entries("id", `a"b`, "<x>")}, BuildOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want := `"<x>":"a\"b":"id":`
	want = strings.Replace(want, `"<x>":`, `"\u003cx\u003e":`, 1)
	if got := string(d.Bytes()); got != want {
		t.Fatalf("got %s, want %s", got, want)
	}
}

// TestRFC8878_5_ZstdDictionaryID: the id a zstd frame names its
// dictionary by stays out of the ranges RFC 8878 §5 reserves (0 to 32767
// for a registrar, 2^31 and above): at the ends of the hash bits it is
// made from, and for many dictionaries.
func TestRFC8878_5_ZstdDictionaryID(t *testing.T) {
	for _, bits := range []uint32{0, 1, 1<<15 - 1, 1 << 15, 1<<31 - 1, 1 << 31, 1<<32 - 1} {
		var d Dictionary
		binary.BigEndian.PutUint32(d.sum[8:12], bits)
		if id := d.zstdID(); id < 1<<15 || id >= 1<<31 {
			t.Fatalf("hash bits %#x: zstd id %d outside [32768, 2^31)", bits, id)
		}
	}
	for i := range 10000 {
		d, err := New([]byte(fmt.Sprintf("dictionary %d", i)))
		if err != nil {
			t.Fatal(err)
		}
		if id := d.zstdID(); id < 1<<15 || id >= 1<<31 {
			t.Fatalf("dictionary %d: zstd id %d outside [32768, 2^31)", i, id)
		}
	}
}

func TestNewAndID(t *testing.T) {
	b := []byte("some dictionary bytes")
	d, err := New(b)
	if err != nil {
		t.Fatal(err)
	}
	b[0] = 'X'
	if d.Bytes()[0] != 's' {
		t.Fatal("New did not copy its input")
	}
	if len(d.ID()) != 16 {
		t.Fatalf("id %q is not 16 characters", d.ID())
	}
	if _, err := hex.DecodeString(d.ID()); err != nil {
		t.Fatalf("id %q is not hex", d.ID())
	}
	other, _ := New([]byte("some dictionary bytez"))
	if other.ID() == d.ID() {
		t.Fatal("different bytes, same id")
	}
	if _, err := New(make([]byte, MaxSize+1)); err == nil {
		t.Fatal("New accepted more than MaxSize bytes")
	}
	if _, err := New(nil); !errors.Is(err, ErrEmpty) {
		t.Fatalf("New(nil): %v", err)
	}
}

// TestLearnedSegmentsHelp: learning adds byte strings the names alone do
// not have, and they make the test messages smaller.
func TestLearnedSegmentsHelp(t *testing.T) {
	plain, err := Build(testSource(), BuildOptions{})
	if err != nil {
		t.Fatal(err)
	}
	learned, err := Build(testSource(), BuildOptions{Samples: routerSamples(7, 1000)})
	if err != nil {
		t.Fatal(err)
	}
	if learned.Len() <= plain.Len() {
		t.Fatalf("learning added nothing: %d vs %d bytes", learned.Len(), plain.Len())
	}
	a, b := NewDeflate(plain, CodecOptions{}), NewDeflate(learned, CodecOptions{})
	for _, m := range [][]byte{eventMessage(), historyAnswer()} {
		pa, _ := a.AppendCompress(nil, m)
		pb, _ := b.AppendCompress(nil, m)
		if len(pb) >= len(pa) {
			t.Errorf("%d-byte message: %d bytes with learning, %d without", len(m), len(pb), len(pa))
		}
	}
}

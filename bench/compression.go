package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"time"

	"github.com/hotpath-go/hotpath/compat"
	"github.com/hotpath-go/hotpath/deflatecache"
	"github.com/hotpath-go/hotpath/dictionary"
	"github.com/hotpath-go/hotpath/wsframe"
	"github.com/klauspost/compress/flate"
	"github.com/klauspost/compress/zstd"
)

// A compressor is one way to compress a stream of messages one message at
// a time, as a connection sends them. compress appends the compressed form
// of msg (or msg itself, when the method sends it uncompressed); check
// decompresses a whole pass over the corpus, in order, and reports a
// message that does not come back.
type compressor struct {
	compress func(dst, msg []byte) []byte
	check    func(corpus, compressed [][]byte) error
}

// A compressionRow is one method, built for a corpus and the dictionary of
// its router.
type compressionRow struct {
	Library string
	Role    Role
	New     func(dict *dictionary.Dictionary) (compressor, error)
}

var compressionRows []compressionRow

func init() {
	for level := 1; level <= 6; level++ {
		compressionRows = append(compressionRows, compressionRow{
			Library: fmt.Sprintf("deflate L%d, one-shot", level), Role: Peer,
			New: func(*dictionary.Dictionary) (compressor, error) { return flateCompressor(level, false) },
		})
	}
	compressionRows = append(compressionRows,
		compressionRow{Library: "deflate L1, context takeover", Role: Peer, New: func(*dictionary.Dictionary) (compressor, error) { return flateCompressor(1, true) }},
		compressionRow{Library: "zstd, one-shot", Role: Peer, New: func(*dictionary.Dictionary) (compressor, error) { return zstdOneShot() }},
		compressionRow{Library: "hotpath dictionary (deflate)", Role: Ours, New: dictCompressor(false)},
		compressionRow{Library: "hotpath dictionary (zstd)", Role: Ours, New: dictCompressor(true)},
		compressionRow{Library: "hotpath deflatecache, one-shot", Role: Ours, New: deflatecacheCompressor(false)},
		compressionRow{Library: "hotpath deflatecache, context takeover", Role: Ours, New: deflatecacheCompressor(true)},
	)
	register(&Scenario{
		Number: 6,
		Name:   "compression",
		Title:  "Compression of JSON messages",
		About: "Realtime JSON messages compressed one at a time, in order, as a connection sends them: " +
			"a 90 B ticker event, a 1.4 KB chat message, a 27 KB room snapshot and a 255 KB dashboard " +
			"dataset, each a corpus of distinct messages of one schema. *one-shot* compresses every " +
			"message alone (permessage-deflate without context takeover, what gorilla/websocket and " +
			"browsers' default servers do), levels 1 to 6 of klauspost/compress, with the sync-flush " +
			"tail RFC 7692 removes; *context takeover* keeps one compressor per connection so a " +
			"message refers back to the earlier ones (klauspost's, and deflatecache's, which keeps " +
			"1 KiB of history); *hotpath dictionary* compresses each message alone against the " +
			"preset dictionary compat builds from the router that declares these message types " +
			"(compat.RouterDictionary), in deflate or zstd. ratio is the corpus's bytes over its " +
			"compressed bytes; MB/s is input compressed per second on one goroutine. Every row's " +
			"output is decompressed and compared before timing.",
		Metrics: []Metric{
			{Key: "ratio", Unit: "ratio ×", Better: HigherIsBetter},
			{Key: "rate", Unit: "MB/s", Better: HigherIsBetter},
			{Key: "allocs", Unit: "allocs/msg", Better: LowerIsBetter},
		},
		Cases: compressionCases,
	})
}

func compressionCases(cfg Config) ([]Case, error) {
	target := 100 * time.Millisecond
	if cfg.Quick {
		target = 20 * time.Millisecond
	}
	dict, err := compat.RouterDictionary(compressionRouter())
	if err != nil {
		return nil, err
	}
	var cases []Case
	for _, k := range jsonKinds {
		corpus := k.corpus()
		c := Case{Label: k.label}
		for _, row := range compressionRows {
			c.Rows = append(c.Rows, Row{Library: row.Library, Role: row.Role, Open: func(context.Context) (Instance, error) {
				return openCompressionRow(row, dict, corpus, target)
			}})
		}
		cases = append(cases, c)
	}
	return cases, nil
}

func openCompressionRow(row compressionRow, dict *dictionary.Dictionary, corpus [][]byte, target time.Duration) (Instance, error) {
	comp, err := row.New(dict)
	if err != nil {
		return nil, err
	}
	// One pass in order, checked: the ratio is that pass's, and it does
	// not change from trial to trial.
	var in, out int
	compressed := make([][]byte, len(corpus))
	for i, m := range corpus {
		compressed[i] = comp.compress(nil, m)
		in, out = in+len(m), out+len(compressed[i])
	}
	if err := comp.check(corpus, compressed); err != nil {
		return nil, err
	}
	ratio := float64(in) / float64(out)
	var buf []byte
	next := 0
	return TrialFunc(func(context.Context) (Outcome, error) {
		var bytesIn int
		res, err := measureLoop(target, 10_000_000, func(n int) error {
			bytesIn = 0
			for range n {
				m := corpus[next]
				if next++; next == len(corpus) {
					next = 0
				}
				buf = comp.compress(buf[:0], m)
				bytesIn += len(m)
			}
			return nil
		})
		if err != nil {
			return Outcome{}, err
		}
		return Outcome{Values: map[string]float64{
			"ratio":  ratio,
			"rate":   float64(bytesIn) / float64(res.N) / res.NsPerOp * 1e3,
			"allocs": res.AllocsPerOp,
		}}, nil
	}), nil
}

// pmdTail is the sync-flush marker permessage-deflate strips from every
// message and the receiver appends again (RFC 7692 §7.2.1, §7.2.2).
var pmdTail = []byte{0, 0, 0xff, 0xff}

// flateCompressor is klauspost/compress/flate at level: one-shot resets
// the compressor for every message; takeover keeps one for the stream.
// Each message ends with a sync flush whose tail is removed, as
// permessage-deflate sends it.
func flateCompressor(level int, takeover bool) (compressor, error) {
	var sink bytes.Buffer
	w, err := flate.NewWriter(&sink, level)
	if err != nil {
		return compressor{}, err
	}
	compress := func(dst, msg []byte) []byte {
		sink.Reset()
		if !takeover {
			w.Reset(&sink)
		}
		_, _ = w.Write(msg)
		_ = w.Flush()
		return append(dst, bytes.TrimSuffix(sink.Bytes(), pmdTail)...)
	}
	check := func(corpus, compressed [][]byte) error {
		var stream bytes.Buffer
		zr := flate.NewReader(&stream)
		for i, c := range compressed {
			if !takeover {
				stream.Reset()
				_ = zr.(flate.Resetter).Reset(&stream, nil)
			}
			stream.Write(c)
			stream.Write(pmdTail)
			got := make([]byte, len(corpus[i]))
			if _, err := io.ReadFull(zr, got); err != nil || !bytes.Equal(got, corpus[i]) {
				return fmt.Errorf("message %d does not inflate back (%v)", i, err)
			}
		}
		return nil
	}
	return compressor{compress: compress, check: check}, nil
}

// zstdOneShot is klauspost/compress/zstd at its fastest level, every
// message a frame of its own, without a dictionary.
func zstdOneShot() (compressor, error) {
	enc, err := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedFastest), zstd.WithEncoderConcurrency(1))
	if err != nil {
		return compressor{}, err
	}
	dec, err := zstd.NewReader(nil, zstd.WithDecoderConcurrency(1))
	if err != nil {
		return compressor{}, err
	}
	return compressor{
		compress: func(dst, msg []byte) []byte { return enc.EncodeAll(msg, dst) },
		check: func(corpus, compressed [][]byte) error {
			for i, c := range compressed {
				got, err := dec.DecodeAll(c, nil)
				if err != nil || !bytes.Equal(got, corpus[i]) {
					return fmt.Errorf("message %d does not decode back (%v)", i, err)
				}
			}
			return nil
		},
	}, nil
}

// dictCompressor is hotpath's dictionary codec on compat's router
// dictionary. A message it leaves uncompressed (it would not shrink) is
// counted at its own size.
func dictCompressor(useZstd bool) func(*dictionary.Dictionary) (compressor, error) {
	return func(d *dictionary.Dictionary) (compressor, error) {
		opts := dictionary.CodecOptions{Threshold: 1, MaxDecoded: 1 << 20}
		var codec dictionary.Codec = dictionary.NewDeflate(d, opts)
		if useZstd {
			z, err := dictionary.NewZstd(d, opts)
			if err != nil {
				return compressor{}, err
			}
			codec = z
		}
		return compressor{
			compress: func(dst, msg []byte) []byte {
				if out, ok := codec.AppendCompress(dst, msg); ok {
					return out
				}
				return append(dst, msg...)
			},
			check: func(corpus, compressed [][]byte) error {
				for i, c := range compressed {
					if bytes.Equal(c, corpus[i]) {
						continue // sent as it is
					}
					got, err := codec.AppendDecompress(nil, c)
					if err != nil || !bytes.Equal(got, corpus[i]) {
						return fmt.Errorf("message %d does not decode back (%v)", i, err)
					}
				}
				return nil
			},
		}, nil
	}
}

// deflatecacheCompressor is hotpath's permessage-deflate at level 1 with
// the full window, as a server compresses what it sends one connection:
// one-shot (server_no_context_takeover) or with context takeover.
func deflatecacheCompressor(takeover bool) func(*dictionary.Dictionary) (compressor, error) {
	return func(*dictionary.Dictionary) (compressor, error) {
		params := deflatecache.Params{ServerNoContextTakeover: !takeover, ClientNoContextTakeover: true}
		opts := deflatecache.Options{Level: 1, MinSize: 1, TakeoverMinSize: 1}
		srv, err := deflatecache.NewConn(params, wsframe.Server, opts)
		if err != nil {
			return compressor{}, err
		}
		raw := map[string]bool{} // messages sent uncompressed, by content
		return compressor{
			compress: func(dst, msg []byte) []byte {
				if out, ok := srv.AppendCompressed(dst, msg); ok {
					return out
				}
				raw[string(msg)] = true
				return append(dst, msg...)
			},
			check: func(corpus, compressed [][]byte) error {
				cli, err := deflatecache.NewConn(params, wsframe.Client, opts)
				if err != nil {
					return err
				}
				defer cli.Close()
				for i, c := range compressed {
					if raw[string(corpus[i])] && bytes.Equal(c, corpus[i]) {
						continue
					}
					got, err := cli.Inflate(nil, c, 1<<20)
					if err != nil || !bytes.Equal(got, corpus[i]) {
						return fmt.Errorf("message %d does not inflate back (%v)", i, err)
					}
				}
				return nil
			},
		}, nil
	}
}

// The message types of the corpora, declared on a router so that compat
// builds their dictionary as a server and its clients would.
type (
	tickEvent struct {
		Type   string  `json:"type"`
		Symbol string  `json:"sym"`
		Price  float64 `json:"px"`
		Qty    int     `json:"qty"`
		Side   string  `json:"side"`
		Seq    int     `json:"seq"`
		Time   int64   `json:"ts"`
	}
	chatUser struct {
		ID     int    `json:"id"`
		Name   string `json:"name"`
		Avatar string `json:"avatar"`
		Status string `json:"status"`
	}
	chatMessage struct {
		Type      string         `json:"type"`
		Room      string         `json:"room"`
		ID        string         `json:"id"`
		User      chatUser       `json:"user"`
		Sent      string         `json:"sent"`
		Text      string         `json:"text"`
		Mentions  []chatUser     `json:"mentions"`
		Reactions map[string]int `json:"reactions"`
		ReplyTo   string         `json:"replyTo"`
		Edited    bool           `json:"edited"`
	}
	roomMember struct {
		User     chatUser `json:"user"`
		Role     string   `json:"role"`
		Joined   string   `json:"joined"`
		LastSeen string   `json:"lastSeen"`
		Typing   bool     `json:"typing"`
	}
	roomSnapshot struct {
		Type    string       `json:"type"`
		Room    string       `json:"room"`
		Topic   string       `json:"topic"`
		Members []roomMember `json:"members"`
	}
	dataPoint struct {
		Time   int64   `json:"t"`
		Metric string  `json:"metric"`
		Host   string  `json:"host"`
		Region string  `json:"region"`
		Value  float64 `json:"value"`
		Min    float64 `json:"min"`
		Max    float64 `json:"max"`
		Count  int     `json:"count"`
	}
	dashboardData struct {
		Type   string      `json:"type"`
		Panel  string      `json:"panel"`
		Points []dataPoint `json:"points"`
	}
)

func compressionRouter() *compat.Router {
	r := compat.NewRouter()
	compat.HandleEvent(r, "ticker/tick", func(context.Context, tickEvent) {})
	compat.Handle(r, "chat/send", func(_ context.Context, m chatMessage) (chatMessage, error) { return m, nil })
	compat.Handle(r, "room/snapshot", func(_ context.Context, room string) (roomSnapshot, error) { return roomSnapshot{}, nil })
	compat.Handle(r, "dashboard/query", func(_ context.Context, panel string) (dashboardData, error) { return dashboardData{}, nil })
	return r
}

// jsonKind is one corpus: distinct messages of one type near a size.
type jsonKind struct {
	label string
	count int
	make  func(rng *rand.Rand) any
}

var jsonKinds = []jsonKind{
	{label: "90 B ticker event", count: 256, make: func(rng *rand.Rand) any {
		return tickEvent{Type: "tick", Symbol: pick(rng, symbols), Price: float64(rng.IntN(100000)) / 100, Qty: rng.IntN(1000),
			Side: pick(rng, []string{"buy", "sell"}), Seq: 100000 + rng.IntN(900000), Time: 1764684309123 + rng.Int64N(1e6)}
	}},
	{label: "1.4 KB chat message", count: 64, make: func(rng *rand.Rand) any {
		return makeChat(rng, 1400)
	}},
	{label: "27 KB room snapshot", count: 16, make: func(rng *rand.Rand) any {
		s := roomSnapshot{Type: "snapshot", Room: "lobby", Topic: "release planning for the realtime gateway"}
		for size := len(mustJSON(s)); size < 27_000; {
			m := roomMember{User: makeUser(rng), Role: pick(rng, []string{"member", "moderator", "owner", "guest"}),
				Joined: makeTime(rng), LastSeen: makeTime(rng), Typing: rng.IntN(10) == 0}
			s.Members = append(s.Members, m)
			size += len(mustJSON(m)) + 1
		}
		return s
	}},
	{label: "255 KB dashboard dataset", count: 4, make: func(rng *rand.Rand) any {
		d := dashboardData{Type: "series", Panel: "latency-p99"}
		t := int64(1764684300)
		for size := len(mustJSON(d)); size < 255_000; {
			t += 10
			v := float64(rng.IntN(50000)) / 100
			p := dataPoint{Time: t, Metric: pick(rng, []string{"http.latency.p99", "ws.rtt.p50", "cpu.user", "mem.rss"}),
				Host: fmt.Sprintf("edge-%02d", rng.IntN(24)), Region: pick(rng, []string{"eu-west", "us-east", "ap-south"}),
				Value: v, Min: v * 0.8, Max: v * 1.3, Count: rng.IntN(5000)}
			d.Points = append(d.Points, p)
			size += len(mustJSON(p)) + 1
		}
		return d
	}},
}

func (k jsonKind) corpus() [][]byte { return k.corpusN(k.count) }

// corpusN is the first n messages of the corpus.
func (k jsonKind) corpusN(n int) [][]byte {
	rng := rand.New(rand.NewPCG(1, uint64(len(k.label))))
	out := make([][]byte, n)
	for i := range out {
		out[i] = mustJSON(k.make(rng))
	}
	return out
}

var (
	symbols   = []string{"ACME", "GLOBX", "INITECH", "UMBRL", "STARK", "WAYNE", "TYRELL", "CYBDN"}
	names     = []string{"ada", "grace", "linus", "ken", "barbara", "dennis", "margaret", "edsger", "frances", "alan"}
	textWords = []string{"the", "deploy", "is", "green", "on", "staging", "can", "someone", "review", "my", "patch", "for", "websocket",
		"backpressure", "latency", "looks", "better", "after", "we", "moved", "to", "one", "writev", "per", "turn", "thanks", "ship", "it"}
)

func pick(rng *rand.Rand, xs []string) string { return xs[rng.IntN(len(xs))] }

func makeUser(rng *rand.Rand) chatUser {
	id := rng.IntN(100000)
	name := pick(rng, names) + "." + pick(rng, names)
	return chatUser{ID: id, Name: name, Avatar: fmt.Sprintf("https://cdn.example.com/avatars/%d.png", id), Status: pick(rng, []string{"online", "away", "busy"})}
}

func makeTime(rng *rand.Rand) string {
	return time.Unix(1764684309+rng.Int64N(86400*30), 0).UTC().Format(time.RFC3339)
}

func makeChat(rng *rand.Rand, size int) chatMessage {
	m := chatMessage{Type: "message", Room: "lobby", ID: fmt.Sprintf("m-%016x", rng.Uint64()), User: makeUser(rng), Sent: makeTime(rng),
		Reactions: map[string]int{"+1": rng.IntN(9), "heart": rng.IntN(5), "eyes": rng.IntN(3)}, ReplyTo: fmt.Sprintf("m-%016x", rng.Uint64())}
	for range 3 {
		m.Mentions = append(m.Mentions, makeUser(rng))
	}
	for len(mustJSON(m)) < size {
		m.Text += pick(rng, textWords) + " "
	}
	return m
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(errors.New("bench: corpus type does not marshal: " + err.Error()))
	}
	return b
}

package dictionary

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"slices"
)

// Entry is one string the router knows and how often it is seen.
type Entry struct {
	// Text is the string as it appears on the wire (for Fields: the bare
	// name, which Build renders as a JSON object key).
	Text string
	// Weight is how often Text occurs, on any scale consistent within one
	// Source, e.g. how many of 1000 typical messages contain it. Zero means
	// unknown: placed with the least frequent, or, when BuildOptions has
	// Samples, measured as the number of samples that contain Text (give
	// explicit weights on that scale then).
	Weight int
}

// Entries turns plain strings into entries of unknown weight.
func Entries(texts ...string) []Entry {
	out := make([]Entry, len(texts))
	for i, t := range texts {
		out[i] = Entry{Text: t}
	}
	return out
}

// Source is the introspection of a router: what it knows about the messages
// it will send and receive.
type Source struct {
	// Methods are call names ("unit/method"), written as they are.
	Methods []Entry
	// Events are event names, written as they are.
	Events []Entry
	// Fields are field names of request, response and event types (the
	// JSON struct tags). Each is written as a JSON object key, `"name":`,
	// because that is how it appears in a message: the quotes and colon
	// make even a two-letter name long enough for deflate to match.
	Fields []Entry
	// Skeletons are the fixed leading bytes of each packet kind of the
	// envelope, written as they are.
	Skeletons []Entry
	// Templates are whole example messages (for instance the encoding of
	// a zero value of each request, response and event type, envelope
	// included), written as they are. They carry the order and punctuation
	// between names, which names alone do not.
	Templates []Entry
}

// BuildOptions tune Build. The zero value is the default.
type BuildOptions struct {
	// MaxSize caps the dictionary; the least frequent bytes are cut from
	// the front. 0 means MaxSize, the largest allowed.
	MaxSize int
	// Samples are real messages to learn from (optional): byte strings
	// common to many of them join the dictionary, and entries of unknown
	// weight are weighted by how many samples contain them. At most
	// MaxSampleBytes of samples are read.
	Samples [][]byte
}

// The kinds of entry, in the order that breaks ties of weight: with no
// weights at all, skeletons (one per packet) end up nearest the message,
// then field names, event and method names, learned segments and templates.
const (
	rankTemplate = iota
	rankLearned
	rankMethod
	rankEvent
	rankField
	rankSkeleton
)

type item struct {
	text   string
	weight int
	rank   int
}

// Build makes the dictionary of a router. The bytes depend on src and opts
// only (not on map order, the machine or the Go version): entries are
// rendered, identical renderings merged (their weights added), and sorted
// by weight, then kind, then bytes, least frequent first, because deflate
// and zstd reach the end of a dictionary, nearest the message, with the
// shortest distances. Past the cap the front is cut.
func Build(src Source, opts BuildOptions) (*Dictionary, error) {
	maxSize := opts.MaxSize
	if maxSize == 0 {
		maxSize = MaxSize
	}
	if maxSize < 0 || maxSize > MaxSize {
		return nil, fmt.Errorf("dictionary: BuildOptions.MaxSize %d is outside 1..%d", opts.MaxSize, MaxSize)
	}

	merged := make(map[string]*item)
	var items []*item
	add := func(text string, weight, rank int) error {
		if weight < 0 {
			return fmt.Errorf("dictionary: entry %q has negative weight %d", text, weight)
		}
		if text == "" {
			return nil
		}
		if it, ok := merged[text]; ok {
			it.weight += weight
			it.rank = max(it.rank, rank)
			return nil
		}
		it := &item{text: text, weight: weight, rank: rank}
		merged[text] = it
		items = append(items, it)
		return nil
	}
	groups := []struct {
		entries []Entry
		rank    int
		render  func(string) string
	}{
		{src.Templates, rankTemplate, nil},
		{src.Methods, rankMethod, nil},
		{src.Events, rankEvent, nil},
		{src.Fields, rankField, jsonKey},
		{src.Skeletons, rankSkeleton, nil},
	}
	for _, g := range groups {
		for _, e := range g.entries {
			text := e.Text
			if g.render != nil && text != "" {
				text = g.render(text)
			}
			if err := add(text, e.Weight, g.rank); err != nil {
				return nil, err
			}
		}
	}

	if len(opts.Samples) > 0 {
		samples := limitSamples(opts.Samples)
		for _, it := range items {
			if it.weight == 0 {
				it.weight = containing(samples, it.text)
			}
		}
		for _, seg := range learn(samples, maxSize) {
			if err := add(seg.text, seg.weight, rankLearned); err != nil {
				return nil, err
			}
		}
	}

	// items is in insertion order, which depends only on src; the sort key
	// ends with the bytes, which are unique after merging, so the order is
	// total and no tie is left to the sort algorithm.
	slices.SortFunc(items, func(a, b *item) int {
		return cmp.Or(
			cmp.Compare(a.weight, b.weight),
			cmp.Compare(a.rank, b.rank),
			cmp.Compare(a.text, b.text),
		)
	})
	var buf bytes.Buffer
	for _, it := range items {
		buf.WriteString(it.text)
	}
	data := buf.Bytes()
	if len(data) > maxSize {
		data = data[len(data)-maxSize:]
	}
	return New(data)
}

// jsonKey renders a field name the way encoding/json writes an object key.
func jsonKey(name string) string {
	b, err := json.Marshal(name)
	if err != nil {
		// A Go string always marshals; keep the name as it is regardless.
		return `"` + name + `":`
	}
	return string(b) + ":"
}

// containing counts the samples that contain text.
func containing(samples [][]byte, text string) int {
	n, b := 0, []byte(text)
	for _, s := range samples {
		if bytes.Contains(s, b) {
			n++
		}
	}
	return n
}

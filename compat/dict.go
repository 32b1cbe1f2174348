package compat

import (
	"errors"
	"reflect"
	"strconv"
	"strings"

	"github.com/hotpath-go/hotpath/compat/wire"
	"github.com/hotpath-go/hotpath/dictionary"
	"github.com/hotpath-go/hotpath/dispatch"
	"github.com/hotpath-go/hotpath/wsframe"
)

// RouterDictionary builds the preset compression dictionary of a router
// (PROTOCOL.md §6): its method, event and field names, the leading bytes of
// the packets that carry them, and the JSON encoding of each request,
// response and event type's zero value. Both ends build it from the same
// registrations (a client from a Router whose handlers it never runs) and
// get the same bytes and id; ends whose routers differ get different ids
// and fall back to plain packets.
func RouterDictionary(r *Router) (*dictionary.Dictionary, error) {
	in := r.Introspect()
	var src dictionary.Source
	src.Methods = dictionary.Entries(in.Methods...)
	src.Events = dictionary.Entries(in.Events...)
	for _, f := range in.Fields {
		src.Fields = append(src.Fields, dictionary.Entry{Text: f.Name, Weight: f.Count})
	}
	for _, name := range in.Methods {
		src.Skeletons = append(src.Skeletons, dictionary.Entry{Text: string(wire.AppendCall(nil, dispatch.KindCall, 1, name, 0, nil)[2:])})
	}
	r.mu.Lock()
	var types []reflect.Type
	for _, m := range r.methods {
		types = append(types, m.req, m.resp)
	}
	for _, e := range r.events {
		types = append(types, e.typ)
	}
	r.mu.Unlock()
	seen := map[string]bool{}
	for _, t := range types {
		if isRaw(t) {
			continue
		}
		b, err := JSON.AppendMarshal(nil, reflect.New(t).Elem().Interface())
		if err != nil || len(b) < 8 || seen[string(b)] {
			continue
		}
		seen[string(b)] = true
		src.Templates = append(src.Templates, dictionary.Entry{Text: string(b)})
	}
	return dictionary.Build(src, dictionary.BuildOptions{})
}

// serverDictionary holds the server's dictionary codecs, shared by every
// connection that negotiated one.
type serverDictionary struct {
	id      string
	deflate *dictCodec
	zstd    *dictCodec
}

func newServerDictionary(r *Router, maxMessage int64) (*serverDictionary, error) {
	d, err := RouterDictionary(r)
	if err != nil {
		return nil, err
	}
	opts := dictionary.CodecOptions{MaxDecoded: maxDecodedBody(maxMessage)}
	z, err := dictionary.NewZstd(d, opts)
	if err != nil {
		return nil, err
	}
	return &serverDictionary{
		id:      d.ID(),
		deflate: &dictCodec{name: "deflate:" + d.ID(), codec: dictionary.NewDeflate(d, opts)},
		zstd:    &dictCodec{name: "zstd:" + d.ID(), codec: z},
	}, nil
}

// maxDecodedBody is the largest body a compressed packet may inflate to
// on an end whose message limit is maxMessage (PROTOCOL.md §6): the limit
// is the packet's, and the head byte is not compressed. Capped at
// maxMessage, a packet one byte over the limit was taken compressed where
// the same packet plain closed the connection with 1009.
func maxDecodedBody(maxMessage int64) int {
	return int(max(maxMessage-1, 1)) // 0 would be the codec's default
}

// choose returns the first offered codec ("deflate:<id>", "zstd:<id>")
// that the server has with the same dictionary id.
func (sd *serverDictionary) choose(offers string) *dictCodec {
	for _, o := range strings.Split(offers, ",") {
		switch strings.TrimSpace(o) {
		case sd.deflate.name:
			return sd.deflate
		case sd.zstd.name:
			return sd.zstd
		}
	}
	return nil
}

// dictCodec is one dictionary codec with the packet framing around it.
type dictCodec struct {
	name  string
	codec dictionary.Codec
}

// compressPacket returns pkt with its body compressed, after frame
// headroom, in a scratch buffer that release returns; ok is false when the
// body is too short or would not shrink.
func (d *dictCodec) compressPacket(pkt []byte) (b []byte, release func(), ok bool) {
	bp := scratchBufs.Get().(*[]byte)
	b = append(beginFrame(*bp), pkt[0]|wire.CompressedBit)
	b, ok = d.codec.AppendCompress(b, pkt[1:])
	*bp = b[:0]
	if !ok {
		scratchBufs.Put(bp)
		return nil, nil, false
	}
	return b, func() { scratchBufs.Put(bp) }, true
}

// decompress inflates a compressed body into a scratch buffer that release
// returns. The codec's cap, the message limit, stops a bomb before it
// allocates past the limit.
func (d *dictCodec) decompress(body []byte) ([]byte, func(), error) {
	bp := scratchBufs.Get().(*[]byte)
	out, err := d.codec.AppendDecompress((*bp)[:0], body)
	*bp = out[:0]
	if err != nil {
		scratchBufs.Put(bp)
		return nil, nil, dictError(err)
	}
	return out, func() { scratchBufs.Put(bp) }, nil
}

func dictError(err error) error {
	if errors.Is(err, dictionary.ErrTooLarge) {
		return &CloseError{Code: wsframe.CloseMessageTooBig, Reason: "HP_ERR_INFLATED_TOO_LARGE"}
	}
	return &CloseError{Code: wsframe.CloseInvalidPayload, Reason: "HP_ERR_BAD_COMPRESSED_BODY"}
}

// onCapabilities answers a client's capabilities (PROTOCOL.md §4.9) and,
// when both hold the same dictionary, turns dictionary compression on for
// what follows the answer.
func (p *Peer) onCapabilities(body []byte) error {
	pk, err := decode(dispatch.KindCapabilities, body)
	if err != nil {
		return err
	}
	if p.sawCapabilities {
		return errRepeatedCapabilities
	}
	p.sawCapabilities = true
	s := p.srv
	var chosen *dictCodec
	codecOffered := false
	for k, v := range pk.Pairs() {
		switch string(k) {
		case "dict":
			if s.dict != nil {
				chosen = s.dict.choose(string(v))
			}
		case "codec":
			codecOffered = true
			if !offers(string(v), p.codec.Name()) {
				return errUnsupportedCodec
			}
		case "maxMessage":
			if n, err := strconv.ParseInt(string(v), 10, 64); err == nil && n > 0 {
				p.clientMaxMessage.Store(n)
			}
		}
	}
	if !codecOffered && !offers("", p.codec.Name()) {
		return errUnsupportedCodec // an absent offer is JSON's
	}
	lim := s.opts.Limits
	pairs := wire.AppendPair(nil, "codec", p.codec.Name())
	pairs = wire.AppendPair(pairs, "maxMessage", strconv.FormatInt(lim.MaxMessageSize, 10))
	pairs = wire.AppendPair(pairs, "maxInFlight", strconv.Itoa(lim.MaxInFlight))
	pairs = wire.AppendPair(pairs, "maxBatch", strconv.Itoa(lim.MaxBatch))
	pairs = wire.AppendPair(pairs, "server", "hotpath/"+Version)
	n := uint32(5)
	// maxEmit only when it bounds more than maxMessage does: without it a
	// client's emit over the bound was dropped unseen (an emit has no
	// answer), and its Emit returned success. Left out otherwise, so that
	// a server without the bound answers as before; absent, a client
	// holds an emit to maxMessage alone, as it holds an older server's.
	if m := lim.MaxEmitSize; m > 0 && int64(m) < lim.MaxMessageSize {
		pairs = wire.AppendPair(pairs, "maxEmit", strconv.Itoa(m))
		n++
	}
	if chosen != nil {
		pairs = wire.AppendPair(pairs, "dict", chosen.name)
		n++
	}
	b := wire.Append(beginFrame(nil), &wire.Packet{Kind: dispatch.KindCapabilities, Count: n, Payload: pairs})
	p.sendPacket(b)
	if chosen != nil {
		p.dict.Store(chosen)
	}
	return nil
}

// errRepeatedCapabilities ends a connection whose client sent
// Capabilities a second time (PROTOCOL.md §4.9). Answered, a repeat could
// switch the dictionary codec while packets compressed with the old one
// are still on their way, both ways; and neither reference client ever
// sends one.
var errRepeatedCapabilities = &CloseError{Code: wsframe.ClosePolicyViolation, Reason: "HP_ERR_REPEATED_CAPABILITIES"}

// errUnsupportedCodec ends a connection whose peer does not speak this
// end's payload codec (PROTOCOL.md §4.9): its payloads could not be
// decoded, and every call would fail as invalid params.
var errUnsupportedCodec = &CloseError{Code: wsframe.ClosePolicyViolation, Reason: "HP_ERR_UNSUPPORTED_CODEC"}

// offers reports whether the comma-separated list of a codec capability
// names codec. An empty list is JSON's, the default.
func offers(list, codec string) bool {
	if list == "" {
		return codec == JSON.Name()
	}
	for name := range strings.SplitSeq(list, ",") {
		if strings.TrimSpace(name) == codec {
			return true
		}
	}
	return false
}

// Version is the version of this server, sent in capabilities.
const Version = "0.1.0"

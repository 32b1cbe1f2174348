package compat

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"

	"github.com/hotpath-go/hotpath/compat/wire"
	"github.com/hotpath-go/hotpath/dictionary"
	"github.com/hotpath-go/hotpath/dispatch"
	"github.com/hotpath-go/hotpath/wsframe"
	"github.com/pion/webrtc/v4"
)

// datagramServer is a server with an event handler, so that Event
// datagrams reach a handler, and a dictionary, so that compressed ones can
// be negotiated.
func datagramServer(tb testing.TB) *Server {
	r := testRouter()
	HandleEvent(r, "note", func(ctx context.Context, v echoReq) {})
	s, err := NewServer(Options{Router: r, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		tb.Fatal(err)
	}
	if s.dict == nil {
		tb.Fatal("the test router builds no dictionary")
	}
	return s
}

// wantDatagram is the close code PROTOCOL.md §8.4 and §6 give for a
// datagram pkt on a connection that negotiated codec (nil: none), 0 for
// one that is taken: an Emit or an Event, well formed once inflated; any
// other kind, a malformed packet or a compressed one without a dictionary
// 1008; a compressed body that does not inflate 1007, or inflates past
// the message limit 1009.
func wantDatagram(pkt []byte, codec dictionary.Codec) wsframe.CloseCode {
	if len(pkt) == 0 {
		return wsframe.ClosePolicyViolation
	}
	body := pkt[1:]
	if pkt[0]&wire.CompressedBit != 0 {
		if codec == nil {
			return wsframe.ClosePolicyViolation
		}
		out, err := codec.AppendDecompress(nil, body)
		switch {
		case errors.Is(err, dictionary.ErrTooLarge):
			return wsframe.CloseMessageTooBig
		case err != nil:
			return wsframe.CloseInvalidPayload
		}
		body = out
	}
	k := dispatch.Kind(pkt[0] &^ wire.CompressedBit)
	if k != dispatch.KindEmit && k != dispatch.KindEvent {
		return wsframe.ClosePolicyViolation
	}
	if _, err := wire.DecodeBody(k, body); err != nil {
		return wsframe.ClosePolicyViolation
	}
	return 0
}

// FuzzDatagram hands any bytes to a server connection as a datagram
// (QUIC, WebTransport, SCTP's unreliable stream, WebRTC's unreliable
// channel), on a connection with no dictionary, the deflate one or the
// zstd one: it must take exactly the datagrams wantDatagram takes and
// refuse the others with the close code wantDatagram gives. The same
// bytes to a client connection must be taken and refused alike.
func FuzzDatagram(f *testing.F) {
	s := datagramServer(f)
	event := wire.Append(nil, &wire.Packet{Kind: dispatch.KindEvent, Name: []byte("note"), Payload: []byte(`{"text":"hi"}`)})
	emit := wire.Append(nil, &wire.Packet{Kind: dispatch.KindEmit, Room: []byte("r"), Name: []byte("note"), Flags: wire.EmitExceptSender, Payload: []byte(`{}`)})
	call := wire.AppendCall(nil, dispatch.KindCall, 1, "echo/say", 0, []byte(`{}`))
	for _, pkt := range [][]byte{event, emit, call, {}, {byte(dispatch.KindEvent)}, event[:len(event)-3]} {
		f.Add(pkt, byte(0))
	}
	for sel, dc := range []*dictCodec{s.dict.deflate, s.dict.zstd} {
		for _, pkt := range [][]byte{event, emit, call} {
			body, ok := dc.codec.AppendCompress(nil, pkt[1:])
			if !ok {
				body = pkt[1:]
			}
			f.Add(append([]byte{pkt[0] | wire.CompressedBit}, body...), byte(sel+1))
		}
	}
	f.Fuzz(func(t *testing.T, pkt []byte, sel byte) {
		p := s.newPeer(newStreamConn(nullTransport{}, struct {
			io.Reader
			io.Writer
		}{bytes.NewReader(nil), io.Discard}, s.opts.Limits), &upgrade{})
		defer p.cancel()
		var codec dictionary.Codec
		switch sel % 3 {
		case 1:
			p.dict.Store(s.dict.deflate)
			codec = s.dict.deflate.codec
		case 2:
			p.dict.Store(s.dict.zstd)
			codec = s.dict.zstd.codec
		}
		want := wantDatagram(pkt, codec)
		err := p.handleDatagram(bytes.Clone(pkt))
		if got := CloseStatus(err); (err == nil) != (want == 0) || (err != nil && got != want) {
			t.Fatalf("server: datagram % x (dictionary %d): %v (close %d), want close %d", pkt, sel%3, err, got, want)
		}

		// The client takes the same datagrams from a server, "as on the
		// server" (clientConn.handleDatagram). It reads the kind before it
		// inflates, so a compressed packet of another kind is 1008 there
		// whatever its body.
		cc := &clientConn{c: &Client{}}
		if codec != nil {
			cc.dict.Store(p.dict.Load())
		}
		if len(pkt) > 0 {
			if k := dispatch.Kind(pkt[0] &^ wire.CompressedBit); k != dispatch.KindEmit && k != dispatch.KindEvent {
				want = wsframe.ClosePolicyViolation
			}
		}
		err = cc.handleDatagram(bytes.Clone(pkt))
		if got := CloseStatus(err); (err == nil) != (want == 0) || (err != nil && got != want) {
			t.Fatalf("client: datagram % x (dictionary %d): %v (close %d), want close %d", pkt, sel%3, err, got, want)
		}
	})
}

// FuzzOfferLines: the bounds on an offer's ICE candidates and media
// sections (maxOfferCandidates, maxOfferMedia) are checked on offerLines'
// counts, and pion acts on what its own parser reads. Whatever SDP pion
// parses, offerLines must count at least the media sections and candidate
// attributes pion sees, or an offer could pass the bounds with more.
func FuzzOfferLines(f *testing.F) {
	offer := "v=0\r\no=- 1 2 IN IP4 127.0.0.1\r\ns=-\r\nt=0 0\r\na=group:BUNDLE 0\r\n" +
		"m=application 9 UDP/DTLS/SCTP webrtc-datachannel\r\nc=IN IP4 0.0.0.0\r\na=mid:0\r\n" +
		"a=ice-ufrag:abcd\r\na=ice-pwd:abcdefghijklmnopqrstuv\r\n" +
		"a=candidate:1 1 udp 2130706431 127.0.0.1 5000 typ host\r\n" +
		"a=sctp-port:5000\r\n"
	f.Add(offer)
	f.Add(strings.ReplaceAll(offer, "\r\n", "\n"))
	f.Add(strings.ReplaceAll(offer, "\r\na=candidate", "\r\n\ra=candidate"))
	f.Add(offer + "m=audio 9 UDP/TLS/RTP/SAVPF 0\r\na=candidate:2 1 udp 1 127.0.0.1 5001 typ host\r\n")
	f.Fuzz(func(t *testing.T, sdp string) {
		parsed, err := (&webrtc.SessionDescription{Type: webrtc.SDPTypeOffer, SDP: sdp}).Unmarshal()
		if err != nil {
			return
		}
		pionCandidates := 0
		for _, a := range parsed.Attributes {
			if a.IsICECandidate() {
				pionCandidates++
			}
		}
		for _, m := range parsed.MediaDescriptions {
			for _, a := range m.Attributes {
				if a.IsICECandidate() {
					pionCandidates++
				}
			}
		}
		candidates, media := offerLines(sdp)
		if candidates < pionCandidates || media < len(parsed.MediaDescriptions) {
			t.Fatalf("offerLines counts %d candidates and %d media sections, pion parses %d and %d: %q",
				candidates, media, pionCandidates, len(parsed.MediaDescriptions), sdp)
		}
	})
}

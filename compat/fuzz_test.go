package compat

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

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
// other kind (read before the body is inflated), a malformed packet or a
// compressed one without a dictionary 1008; a compressed body that does
// not inflate 1007, or inflates past the message limit 1009.
func wantDatagram(pkt []byte, codec dictionary.Codec) wsframe.CloseCode {
	if len(pkt) == 0 {
		return wsframe.ClosePolicyViolation
	}
	k := dispatch.Kind(pkt[0] &^ wire.CompressedBit)
	if k != dispatch.KindEmit && k != dispatch.KindEvent {
		return wsframe.ClosePolicyViolation // whatever the body (§8.4)
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

		// The client takes the same datagrams from a server, and refuses
		// the others with the same code (clientConn.handleDatagram). Its
		// limits are Dial's defaults: a zero MaxInflateRate would drop
		// every compressed datagram.
		cc := &clientConn{c: &Client{opts: ClientOptions{Limits: Limits{}.withDefaults()}}}
		if codec != nil {
			cc.dict.Store(p.dict.Load())
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

// streamPeer is the client end of a stream carrier for FuzzStreamServer:
// it reads the input, then io.EOF (the client's side ended), and keeps
// what the server writes.
type streamPeer struct {
	in  *bytes.Reader
	mu  sync.Mutex
	out []byte
}

func (s *streamPeer) Read(p []byte) (int, error) { return s.in.Read(p) }
func (s *streamPeer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.out = append(s.out, p...)
	return len(p), nil
}

// channelPeer is the client end of a message carrier (a WebRTC data
// channel, PROTOCOL.md §8.1) for FuzzStreamServer: it hands the server
// its messages, then io.EOF, and keeps the messages the server writes.
type channelPeer struct {
	in  [][]byte
	mu  sync.Mutex
	out [][]byte
}

func (c *channelPeer) readMessage(p []byte) (int, bool, error) {
	if len(c.in) == 0 {
		return 0, false, io.EOF
	}
	m := c.in[0]
	if len(m) > len(p) {
		return 0, false, io.ErrShortBuffer
	}
	c.in = c.in[1:]
	return copy(p, m), false, nil
}

func (c *channelPeer) writeMessage(p []byte) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.out = append(c.out, bytes.Clone(p))
	return nil
}

func (c *channelPeer) buffered() int { return 0 }

// FuzzStreamAnswer hands any bytes to readStreamAnswer as what a server
// sent on a binary stream the client opened (PROTOCOL.md §8.5), with a
// message limit of 4 KiB. modelDeframe reads the first packet from the
// protocol's text: when there is one, readStreamAnswer reads it and no
// byte past it (the stream's bytes follow), and takes a Result, returns an
// Error's code, message and data as an *Error, and refuses anything else
// (malformed, compressed, another kind) with 1008; when there is none, it
// fails with the model's close code (1002, 1009), or, for a stream that
// ends first, with io.EOF or io.ErrUnexpectedEOF and no close at all.
func FuzzStreamAnswer(f *testing.F) {
	result := wire.AppendResult(nil, 1, nil)
	refusal := wire.AppendError(nil, 1, wire.CodeNotFound, "stream method not found: x", []byte(`{"a":1}`))
	f.Add(framed(result))
	f.Add(append(framed(result), "the stream's bytes"...))
	f.Add(append(framed(refusal), 1, 2, 3))
	f.Add(framed(wire.AppendResult(nil, 7, []byte(`"x"`))))
	f.Add(framed(append([]byte{result[0] | wire.CompressedBit}, result[1:]...)))
	f.Add(framed(wire.AppendCall(nil, dispatch.KindCall, 1, "m", 0, nil)))
	f.Add(framed(nil))
	f.Add(framed([]byte{0x7f}))
	f.Add(framed(refusal)[:len(framed(refusal))-1])
	f.Add([]byte{})
	f.Add([]byte{0x80})
	f.Add([]byte{0x80, 0x80, 0x80, 0x80, 0x80, 0x01})
	f.Add([]byte{0x81, 0x00})
	f.Add(append(appendPrefix(nil, 5000), result...))
	f.Fuzz(func(t *testing.T, in []byte) {
		const max = 4096
		r := bytes.NewReader(in)
		refused, err := readStreamAnswer(r, max)
		read := len(in) - r.Len()
		pkts, code := modelDeframe(in, max, false)
		if len(pkts) == 0 {
			switch {
			case refused != nil:
				t.Fatalf("% x: no whole answer, yet refused with %v", in, refused)
			case code != 0 && CloseStatus(err) != code:
				t.Fatalf("% x: %v (close %d), the model's close %d", in, err, CloseStatus(err), code)
			case code == 0 && err != io.EOF && err != io.ErrUnexpectedEOF:
				t.Fatalf("% x: a stream that ends before its answer: %v, want io.EOF or io.ErrUnexpectedEOF", in, err)
			}
			return
		}
		if want := prefixLen(len(pkts[0])) + len(pkts[0]); read != want {
			t.Fatalf("% x: read %d bytes for an answer and prefix of %d", in, read, want)
		}
		a, derr := wire.Decode(pkts[0])
		switch {
		case derr != nil || a.Compressed || (a.Kind != dispatch.KindResult && a.Kind != dispatch.KindError):
			if refused != nil || CloseStatus(err) != wsframe.ClosePolicyViolation {
				t.Fatalf("% x: answer % x (%v) taken: %v, %v; want close 1008", in, pkts[0], derr, refused, err)
			}
		case a.Kind == dispatch.KindError:
			if err != nil || refused == nil || refused.Code != a.Code || refused.Message != string(a.Message) || !bytes.Equal(refused.Data, a.Payload) {
				t.Fatalf("% x: Error answer %d %q % x read as %v, %v", in, a.Code, a.Message, a.Payload, refused, err)
			}
		default:
			if err != nil || refused != nil {
				t.Fatalf("% x: Result answer read as %v, %v", in, refused, err)
			}
		}
	})
}

// FuzzStreamServer serves a whole connection of a stream carrier (QUIC,
// WebTransport, SCTP: PROTOCOL.md §8.1) whose client sends the fuzzer's
// bytes and then ends its side, or, with channel set, of a message
// carrier (WebRTC) whose client sends the packets of the same bytes read
// as a stream, one per message, however long. The connection must end
// (within 10 s), and what the server wrote must be a well framed stream
// (§8.1) of packets, or messages, that decode (§3) and are of kinds a
// server sends, after which at most one close notice (§8.3), last, whose
// code is one the input can cause (1002, 1003, 1007, 1008, 1009; the
// client's own notice's code or 1000 in answer to it): never 1011.
func FuzzStreamServer(f *testing.F) {
	caps := wire.Append(nil, &wire.Packet{Kind: dispatch.KindCapabilities, Count: 1, Payload: wire.AppendPair(nil, "maxMessage", "4096")})
	call := wire.AppendCall(nil, dispatch.KindCall, 1, "echo/say", 0, []byte(`{"text":"hi"}`))
	sleep := wire.AppendCall(nil, dispatch.KindCall, 2, "test/sleep", 0, []byte(`5`))
	join := wire.Append(nil, &wire.Packet{Kind: dispatch.KindJoin, ID: 3, Room: []byte("r")})
	emit := wire.Append(nil, &wire.Packet{Kind: dispatch.KindEmit, Room: []byte("r"), Name: []byte("note"), Payload: []byte(`{}`)})
	ping := wire.Append(nil, &wire.Packet{Kind: dispatch.KindPing, Payload: []byte("p")})
	var all []byte
	for _, p := range [][]byte{caps, call, sleep, join, emit, ping} {
		all = append(all, framed(p)...)
	}
	for _, channel := range []bool{false, true} {
		f.Add(all, channel)
		f.Add(append(bytes.Clone(all), framed(appendCloseNotice(nil, 4000, "bye"))...), channel)
		f.Add(append(framed(call), framed(appendCloseNotice(nil, 1000, ""))...), channel)
		f.Add(append(framed(call), 0x80, 0x80, 0x80, 0x80, 0x80, 0x01), channel)
		f.Add(append(framed(call), framed([]byte{0x7f})...), channel)
		f.Add(append(framed(call), framed(make([]byte, 5000))...), channel)
	}

	type ends struct {
		stream  *streamPeer
		channel *channelPeer
		done    chan error
	}
	conns := make(map[*pktConn]*ends)
	var connsMu sync.Mutex
	r := testRouter()
	HandleEvent(r, "note", func(ctx context.Context, v echoReq) {})
	s, err := NewServer(Options{
		Router: r,
		Logger: slog.New(slog.DiscardHandler),
		Limits: Limits{MaxMessageSize: 4096},
		OnDisconnect: func(p *Peer, err error) {
			connsMu.Lock()
			e := conns[p.link.(*pktConn)]
			connsMu.Unlock()
			e.done <- err
		},
	})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, in []byte, channel bool) {
		e := &ends{done: make(chan error, 1)}
		var l *pktConn
		if channel {
			msgs, _ := modelDeframe(in, 1<<32-1, false)
			e.channel = &channelPeer{in: msgs}
			l = newMessageConn(nullTransport{}, e.channel, s.opts.Limits)
		} else {
			e.stream = &streamPeer{in: bytes.NewReader(in)}
			l = newStreamConn(nullTransport{}, e.stream, s.opts.Limits)
		}
		connsMu.Lock()
		conns[l] = e
		connsMu.Unlock()
		defer func() {
			connsMu.Lock()
			delete(conns, l)
			connsMu.Unlock()
		}()
		s.conns.add()
		s.serveLink(l, &upgrade{})
		select {
		case <-e.done:
		case <-time.After(10 * time.Second):
			t.Fatalf("the connection did not end: % x", in)
		}
		select {
		case <-l.done: // its writes are over
		case <-time.After(10 * time.Second):
			t.Fatalf("the connection ended but its writes did not: % x", in)
		}

		var pkts [][]byte
		if channel {
			e.channel.mu.Lock()
			pkts = e.channel.out
			e.channel.mu.Unlock()
		} else {
			e.stream.mu.Lock()
			out := bytes.Clone(e.stream.out)
			e.stream.mu.Unlock()
			var code wsframe.CloseCode
			pkts, code = modelDeframe(out, 1<<32-1, false)
			if code != 0 {
				t.Fatalf("the server wrote a stream that fails with %d: % x", code, out)
			}
			framedLen := 0
			for _, p := range pkts {
				framedLen += prefixLen(len(p)) + len(p)
			}
			if framedLen != len(out) {
				t.Fatalf("the server's stream ends with %d bytes of a partial packet", len(out)-framedLen)
			}
		}
		for i, p := range pkts {
			if isCloseNotice(p) {
				ce, err := parseCloseNotice(p)
				if err != nil {
					t.Fatalf("bad close notice % x", p)
				}
				if i != len(pkts)-1 {
					t.Fatalf("%d packets after the close notice (%d)", len(pkts)-1-i, ce.Code)
				}
				switch ce.Code {
				case wsframe.CloseProtocolError, wsframe.CloseUnsupportedData, wsframe.CloseInvalidPayload,
					wsframe.ClosePolicyViolation, wsframe.CloseMessageTooBig:
				default:
					_, notice := modelDeframe(in, 1<<32-1, true)
					if notice == 0 || (ce.Code != notice && ce.Code != wsframe.CloseNormal) {
						t.Fatalf("close notice %d %q for input % x", ce.Code, ce.Reason, in)
					}
				}
				continue
			}
			// Of a kind a server sends (PROTOCOL.md §3): not Call, Answer,
			// Join or Leave.
			d, err := wire.Decode(p)
			if err != nil || !wire.ToClient(d.Kind) {
				t.Fatalf("the server sent % x: kind %d, %v", p, d.Kind, err)
			}
		}
	})
}

package compat

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/hotpath-go/hotpath/corkwriter"
	"github.com/hotpath-go/hotpath/dispatch"
	"github.com/hotpath-go/hotpath/wsframe"
	"github.com/quic-go/quic-go"
)

// nullTransport is a pktTransport for tests of the framing alone.
type nullTransport struct{}

func (nullTransport) carrier() Carrier                              { return CarrierQUIC }
func (nullTransport) encrypted() bool                               { return true }
func (nullTransport) carriesCloseCode() bool                        { return true }
func (nullTransport) closeTransport(wsframe.CloseCode, string)      {}
func (nullTransport) closeErrorOf(error) *CloseError                { return nil }
func (nullTransport) sendDatagram([]byte) (corkwriter.Status, bool) { return 0, false }
func (nullTransport) receiveDatagrams(func([]byte))                 {}
func (nullTransport) Read([]byte) (int, error)                      { return 0, io.EOF }
func (nullTransport) Write(p []byte) (int, error)                   { return len(p), nil }

// recorder is a messageHandler that keeps the packets it is handed.
type recorder struct{ packets [][]byte }

func (r *recorder) handleMessage(_ wsframe.Opcode, p []byte) error {
	r.packets = append(r.packets, bytes.Clone(p))
	return nil
}

// deframe feeds b to a fresh stream engine in reads cut at cuts, as the
// read loop does, and returns the packets delivered and the close code of
// the error, if any.
func deframe(b []byte, cuts []int, max int64) ([][]byte, wsframe.CloseCode) {
	var reads [][]byte
	prev := 0
	for _, cut := range append(cuts, len(b)) {
		if cut < prev || cut > len(b) {
			continue
		}
		if cut > prev {
			reads = append(reads, b[prev:cut])
		}
		prev = cut
	}
	r := &pieceReader{pieces: reads}
	c := newStreamConn(nullTransport{}, struct {
		io.Reader
		io.Writer
	}{r, io.Discard}, Limits{MaxMessageSize: max}.withDefaults())
	var rec recorder
	err := c.readStream(&rec)
	var ce *CloseError
	if errors.As(err, &ce) && ce.Code == wsframe.CloseAbnormal {
		return rec.packets, 0 // the end of the input
	}
	return rec.packets, CloseStatus(err)
}

// pieceReader returns its pieces one per Read, as far as p holds, then
// io.EOF.
type pieceReader struct{ pieces [][]byte }

func (r *pieceReader) Read(p []byte) (int, error) {
	if len(r.pieces) == 0 {
		return 0, io.EOF
	}
	n := copy(p, r.pieces[0])
	if r.pieces[0] = r.pieces[0][n:]; len(r.pieces[0]) == 0 {
		r.pieces = r.pieces[1:]
	}
	return n, nil
}

// TestStreamFraming: PROTOCOL.md §8.1 length prefixes, reassembled across
// reads at every split, and the limits of §2 (a prefix of at most five
// bytes) and of Limits.MaxMessageSize.
func TestStreamFraming(t *testing.T) {
	var stream []byte
	want := [][]byte{{8}, bytes.Repeat([]byte{7}, 200), bytes.Repeat([]byte{3}, 70000)}
	for _, p := range want {
		stream = append(stream, framed(p)...)
	}
	for split := 0; split <= len(stream); split += 97 {
		got, code := deframe(stream, []int{split, split + 1, split + 3}, 1<<20)
		if code != 0 || len(got) != len(want) {
			t.Fatalf("split at %d: %d packets, close %d", split, len(got), code)
		}
		for i := range want {
			if !bytes.Equal(got[i], want[i]) {
				t.Fatalf("split at %d: packet %d differs", split, i)
			}
		}
	}
	if _, code := deframe([]byte{0x80, 0x80, 0x80, 0x80, 0x80, 0x01}, nil, 1<<20); code != wsframe.CloseProtocolError {
		t.Errorf("six-byte prefix: close %d, want 1002", code)
	}
	// PROTOCOL.md §8.1: length is a 32-bit field of §2, so a prefix not
	// in its shortest form, or over 2^32-1 in five bytes, is a bad prefix
	// (1002), as a six-byte one is; the receiver took them as lengths.
	for _, prefix := range [][]byte{{0x81, 0x00}, {0x80, 0x80, 0x00}, {0xff, 0xff, 0xff, 0xff, 0x1f}} {
		if _, code := deframe(append(prefix, 8), nil, 1<<20); code != wsframe.CloseProtocolError {
			t.Errorf("prefix % x: close %d, want 1002", prefix, code)
		}
		if _, err := readStreamPacket(bytes.NewReader(append(prefix, 8)), 1<<20); CloseStatus(err) != wsframe.CloseProtocolError {
			t.Errorf("stream's first packet after prefix % x: %v, want 1002", prefix, err)
		}
	}
	if _, code := deframe(appendPrefix(nil, 1025), nil, 1024); code != wsframe.CloseMessageTooBig {
		t.Errorf("length over the limit: close %d, want 1009 before the payload arrives", code)
	}
}

// modelDeframe reads b as PROTOCOL.md §8.1 and §8.3 describe a stream
// carrier, from the text alone: packets after a length uvarint of at most
// five bytes, in its shortest form, of at most 2^32-1 (else 1002) and at
// most max (else 1009); a close notice ends the stream with its code
// (1005 when it has none), or 1002 when its payload is not a close
// frame's. It returns the packets delivered before the end and the close
// code, 0 when the input ran out.
//
// With notices false, a close notice is a packet like any other, as on a
// binary stream (§8.5).
func modelDeframe(b []byte, max uint64, notices bool) ([][]byte, wsframe.CloseCode) {
	var pkts [][]byte
	for len(b) > 0 {
		var length uint64
		i, complete := 0, false
		for i < len(b) && i < maxPrefixLen {
			c := b[i]
			length |= uint64(c&0x7f) << (7 * i)
			i++
			if c < 0x80 {
				complete = true
				break
			}
		}
		switch {
		case !complete && i == maxPrefixLen:
			return pkts, wsframe.CloseProtocolError
		case !complete:
			return pkts, 0
		case i > 1 && b[i-1] == 0, length > 1<<32-1:
			return pkts, wsframe.CloseProtocolError
		case length > max:
			return pkts, wsframe.CloseMessageTooBig
		case uint64(len(b)-i) < length:
			return pkts, 0
		}
		pkt := b[i : i+int(length)]
		b = b[i+int(length):]
		head := "\x04\x06$close" // an Event named "$close"
		if !notices || !strings.HasPrefix(string(pkt), head) {
			pkts = append(pkts, pkt)
			continue
		}
		body := pkt[len(head):]
		switch {
		case len(body) == 0:
			return pkts, wsframe.CloseNoStatus
		case len(body) == 1 || len(body) > 125 || !utf8.Valid(body[2:]):
			return pkts, wsframe.CloseProtocolError
		}
		code := wsframe.CloseCode(binary.BigEndian.Uint16(body))
		if !wsframe.ValidCloseCode(code) {
			return pkts, wsframe.CloseProtocolError
		}
		return pkts, code
	}
	return pkts, 0
}

// FuzzStreamFraming checks that any bytes, read in any pieces, deliver
// the same packets and end with the same error as when read at once, and
// the packets and close code modelDeframe reads from the protocol's text.
// readStreamPacket, which reads a binary stream's first packet, reads the
// model's first packet and no byte past it, in a buffer that grows with
// the bytes read, not with the length the prefix claims.
func FuzzStreamFraming(f *testing.F) {
	f.Add(append(framed([]byte{8}), framed([]byte{9, 1, 2})...), uint16(1), uint16(3))
	f.Add([]byte{0x80, 0x80, 0x80, 0x80, 0x80, 0x01}, uint16(2), uint16(4))
	f.Add(append(appendPrefix(nil, 5000), 1, 2, 3), uint16(1), uint16(2))
	f.Add(append(framed([]byte{8}), framed(appendCloseNotice(nil, 4000, "bye"))...), uint16(0), uint16(5))
	f.Add(framed(append(closeNoticeHead, 0x03)), uint16(0), uint16(0))
	f.Add(framed(closeNoticeHead), uint16(0), uint16(0))
	// A notice's payload is a close frame's, at most 125 bytes.
	f.Add(framed(append(appendCloseNotice(nil, 1000, strings.Repeat("a", 123)), 'a')), uint16(0), uint16(0))
	f.Add(append(appendPrefix(nil, 4000), 1, 2), uint16(2), uint16(0))
	f.Fuzz(func(t *testing.T, b []byte, cut1, cut2 uint16) {
		const max = 4096
		whole, wholeCode := deframe(b, nil, max)
		pieces, piecesCode := deframe(b, []int{int(cut1), int(cut2)}, max)
		if wholeCode != piecesCode {
			t.Fatalf("close %d at once, %d in pieces", wholeCode, piecesCode)
		}
		model, modelCode := modelDeframe(b, max, true)
		if wholeCode != modelCode || len(whole) != len(model) {
			t.Fatalf("% x: %d packets and close %d, the model %d and %d", b, len(whole), wholeCode, len(model), modelCode)
		}
		for i := range model {
			if !bytes.Equal(whole[i], model[i]) {
				t.Fatalf("% x: packet %d is % x, the model's % x", b, i, whole[i], model[i])
			}
		}

		r := bytes.NewReader(b)
		first, err := readStreamPacket(r, max)
		read := len(b) - r.Len()
		raw, rawCode := modelDeframe(b, max, false)
		switch {
		case len(raw) > 0:
			if err != nil || !bytes.Equal(first, raw[0]) {
				t.Fatalf("% x: first packet % x, %v; the model's % x", b, first, err, raw[0])
			}
			if want := prefixLen(len(raw[0])) + len(raw[0]); read != want {
				t.Fatalf("% x: read %d bytes for a packet and prefix of %d", b, read, want)
			}
		case err == nil || CloseStatus(err) != rawCode:
			t.Fatalf("% x: first packet % x, %v (close %d); the model: none, close %d", b, first, err, CloseStatus(err), rawCode)
		}
		if cap(first) > 2*read+512 {
			t.Fatalf("% x: a buffer of %d bytes after reading %d", b, cap(first), read)
		}
		if len(whole) != len(pieces) {
			t.Fatalf("%d packets at once, %d in pieces", len(whole), len(pieces))
		}
		for i := range whole {
			if !bytes.Equal(whole[i], pieces[i]) {
				t.Fatalf("packet %d differs", i)
			}
		}
	})
}

// closeRecorder is a carrier with the quick closes of handshakeCloser
// (SCTP's), recording which close the link chose.
type closeRecorder struct {
	nullTransport
	closes []string
}

func (t *closeRecorder) closeTransport(wsframe.CloseCode, string) {
	t.closes = append(t.closes, "closeTransport")
}
func (t *closeRecorder) closeAfterHandshake() { t.closes = append(t.closes, "closeAfterHandshake") }
func (t *closeRecorder) closeClosed()         { t.closes = append(t.closes, "closeClosed") }
func (t *closeRecorder) closeUnanswered(wsframe.CloseCode, string) {
	t.closes = append(t.closes, "closeUnanswered")
}

// How a link releases its carrier at the end of a closing handshake. The
// end that answered the other's close notice, and then saw the other end
// close the carrier, releases it without another shutdown or ABORT: on
// SCTP those wait for pion's write loop, gone with the association, and an
// SCTP client saw its server's close about 400 ms late.
func TestCarrierReleaseAfterClosingHandshake(t *testing.T) {
	for _, tc := range []struct {
		name                         string
		initiated, noticed, answered bool
		want                         string
	}{
		{"this end answered, the other closed the carrier", false, true, true, "closeClosed"},
		{"this end's close was answered", true, true, false, "closeAfterHandshake"},
		{"this end's close got no answer", true, false, false, "closeTransport"},
	} {
		tr := &closeRecorder{}
		c := newStreamConn(tr, tr, Limits{}.withDefaults()) // reads io.EOF: the carrier is closed
		c.closing, c.initiated, c.noticed = true, tc.initiated, tc.noticed
		end := &CloseError{Code: wsframe.CloseGoingAway, Remote: tc.answered}
		c.finish(end)
		if len(tr.closes) != 1 || tr.closes[0] != tc.want {
			t.Errorf("%s: %v, want %s", tc.name, tr.closes, tc.want)
		}
	}
}

// stalledStream is a stream to a peer that stopped answering: its writes
// wait until the test ends.
type stalledStream struct{ release chan struct{} }

func (s stalledStream) Read([]byte) (int, error) { <-s.release; return 0, io.EOF }
func (s stalledStream) Write(p []byte) (int, error) {
	<-s.release
	return len(p), nil
}

// A ping never writes on the caller's goroutine: the keepalive's, which
// checks every connection. On a stream whose writes wait (an SCTP
// association to a dead peer never ends on its own) the keepalive
// stopped for all connections at the first ping to it (a soak audit).
func TestPingNeverWaits(t *testing.T) {
	s := stalledStream{release: make(chan struct{})}
	defer close(s.release)
	c := newStreamConn(nullTransport{}, s, Limits{}.withDefaults())
	pinged := make(chan struct{})
	go func() {
		c.ping()
		c.ping()
		close(pinged)
	}()
	select {
	case <-pinged:
	case <-time.After(5 * time.Second):
		t.Fatal("ping waited for a stalled stream")
	}
}

// A call's timeout answers on a goroutine of its own: timeout runs on the
// server's one timeout goroutine, and on a stream whose writes wait (a
// QUIC, WebTransport or SCTP peer that does not read) the answer's write
// held the timeouts of every connection.
func TestCallTimeoutOnStalledPeer(t *testing.T) {
	s, err := NewServer(Options{Router: testRouter()})
	if err != nil {
		t.Fatal(err)
	}
	stalled := stalledStream{release: make(chan struct{})}
	defer close(stalled.release)
	p := s.newPeer(newStreamConn(nullTransport{}, stalled, Limits{}.withDefaults()), &upgrade{})
	cs := p.newCallState(context.Background(), 7, 60_000)
	defer cs.finish()
	timedOut := make(chan struct{})
	go func() {
		cs.timeout()
		close(timedOut)
	}()
	select {
	case <-timedOut:
	case <-time.After(5 * time.Second):
		t.Fatal("a call's timeout waited for a stalled stream")
	}
}

// quicErrors is a nullTransport that reads errors as QUIC's transport
// does (quicCloseError).
type quicErrors struct{ nullTransport }

func (quicErrors) closeErrorOf(err error) *CloseError { return quicCloseError(err) }

// failingWriter fails every write with err.
type failingWriter struct{ err error }

func (w failingWriter) Write([]byte) (int, error) { return 0, w.err }

// answering is a messageHandler that answers every packet with one of its
// own through the connection's outbox, as a Ping is answered with a Pong.
type answering struct{ c *pktConn }

func (a answering) handleMessage(_ wsframe.Opcode, p []byte) error {
	a.c.out.Send(framed(p))
	return nil
}

// A turn whose answer cannot leave because the other end closed the
// connection meanwhile ends the connection as the next read would have:
// a QUIC close without a notice is 1006 (PROTOCOL.md §8.3), not QUIC's
// own error. Seen in CI: a raw client's Ping, then its close, which the
// server's Pong met (TestProtocolCarrierEndWithoutNoticeIs1006).
func TestTurnWhoseAnswerMeetsTheEnd(t *testing.T) {
	closed := &quic.ApplicationError{Remote: true, ErrorCode: 0}
	ping := framed([]byte{byte(dispatch.KindPing)})
	var c *pktConn
	c = newStreamConn(quicErrors{}, struct {
		io.Reader
		io.Writer
	}{&pieceReader{pieces: [][]byte{ping}}, failingWriter{closed}}, Limits{}.withDefaults())
	err := c.readStream(answering{c})
	if CloseStatus(err) != wsframe.CloseAbnormal {
		t.Errorf("the connection ended with %v, want 1006", err)
	}
}

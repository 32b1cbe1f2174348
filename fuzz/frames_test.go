package main

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"testing"
	"unicode/utf8"

	"github.com/hotpath-go/hotpath/wsframe"
)

// The frame differentials feed the same bytes to wsframe's Decoder and to a
// peer's reader, each turned into an outcome: the messages and control
// frames delivered, in order, and how the stream ended. The outcomes must be
// equal, except for the differences listed in README.md, each of which is a
// named rule below that states exactly what the peer does instead.

// event is one thing a reader delivered: a whole data message, or a control
// frame (which may arrive between the fragments of a message).
type event struct {
	op      wsframe.Opcode
	code    wsframe.CloseCode // close frames: the status, 1005 for none
	payload string            // data or ping/pong payload; close: the reason
}

func (e event) String() string {
	if e.op == wsframe.OpClose {
		return fmt.Sprintf("close(%d %q)", e.code, e.payload)
	}
	return fmt.Sprintf("%v(%q)", e.op, e.payload)
}

// ending says how a stream ended.
type ending int

const (
	ranOut ending = iota // the input ended, between frames or inside one
	closed               // a valid close frame was received
	failed               // the reader failed the connection
)

func (e ending) String() string {
	return [...]string{"ran out", "closed", "failed"}[e]
}

type outcome struct {
	events []event
	end    ending
	code   wsframe.CloseCode // failed: the close code sent, 0 for none
	err    error             // failed: the reader's error, for messages
}

func (o outcome) String() string {
	s := fmt.Sprintf("%d events %v, %v", len(o.events), o.events, o.end)
	if o.end == failed {
		s += fmt.Sprintf(" with %d (%v)", o.code, o.err)
	}
	return s
}

// ours is wsframe's outcome, with what the peer rules need to know about
// where it stopped.
type ours struct {
	outcome
	dec  *wsframe.Decoder
	tail []byte // the bytes not consumed: the frame that failed or ran out
}

// decodeOurs decodes in (which it modifies: payloads are unmasked in
// place) with the message API of a Decoder configured by cfg.
func decodeOurs(t *testing.T, cfg wsframe.Config, in []byte) ours {
	d := wsframe.NewDecoder(cfg)
	var buf []byte
	o := ours{dec: d}
	for {
		m, n, err := d.DecodeMessage(in, &buf)
		in = in[n:]
		switch {
		case err == nil:
			e := event{op: m.Opcode, payload: string(m.Payload)}
			if m.Opcode == wsframe.OpClose {
				e.code, e.payload = m.CloseCode, string(m.CloseReason())
			}
			o.events = append(o.events, e)
			continue
		case errors.Is(err, wsframe.ErrNeedMore):
			o.end = ranOut
		case errors.Is(err, io.EOF):
			o.end = closed
		default:
			o.end, o.code, o.err = failed, wsframe.CloseCodeOf(err), err
			if o.code == 0 {
				t.Fatalf("wsframe failed without a close code: %v", err)
			}
		}
		o.tail = in
		return o
	}
}

// tailOpcode returns the opcode of the frame wsframe stopped at.
func (o ours) tailOpcode() wsframe.Opcode {
	if len(o.tail) == 0 {
		return 0xFF
	}
	return wsframe.Opcode(o.tail[0] & 0xF)
}

// headerIncomplete reports whether wsframe ran out inside a frame header.
func (o ours) headerIncomplete() bool {
	_, _, err := wsframe.ParseHeader(o.tail)
	return o.end == ranOut && errors.Is(err, wsframe.ErrShortHeader)
}

// firstTwoBytesFail reports whether the Decoder would fail the frame whose
// header starts o.tail on the rules its first two bytes decide alone
// (reserved bits and opcodes, masking, control frame length and FIN,
// continuation), as a peer that checks those before reading the rest of the
// header does. It probes a copy of the Decoder with that header completed
// by an empty payload (or, for a control frame announcing an extended
// length, one just over 125 bytes).
func (o ours) firstTwoBytesFail() bool {
	if len(o.tail) < 2 {
		return false
	}
	probe := *o.dec
	b0, b1 := o.tail[0], o.tail[1]
	h := wsframe.Header{
		Flags:  wsframe.Flags(b0) & 0xF0,
		Opcode: wsframe.Opcode(b0 & 0xF),
		Masked: b1&0x80 != 0,
	}
	switch {
	case h.Opcode.IsControl() && b1&0x7F > wsframe.MaxControlPayload:
		h.Length = wsframe.MaxControlPayload + 1
	case !h.Opcode.IsControl():
		// Without FIN, an empty fragment ends no message, so no rule about
		// a whole message (its UTF-8) can fail it.
		h.Flags &^= wsframe.Fin
	}
	frame := wsframe.AppendHeader(nil, h)
	frame = append(frame, make([]byte, h.Length)...)
	_, _, err := probe.DecodeFrame(frame)
	return err != nil && !errors.Is(err, wsframe.ErrNeedMore)
}

// completable reports whether some continuation makes p valid UTF-8: the
// check a reader that validates text as it arrives applies to a message
// whose end has not come yet. It tries the smallest and largest
// continuation byte of each range RFC 3629 allows after a lead byte.
func completable(p []byte) bool {
	if utf8.Valid(p) {
		return true
	}
	start := len(p) - 1
	for start > 0 && len(p)-start < utf8.UTFMax && !utf8.RuneStart(p[start]) {
		start--
	}
	if utf8.FullRune(p[start:]) || !utf8.Valid(p[:start]) {
		return false
	}
	need := 4
	switch {
	case p[start] < 0xE0:
		need = 2
	case p[start] < 0xF0:
		need = 3
	}
	seq := slices.Clone(p[start:])
	var try func(seq []byte) bool
	try = func(seq []byte) bool {
		if len(seq) == need {
			return utf8.Valid(seq)
		}
		for _, c := range []byte{0x80, 0x8F, 0x90, 0x9F, 0xA0, 0xBF} {
			if try(append(seq, c)) {
				return true
			}
		}
		return false
	}
	return try(seq)
}

// structured turns fuzz bytes into a stream of well-formed frames, so that
// the fuzzer spends its time on message-level rules (fragmentation, UTF-8,
// control frames, limits) rather than on getting lengths and masks right.
// Each record is a first byte (FIN, RSV, opcode, as is), a length byte and
// that many payload bytes, in the clear; frames are masked with a key
// derived from their position when masked is set.
func structured(data []byte, masked bool) []byte {
	var out []byte
	for i := 0; len(data) >= 2; i++ {
		b0, n := data[0], int(data[1])
		data = data[2:]
		n = min(n, len(data))
		payload := data[:n]
		data = data[n:]
		key := [4]byte{byte(i), byte(i * 7), 0x5A, byte(n)}
		out = anyFrame(out, b0, payload, masked, key)
	}
	return out
}

// anyFrame appends a frame with first byte b0 (FIN, RSV, opcode) as it is,
// masked with key if masked is set: any frame, those RFC 6455 §5.5 forbids
// included (wsframe.AppendFrame panics on them), since the fuzz inputs
// break every rule.
func anyFrame(dst []byte, b0 byte, payload []byte, masked bool, key [4]byte) []byte {
	h := wsframe.Header{Opcode: wsframe.Opcode(b0 & 0xF), Flags: wsframe.Flags(b0) & 0xF0, Length: int64(len(payload)), Masked: masked, Key: key}
	dst = wsframe.AppendHeader(dst, h)
	start := len(dst)
	dst = append(dst, payload...)
	if masked {
		wsframe.Mask(dst[start:], key, 0)
	}
	return dst
}

// record appends a frame record for structured.
func record(dst []byte, b0 byte, payload string) []byte {
	return append(append(dst, b0, byte(len(payload))), payload...)
}

// sameEvents compares two event lists.
func sameEvents(a, b []event) bool { return slices.Equal(a, b) }

// prefixOf reports whether a starts with p.
func prefixOf(p, a []event) bool {
	return len(p) <= len(a) && slices.Equal(p, a[:len(p)])
}

// diff reports an unexplained difference between wsframe and a peer.
func diff(t *testing.T, peer string, in []byte, o ours, p outcome) {
	t.Helper()
	t.Fatalf("wsframe and %s disagree on % x\nwsframe: %v\n%s: %v", peer, in, o.outcome, peer, p)
}

// equalOutcomes reports whether o and p are the same outcome.
func equalOutcomes(o, p outcome) bool {
	return sameEvents(o.events, p.events) && o.end == p.end && (o.end != failed || o.code == p.code)
}

type frameSeed struct {
	in   []byte
	mode byte
}

// frameSeeds are streams that reach every rule of both differentials:
// masked as a client sends them, or plain as a server does.
func frameSeeds(masked bool) []frameSeed {
	key := [4]byte{0x37, 0xFA, 0x21, 0x3D}
	frame := func(b0 byte, payload string) []byte {
		return anyFrame(nil, b0, []byte(payload), masked, key)
	}
	cat := func(frames ...[]byte) []byte { return slices.Concat(frames...) }
	// raw builds a header by hand, for lengths AppendHeader never writes.
	maskBit := byte(0)
	if masked {
		maskBit = 0x80
	}
	raw := func(b0 byte, l7 byte, ext ...byte) []byte {
		b := append([]byte{b0, maskBit | l7}, ext...)
		if masked {
			b = append(b, 0, 0, 0, 0)
		}
		return b
	}
	closeBody := func(code wsframe.CloseCode, reason string) string {
		return string(wsframe.AppendClosePayload(nil, code, reason))
	}
	raws := [][]byte{
		frame(0x81, "Hello"),
		cat(frame(0x01, "Hel"), frame(0x89, "ping"), frame(0x80, "lo"), frame(0x82, "\x00\x01")),
		cat(frame(0x02, "ab"), frame(0x8A, ""), frame(0x00, "cd"), frame(0x80, "ef"), frame(0x88, closeBody(1000, "bye"))),
		cat(frame(0x01, "\xce"), frame(0x80, "\xba")),                 // a character split across fragments
		cat(frame(0x01, "ok"), frame(0x80, "\xed\xa0\x80")),           // a surrogate: 1007
		frame(0x81, "\xf4\x90\x80\x80"),                               // above U+10FFFF
		frame(0x81, "abc\xe2\x82"),                                    // ends inside a character
		frame(0x88, ""),                                               // close without status
		frame(0x88, "\x03"),                                           // one-byte close body
		frame(0x88, closeBody(1014, "")),                              // 1014
		frame(0x88, closeBody(1012, "restart")),                       // 1012
		frame(0x88, "\x13\x88"),                                       // 5000
		frame(0x88, "\x03\xe8\xff"),                                   // reason not UTF-8
		frame(0x88, "\x03\xed"),                                       // 1005 on the wire
		frame(0xC1, "rsv1"),                                           // RSV1 without an extension
		frame(0x83, "x"),                                              // reserved opcode
		frame(0x09, "fragmented ping"),                                // control without FIN
		frame(0x80, "orphan continuation"),                            // continuation outside a message
		cat(frame(0x01, "a"), frame(0x81, "b")),                       // new message inside one
		cat(frame(0x89, string(make([]byte, 126)))),                   // control too long
		cat(raw(0x82, 126, 0x00, 0x05), []byte{1, 2, 3, 4, 5}),        // 16-bit length for 5 bytes
		cat(raw(0x82, 127, 0, 0, 0, 0, 0, 0, 0x01, 0x00)),             // 64-bit length for 256
		raw(0x82, 127, 0x80, 0, 0, 0, 0, 0, 0, 1),                     // top bit set
		raw(0x82, 127, 0x00, 0, 0, 1, 0, 0, 0, 0),                     // 2^40 bytes
		raw(0x82, 127, 0x80, 0, 0, 0, 0, 0, 0, 1)[:10],                // top bit, header cut
		raw(0xF2, 5)[:2],                                              // bad first byte, header cut
		frame(0x82, string(make([]byte, 2000))),                       // over the small limits
		cat(frame(0x02, string(make([]byte, 100))), frame(0x80, "x")), // over 100 in two
	}
	unmasked := frame(0x81, "x")
	unmasked[1] ^= 0x80 // the wrong mask bit for the role
	raws = append(raws, unmasked)

	var seeds []frameSeed
	for i, r := range raws {
		seeds = append(seeds, frameSeed{r, byte(i%8) << 2})
	}
	rec := record(nil, 0x01, "Hel")
	rec = record(rec, 0x89, "")
	rec = record(rec, 0x80, "lo \xe2\x82")
	rec = record(rec, 0x80, "\xac")
	rec = record(rec, 0x88, closeBody(1001, "away"))
	seeds = append(seeds, frameSeed{rec, 1})
	rec = record(nil, 0x02, "a")
	for range 20 {
		rec = record(rec, 0x00, "bcdefghij")
	}
	rec = record(rec, 0x80, "")
	seeds = append(seeds, frameSeed{rec, 1 | 2<<2})
	return seeds
}

package conformance

import (
	"bytes"
	"compress/flate"
	"fmt"
	"math/rand/v2"
	"strings"
)

func deflateCases() []Case {
	const g = "deflate"
	var cs []Case
	add := func(c Case) { cs = append(cs, c) }
	// offered builds a case that runs on a connection that offered offer.
	offered := func(section, name, offer, expect string, run func(s *session) error) Case {
		return Case{Group: g, Section: section, Name: name, Expect: expect, offer: offer, run: func(s *session) error {
			if s.pmd == nil {
				return fmt.Errorf("offer %q was declined", offer)
			}
			return run(s)
		}}
	}
	probe := windowProbe()
	// echoProbe sends the probe compressed, count times, and expects it
	// back compressed each time; the session's inflater fails a reply
	// that reaches past the agreed window or into an earlier message
	// without context takeover.
	echoProbe := func(count int) func(s *session) error {
		return func(s *session) error {
			var rs []reply
			for range count {
				if err := s.send(s.compressed(opBinary, probe)); err != nil {
					return err
				}
				rs = append(rs, binReply(probe))
			}
			return s.verify(outcome{replies: rs, compressed: true})
		}
	}

	// RFC 7692 §5, §6: a negotiated PMCE compresses data messages and
	// sets RSV1 ("Per-Message Compressed") on their first frame.
	add(offered("RFC 7692 §6", "compressed text both ways", "permessage-deflate", "echo (compressed)", func(s *session) error {
		msg := strings.Repeat(`{"event":"tick","symbol":"HOT","price":101.25}`, 100)
		if err := s.send(s.compressed(opText, []byte(msg))); err != nil {
			return err
		}
		return s.verify(outcome{replies: []reply{textReply(msg)}, compressed: true})
	}))

	// RFC 7692 §7.1.2.1: a server accepts server_max_window_bits "by
	// including the "server_max_window_bits" extension parameter in the
	// extension negotiation response to send back to the client with the
	// same or smaller value as the offer", and then compresses within
	// that window (§7.2.1: "the server MUST NOT use an LZ77 sliding window
	// longer than the w-th power of 2 bytes to compress messages").
	for bits := 8; bits <= 15; bits++ {
		add(offered("RFC 7692 §7.1.2.1", fmt.Sprintf("server_max_window_bits=%d: answered ≤ %d, replies within 2^%d bytes", bits, bits, bits),
			fmt.Sprintf("permessage-deflate; server_max_window_bits=%d", bits), "echo (compressed)", echoProbe(2)))
	}
	// RFC 7692 §7.1.2.2: with client_max_window_bits=N in the offer the
	// client compresses with at most 2^N bytes of window; the server
	// inflates what it gets.
	for bits := 8; bits <= 15; bits++ {
		add(offered("RFC 7692 §7.1.2.2", fmt.Sprintf("client_max_window_bits=%d: client compresses within 2^%d bytes", bits, bits),
			fmt.Sprintf("permessage-deflate; client_max_window_bits=%d", bits), "echo (compressed)", echoProbe(2)))
	}
	add(offered("RFC 7692 §7.1.2.2", "client_max_window_bits without a value (what Chromium offers)",
		"permessage-deflate; client_max_window_bits", "echo (compressed)", echoProbe(2)))
	add(offered("RFC 7692 §7.1.2", "both windows at 8 bits",
		"permessage-deflate; server_max_window_bits=8; client_max_window_bits=8", "echo (compressed)", echoProbe(3)))
	add(offered("RFC 7692 §7.1.2.1", `server_max_window_bits="10" (quoted-string value, RFC 6455 §9.1)`,
		`permessage-deflate; server_max_window_bits="10"`, "echo (compressed)", echoProbe(2)))

	// Context takeover off (§7.1.1): each message compressed and inflated
	// on its own. The session inflates each reply with an empty window
	// when server_no_context_takeover was agreed.
	add(offered("RFC 7692 §7.1.1.1", "server_no_context_takeover: every reply inflates alone",
		"permessage-deflate; server_no_context_takeover", "echo ×3 (compressed)", func(s *session) error {
			if !s.pmd.serverNoTakeover {
				return fmt.Errorf("response %q lacks server_no_context_takeover (§7.1.1.1: accepted by including it)", s.extensions)
			}
			return echoProbe(3)(s)
		}))
	add(offered("RFC 7692 §7.1.1.2", "client_no_context_takeover: the client compresses each message alone",
		"permessage-deflate; client_no_context_takeover", "echo ×3 (compressed)", echoProbe(3)))
	add(offered("RFC 7692 §7.1.1", "no context takeover either way",
		"permessage-deflate; server_no_context_takeover; client_no_context_takeover", "echo ×3 (compressed)", echoProbe(3)))

	// Context takeover on (§7.2.3.2): with neither parameter agreed, each
	// end may refer back into the messages it sent before. The client
	// does; the session keeps the server's window across replies.
	add(offered("RFC 7692 §7.2.3.2", "context takeover as agreed: messages refer to earlier ones",
		"permessage-deflate", "echo ×8 (compressed)", takeoverCase(probe)))
	add(offered("RFC 7692 §7.2.3.2", "context takeover with 10-bit windows both ways",
		"permessage-deflate; server_max_window_bits=10; client_max_window_bits=10", "echo ×8 (compressed)", takeoverCase(probe)))

	// RFC 7692 §5: "The order of elements is important as it specifies the
	// client's preference." A server "MUST decline an extension
	// negotiation offer" it cannot accept (§7), and may accept a later one.
	add(offered("RFC 7692 §5", "three offers, the first two invalid: the third is accepted",
		"permessage-deflate; server_max_window_bits=7, permessage-deflate; mystery_param, permessage-deflate; server_max_window_bits=10",
		"echo (compressed)", func(s *session) error {
			if s.pmd.serverBits == 0 || s.pmd.serverBits > 10 {
				return fmt.Errorf("response %q: want server_max_window_bits ≤ 10 from the third offer", s.extensions)
			}
			return echoProbe(1)(s)
		}))
	add(offered("RFC 7692 §5", "two valid offers: the first is preferred",
		"permessage-deflate; server_no_context_takeover; client_max_window_bits=9, permessage-deflate",
		"echo (compressed)", func(s *session) error {
			if !s.pmd.serverNoTakeover {
				return fmt.Errorf("response %q accepts the second offer, not the first", s.extensions)
			}
			return echoProbe(2)(s)
		}))

	// RFC 7692 §7: "A server MUST decline an extension negotiation offer
	// for this extension if any of the following conditions are met: The
	// negotiation offer contains an extension parameter not defined for
	// use in an offer. [...] an extension parameter with an invalid value.
	// [...] multiple extension parameters with the same name." Declined,
	// the connection runs plain, and RSV1 is then a protocol error.
	for _, d := range []struct{ name, offer string }{
		{"unknown parameter", "permessage-deflate; mystery_param"},
		{"repeated parameter", "permessage-deflate; server_no_context_takeover; server_no_context_takeover"},
		{"server_max_window_bits=7", "permessage-deflate; server_max_window_bits=7"},
		{"server_max_window_bits=16", "permessage-deflate; server_max_window_bits=16"},
		{"server_max_window_bits with a leading zero", "permessage-deflate; server_max_window_bits=09"},
		{"server_max_window_bits without a value", "permessage-deflate; server_max_window_bits"},
		{"client_max_window_bits=16", "permessage-deflate; client_max_window_bits=16"},
		{"client_max_window_bits=7", "permessage-deflate; client_max_window_bits=7"},
		{"client_max_window_bits with a leading zero", "permessage-deflate; client_max_window_bits=08"},
		{"repeated server_max_window_bits", "permessage-deflate; server_max_window_bits=10; server_max_window_bits=10"},
		{"repeated client_max_window_bits without a value", "permessage-deflate; client_max_window_bits; client_max_window_bits"},
		{"client_no_context_takeover with a value", "permessage-deflate; client_no_context_takeover=1"},
		{"server_no_context_takeover with a value", "permessage-deflate; server_no_context_takeover=1"},
		{"another extension only", "x-webkit-deflate-frame"},
	} {
		add(Case{Group: g, Section: "RFC 7692 §7", Name: "declined offer: " + d.name, offer: d.offer,
			Expect: "no extension; echo, then RSV1 → close 1002", run: declinedCase})
	}

	// RFC 7692 §6.1: "An endpoint MUST NOT set the "Per-Message
	// Compressed" bit of control frames and non-first fragments of a data
	// message. An endpoint receiving such a frame MUST _Fail the WebSocket
	// Connection_."
	for _, op := range []struct {
		name string
		op   byte
	}{{"ping", opPing}, {"pong", opPong}, {"close", opClose}} {
		payload := []byte{0x02, 0x00}
		add(offered("RFC 7692 §6.1", "compressed "+op.name+" frame", "permessage-deflate", "close 1002", func(s *session) error {
			if err := s.send(frame{fin: true, rsv: bitRsv1, op: op.op, payload: payload}); err != nil {
				return err
			}
			return s.verify(closes(closeProtocol))
		}))
	}
	add(offered("RFC 7692 §6.1", "RSV1 on a continuation of a compressed message", "permessage-deflate", "close 1002", func(s *session) error {
		c := s.deflate.deflateMessage([]byte("split compressed message"))
		if err := s.send(frame{rsv: bitRsv1, op: opText, payload: c[:4]}, frame{fin: true, rsv: bitRsv1, op: opContinuation, payload: c[4:]}); err != nil {
			return err
		}
		return s.verify(closes(closeProtocol))
	}))
	add(offered("RFC 7692 §6.1", "RSV1 on a continuation of a plain message", "permessage-deflate", "close 1002", func(s *session) error {
		if err := s.send(frame{op: opText, payload: []byte("plain ")}, frame{fin: true, rsv: bitRsv1, op: opContinuation, payload: []byte{0x02, 0x00}}); err != nil {
			return err
		}
		return s.verify(closes(closeProtocol))
	}))

	// RFC 7692 §6: "the "Per-Message Compressed" bit ... is set only on the
	// first frame" of a compressed message, whose payload is split across
	// its frames as any other.
	add(offered("RFC 7692 §6", "compressed message in three fragments", "permessage-deflate", "echo (compressed)", func(s *session) error {
		c := s.deflate.deflateMessage(probe)
		n := len(c) / 3
		if err := s.send(frame{rsv: bitRsv1, op: opBinary, payload: c[:n]}, frame{op: opContinuation, payload: c[n : 2*n]},
			frame{fin: true, op: opContinuation, payload: c[2*n:]}); err != nil {
			return err
		}
		return s.verify(outcome{replies: []reply{binReply(probe)}, compressed: true})
	}))
	add(offered("RFC 7692 §6", "compressed message in one-byte fragments with a ping among them", "permessage-deflate", "pong, echo", func(s *session) error {
		msg := []byte(strings.Repeat("fragmented and compressed ", 4))
		c := s.deflate.deflateMessage(msg)
		var fs []frame
		for i := range c {
			f := frame{fin: i == len(c)-1, op: opContinuation, payload: c[i : i+1]}
			if i == 0 {
				f.op, f.rsv = opText, bitRsv1
			}
			fs = append(fs, f)
			if i == len(c)/2 {
				fs = append(fs, frame{fin: true, op: opPing, payload: []byte("mid")})
			}
		}
		if err := s.send(fs...); err != nil {
			return err
		}
		return s.verify(echoes(reply{op: opPong, payload: []byte("mid")}, textReply(string(msg))))
	}))

	// RFC 7692 §7.2.2 receivers append 00 00 ff ff and inflate, so data
	// that ends with a final block (BFINAL=1, §7.2.3.4 allows it) or holds
	// no block at all still decodes.
	add(offered("RFC 7692 §7.2.3.4", "message ending with a final block (BFINAL=1)",
		"permessage-deflate; client_no_context_takeover", "echo", func(s *session) error {
			// A final block ends the client's DEFLATE stream, so the case
			// offers no client context takeover: each message starts anew.
			msg := []byte(strings.Repeat("ends with BFINAL set ", 20))
			var b bytes.Buffer
			w, _ := flate.NewWriter(&b, flate.BestSpeed)
			w.Write(msg)
			w.Close()
			if err := s.send(frame{fin: true, rsv: bitRsv1, op: opText, payload: b.Bytes()}); err != nil {
				return err
			}
			return s.verify(echoes(textReply(string(msg))))
		}))
	for _, e := range []struct {
		name    string
		payload []byte
	}{{"empty payload", []byte{}}, {"a lone 0x00 (RFC 7692 §7.2.3.6)", []byte{0x00}}, {"an empty fixed block (02 00)", []byte{0x02, 0x00}}} {
		add(offered("RFC 7692 §7.2.3.6", "compressed empty message: "+e.name, "permessage-deflate", "echo", func(s *session) error {
			if err := s.send(frame{fin: true, rsv: bitRsv1, op: opText, payload: e.payload}); err != nil {
				return err
			}
			return s.verify(echoes(textReply("")))
		}))
	}
	add(offered("RFC 7692 §6", "uncompressed message on a compressed connection", "permessage-deflate", "echo", func(s *session) error {
		if err := s.send(textFrame("sent plain")); err != nil {
			return err
		}
		return s.verify(echoes(textReply("sent plain")))
	}))
	// RFC 6455 §8.1 applies to the inflated text.
	add(offered("RFC 6455 §8.1", "compressed text that inflates to invalid UTF-8", "permessage-deflate", "close 1007", func(s *session) error {
		if err := s.send(s.compressed(opText, []byte("valid so far \xc0\xaf not"))); err != nil {
			return err
		}
		return s.verify(closes(closeInvalidData))
	}))
	// RFC 7692 names no code for data that does not inflate; 1007 ("data
	// within a message that was not consistent with the type of the
	// message", RFC 6455 §7.4.1) and 1002 are both seen.
	add(offered("RFC 7692 §7.2.2", "compressed payload that is not DEFLATE (block type 3)", "permessage-deflate", "close 1007|1002", func(s *session) error {
		if err := s.send(frame{fin: true, rsv: bitRsv1, op: opBinary, payload: []byte{0x07, 0xff, 0x00, 0x12}}); err != nil {
			return err
		}
		return s.verify(closes(closeInvalidData, closeProtocol))
	}))

	// RFC 7692 §7.2.2: the receiver decompresses the payload with 00 00
	// ff ff appended "using DEFLATE"; data that is not DEFLATE where the
	// message ends must fail the connection, not pass as a shorter
	// message: after valid compressed data, a block of the reserved type
	// 3 (RFC 1951 §3.2.3: "11 - reserved (error)"), or a stored block
	// that announces 100 bytes and holds 10. Binary, so that no UTF-8
	// check of the inflated bytes stands in for the inflater's.
	for _, e := range []struct {
		name string
		tail []byte
	}{
		{"a block of reserved type 3", []byte{0x00, 0x00, 0xff, 0xff, 0x07}},
		{"a stored block cut short", append([]byte{0x00, 0x00, 0xff, 0xff, 0x00, 100, 0, ^byte(100), 0xff}, pattern(10)...)},
	} {
		add(offered("RFC 7692 §7.2.2", "valid compressed data ending with "+e.name, "permessage-deflate", "close 1007", func(s *session) error {
			c := s.deflate.deflateMessage([]byte("valid compressed data, then a bad block"))
			if err := s.send(frame{fin: true, rsv: bitRsv1, op: opBinary, payload: append(c, e.tail...)}); err != nil {
				return err
			}
			return s.verify(closes(closeInvalidData))
		}))
	}

	// RFC 6455 §10.4 limits count inflated bytes: a few kilobytes of
	// DEFLATE can stand for a megabyte.
	cs = append(cs, Case{Group: "limits", Section: "RFC 6455 §10.4", Name: "compressed message inflating to exactly the limit",
		Expect: "echo (compressed)", offer: "permessage-deflate", needs: needMaxMessage, run: func(s *session) error {
			msg := bytes.Repeat([]byte("0123456789abcdef"), int(s.target.MaxMessage)/16+1)[:s.target.MaxMessage]
			if err := s.send(s.compressed(opBinary, msg)); err != nil {
				return err
			}
			return s.verify(outcome{replies: []reply{binReply(msg)}, compressed: true})
		}})
	// RFC 7692 §7.2.3.3 lets a sender use blocks with no compression, and
	// zlib-based clients do for incompressible data: one stored block per
	// 16 KiB at zlib's default memLevel (Node ws, browsers), per 2 KiB at
	// memLevel 5 (Python websockets), 5 bytes each. A message of exactly
	// the limit so sent is longer on the wire than the limit. RFC 6455
	// §10.4 would allow a limit on wire bytes; hotpath's limit is on the
	// message (Limits.MaxMessageSize: "after inflating"), so it echoes.
	for _, block := range []int{0xFFFF, 16 << 10, 2 << 10} {
		cs = append(cs, Case{Group: "limits", Section: "RFC 7692 §7.2.3.3",
			Name:   fmt.Sprintf("incompressible message of exactly the limit, in %d-byte stored blocks", block),
			Expect: "echo", offer: "permessage-deflate", needs: needMaxMessage, run: func(s *session) error {
				msg := pattern(int(s.target.MaxMessage))
				rand.New(rand.NewPCG(1, 1)).Shuffle(len(msg), func(i, j int) { msg[i], msg[j] = msg[j], msg[i] })
				if err := s.send(frame{fin: true, rsv: bitRsv1, op: opBinary, payload: storedDeflate(msg, block)}); err != nil {
					return err
				}
				return s.verify(echoes(binReply(msg)))
			}})
	}
	cs = append(cs, Case{Group: "limits", Section: "RFC 6455 §10.4", Name: "compressed message inflating one byte past the limit",
		Expect: "close 1009", offer: "permessage-deflate", needs: needMaxMessage, run: func(s *session) error {
			if err := s.send(s.compressed(opBinary, make([]byte, s.target.MaxMessage+1))); err != nil {
				return err
			}
			return s.verify(closes(closeMessageTooBig))
		}})
	return cs
}

// storedDeflate is msg in DEFLATE blocks with no compression (BTYPE 00)
// of at most block bytes, ended as RFC 7692 §7.2.1 says: the closing empty
// block's 00 00 ff ff removed, its header byte kept.
func storedDeflate(msg []byte, block int) []byte {
	var out []byte
	for len(msg) > 0 {
		n := min(len(msg), block)
		out = append(out, 0x00, byte(n), byte(n>>8), ^byte(n), ^byte(n>>8))
		out = append(out, msg[:n]...)
		msg = msg[n:]
	}
	return append(out, 0x00)
}

// declinedCase checks a connection whose offer the server had to decline:
// no extension, plain messages echo, and RSV1 then fails the connection
// (RFC 6455 §5.2).
func declinedCase(s *session) error {
	if s.extensions != "" {
		return fmt.Errorf("offer accepted with %q; it must be declined", s.extensions)
	}
	if err := s.send(textFrame("plain")); err != nil {
		return err
	}
	if err := s.expectReply(textReply("plain"), false); err != nil {
		return err
	}
	if err := s.send(frame{fin: true, rsv: bitRsv1, op: opText, payload: []byte{0x02, 0x00}}); err != nil {
		return err
	}
	return s.expectClose([]uint16{closeProtocol})
}

// takeoverCase sends eight compressed messages of three sizes, the client
// referring back into its earlier ones when the response allows it, and
// reads the replies with the server's window kept across messages when
// the response allows that. Eight, not two: a server whose compression
// history goes wrong only sometimes (a compressor resumed out of turn)
// shows it within a few messages. A server that the Target says allows
// takeover must agree to it when the offer does not refuse it.
func takeoverCase(probe []byte) func(s *session) error {
	return func(s *session) error {
		if s.target.ContextTakeover && (s.pmd.serverNoTakeover || s.pmd.clientNoTakeover) {
			return fmt.Errorf("response %q refuses takeover the server is configured to allow", s.extensions)
		}
		var rs []reply
		for i := range 8 {
			m := probe[:len(probe)*(i%3+1)/3]
			if err := s.send(s.compressed(opBinary, m)); err != nil {
				return err
			}
			rs = append(rs, binReply(m))
		}
		return s.verify(outcome{replies: rs, compressed: true})
	}
}

// windowProbe is a message that tempts a compressor to reach far back:
// for each window from 2^8 to 2^14 bytes, a random hex block repeated 40
// bytes past that window, with runs of JSON between (which any window
// compresses, so that even a 256-byte window shrinks the whole and the
// reply comes compressed). About 34 KB.
func windowProbe() []byte {
	r := rand.New(rand.NewPCG(7692, 1))
	var p []byte
	for bits := 8; bits <= 14; bits++ {
		block := make([]byte, 120)
		for i := range block {
			block[i] = "0123456789abcdef"[r.IntN(16)]
		}
		gap := bytes.Repeat([]byte(`{"event":"tick","price":101.25} `), 1<<bits/32+1)[:1<<bits+40-len(block)]
		p = append(p, block...)
		p = append(p, gap...)
		p = append(p, block...)
	}
	return p
}

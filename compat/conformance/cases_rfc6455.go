package conformance

import (
	"bytes"
	"fmt"
	"strings"
	"time"
)

func framingCases() []Case {
	const g = "framing"
	var cs []Case
	add := func(c Case) { cs = append(cs, c) }

	for _, n := range []int{0, 1, 125, 126, 127, 65535, 65536, 200_000} {
		p := pattern(n)
		add(framesCase(g, "RFC 6455 §5.2", fmt.Sprintf("binary message of %d bytes (length in its minimal form)", n),
			echoes(binReply(p)), binFrame(p)))
	}
	add(framesCase(g, "RFC 6455 §5.6", "text message", echoes(textReply("Hello, hotpath")), textFrame("Hello, hotpath")))
	add(framesCase(g, "RFC 6455 §5.6", "empty text message", echoes(textReply("")), textFrame("")))
	add(framesCase(g, "RFC 6455 §5.3", "masking key of zeros", echoes(textReply("zero key")),
		frame{fin: true, op: opText, payload: []byte("zero key"), zeroKey: true}))
	add(newCase(g, "RFC 6455 §5.2", "frame written one byte per write", echoes(textReply("chopped into single bytes")),
		func(s *session) error { return s.sendChopped(1, textFrame("chopped into single bytes")) }))
	many := make([]frame, 100)
	manyReplies := make([]reply, 100)
	for i := range many {
		many[i] = textFrame(fmt.Sprintf("message %d", i))
		manyReplies[i] = textReply(fmt.Sprintf("message %d", i))
	}
	add(framesCase(g, "RFC 6455 §5.2", "100 messages in one write, answered in order", echoes(manyReplies...), many...))

	// RFC 6455 §5.2: "MUST be 0 unless an extension is negotiated that
	// defines meanings for non-zero values. If a nonzero value is received
	// and none of the negotiated extensions defines the meaning of such a
	// nonzero value, the receiving endpoint MUST _Fail the WebSocket
	// Connection_."
	for _, rsv := range []struct {
		name string
		bits byte
	}{{"RSV1", bitRsv1}, {"RSV2", bitRsv2}, {"RSV3", bitRsv3}, {"RSV1+RSV2+RSV3", bitRsv1 | bitRsv2 | bitRsv3}} {
		add(framesCase(g, "RFC 6455 §5.2", rsv.name+" on a text frame, no extension negotiated", closes(closeProtocol),
			frame{fin: true, rsv: rsv.bits, op: opText, payload: []byte("reserved")}))
	}
	add(framesCase(g, "RFC 6455 §5.2", "RSV2 on a ping frame", closes(closeProtocol),
		frame{fin: true, rsv: bitRsv2, op: opPing, payload: []byte("p")}))
	add(framesCase(g, "RFC 6455 §5.2", "RSV3 on a binary frame after a valid message", echoes(textReply("ok")).thenClose(closeProtocol),
		textFrame("ok"), frame{fin: true, rsv: bitRsv3, op: opBinary, payload: []byte("x")}))

	// RFC 6455 §5.2: "If an unknown opcode is received, the receiving
	// endpoint MUST _Fail the WebSocket Connection_."
	for _, op := range []byte{0x3, 0x4, 0x5, 0x6, 0x7, 0xB, 0xC, 0xD, 0xE, 0xF} {
		add(framesCase(g, "RFC 6455 §5.2", fmt.Sprintf("reserved opcode %#x", op), closes(closeProtocol),
			frame{fin: true, op: op, payload: []byte("reserved")}))
	}
	add(framesCase(g, "RFC 6455 §5.2", "reserved opcode 0xB after a valid message", echoes(textReply("first")).thenClose(closeProtocol),
		textFrame("first"), frame{fin: true, op: 0xB}))

	// RFC 6455 §5.1: "The server MUST close the connection upon receiving
	// a frame that is not masked. In this case, a server MAY send a Close
	// frame with a status code of 1002 (protocol error)".
	add(framesCase(g, "RFC 6455 §5.1", "unmasked text frame", closes(closeProtocol),
		frame{fin: true, op: opText, payload: []byte("bare"), unmasked: true}))
	add(framesCase(g, "RFC 6455 §5.1", "unmasked ping", closes(closeProtocol),
		frame{fin: true, op: opPing, unmasked: true}))

	// RFC 6455 §5.2: "the minimal number of bytes MUST be used to encode
	// the length" and "the most significant bit MUST be 0".
	add(framesCase(g, "RFC 6455 §5.2", "length 5 in the 16-bit form", closes(closeProtocol),
		frame{fin: true, op: opText, payload: []byte("short"), lengthForm: 16}))
	add(framesCase(g, "RFC 6455 §5.2", "length 200 in the 64-bit form", closes(closeProtocol),
		frame{fin: true, op: opBinary, payload: pattern(200), lengthForm: 64}))
	add(newCase(g, "RFC 6455 §5.2", "64-bit length with its most significant bit set", closes(closeProtocol, closeMessageTooBig),
		func(s *session) error {
			return s.sendPartial(frame{fin: true, op: opBinary, payload: pattern(16), length64: 1<<63 | 16}, 14+16)
		}))

	// RFC 6455 §5.5: "All control frames MUST have a payload length of
	// 125 bytes or less and MUST NOT be fragmented."
	add(framesCase(g, "RFC 6455 §5.5.2", "ping without payload", echoes(reply{op: opPong, payload: []byte{}}),
		frame{fin: true, op: opPing}))
	add(framesCase(g, "RFC 6455 §5.5.2", "ping with 125 bytes of every value", echoes(reply{op: opPong, payload: pattern(125)}),
		frame{fin: true, op: opPing, payload: pattern(125)}))
	add(framesCase(g, "RFC 6455 §5.5", "ping with 126 bytes", closes(closeProtocol),
		frame{fin: true, op: opPing, payload: pattern(126)}))
	add(framesCase(g, "RFC 6455 §5.5", "pong with 126 bytes", closes(closeProtocol),
		frame{fin: true, op: opPong, payload: pattern(126)}))
	add(framesCase(g, "RFC 6455 §5.5", "fragmented ping (FIN clear)", closes(closeProtocol),
		frame{op: opPing, payload: []byte("a")}, frame{fin: true, op: opContinuation, payload: []byte("b")}))
	add(framesCase(g, "RFC 6455 §5.5.3", "unsolicited pong is ignored", echoes(textReply("after pong")),
		frame{fin: true, op: opPong, payload: []byte("unasked")}, textFrame("after pong")))
	add(newCase(g, "RFC 6455 §5.5.2", "ping frame written one byte per write", echoes(reply{op: opPong, payload: []byte("slow ping")}),
		func(s *session) error {
			return s.sendChopped(1, frame{fin: true, op: opPing, payload: []byte("slow ping")})
		}))
	add(pingBurstCase())
	return cs
}

// pingBurstCase sends ten pings at once. RFC 6455 §5.5.3: "If an endpoint
// receives a Ping frame and has not yet sent Pong frame(s) in response to
// previous Ping frame(s), the endpoint MAY elect to send a Pong frame for
// only the most recently processed Ping frame." Every pong that comes
// must match its ping, in order, and the last ping must be answered.
func pingBurstCase() Case {
	c := Case{Group: "framing", Section: "RFC 6455 §5.5.3", Name: "ten pings in one write", Expect: "pong ×10 (or for the last ping only)"}
	c.run = func(s *session) error {
		var fs []frame
		for i := range 10 {
			fs = append(fs, frame{fin: true, op: opPing, payload: []byte(fmt.Sprintf("ping %d", i))})
		}
		if err := s.send(fs...); err != nil {
			return err
		}
		next := 0
		for next < 10 {
			r, err := s.next()
			if err != nil {
				return err
			}
			if r.op != opPong {
				return fmt.Errorf("got %s, want a pong", describeReply(r))
			}
			var i int
			if _, err := fmt.Sscanf(string(r.payload), "ping %d", &i); err != nil || i < next {
				return fmt.Errorf("pong %q out of order", r.payload)
			}
			next = i + 1
		}
		return s.closeCleanly()
	}
	return c
}

func fragmentationCases() []Case {
	const g = "fragmentation"
	var cs []Case
	add := func(c Case) { cs = append(cs, c) }
	frag := func(op byte, fin bool, p string) frame { return frame{fin: fin, op: op, payload: []byte(p)} }

	// RFC 6455 §5.4: "An unfragmented message consists of a single frame
	// with the FIN bit set" ... "A fragmented message consists of a single
	// frame with the FIN bit clear and an opcode other than 0, followed by
	// zero or more frames with the FIN bit clear and the opcode set to 0,
	// and terminated by a single frame with the FIN bit set and an opcode
	// of 0."
	add(framesCase(g, "RFC 6455 §5.4", "text in two fragments", echoes(textReply("fragment one, fragment two")),
		frag(opText, false, "fragment one, "), frag(opContinuation, true, "fragment two")))
	add(framesCase(g, "RFC 6455 §5.4", "binary in three fragments", echoes(binReply([]byte("abcdefghi"))),
		frag(opBinary, false, "abc"), frag(opContinuation, false, "def"), frag(opContinuation, true, "ghi")))
	add(framesCase(g, "RFC 6455 §5.4", "empty first, middle and last fragments", echoes(textReply("middle")),
		frag(opText, false, ""), frag(opContinuation, false, "mid"), frag(opContinuation, false, ""),
		frag(opContinuation, false, "dle"), frag(opContinuation, true, "")))
	add(framesCase(g, "RFC 6455 §5.4", "every fragment empty", echoes(binReply([]byte{})),
		frag(opBinary, false, ""), frag(opContinuation, false, ""), frag(opContinuation, true, "")))
	long := strings.Repeat("0123456789", 20)
	var ones []frame
	for i := range len(long) {
		op := opContinuation
		if i == 0 {
			op = opText
		}
		ones = append(ones, frag(op, i == len(long)-1, long[i:i+1]))
	}
	add(framesCase(g, "RFC 6455 §5.4", "text in 200 one-byte fragments", echoes(textReply(long)), ones...))
	add(newCase(g, "RFC 6455 §5.4", "fragments written one byte per write", echoes(textReply("slowly fragmented")),
		func(s *session) error {
			return s.sendChopped(1, frag(opText, false, "slowly "), frag(opContinuation, true, "fragmented"))
		}))

	// RFC 6455 §5.4: "Control frames (see Section 5.5) MAY be injected in
	// the middle of a fragmented message." and §5.5.2 answers the ping.
	add(framesCase(g, "RFC 6455 §5.4", "ping between two fragments",
		echoes(reply{op: opPong, payload: []byte("in between")}, textReply("before after")),
		frag(opText, false, "before "), frame{fin: true, op: opPing, payload: []byte("in between")}, frag(opContinuation, true, "after")))
	add(framesCase(g, "RFC 6455 §5.4", "a ping between every fragment",
		echoes(reply{op: opPong, payload: []byte("1")}, reply{op: opPong, payload: []byte("2")}, binReply([]byte("abc"))),
		frag(opBinary, false, "a"), frame{fin: true, op: opPing, payload: []byte("1")}, frag(opContinuation, false, "b"),
		frame{fin: true, op: opPing, payload: []byte("2")}, frag(opContinuation, true, "c")))
	add(framesCase(g, "RFC 6455 §5.4", "pong between two fragments", echoes(textReply("pong inside")),
		frag(opText, false, "pong "), frame{fin: true, op: opPong, payload: []byte("x")}, frag(opContinuation, true, "inside")))
	add(newCase(g, "RFC 6455 §5.4", "ping between fragments written one byte per write",
		echoes(reply{op: opPong, payload: []byte("chop")}, textReply("ab")),
		func(s *session) error {
			return s.sendChopped(1, frag(opText, false, "a"), frame{fin: true, op: opPing, payload: []byte("chop")}, frag(opContinuation, true, "b"))
		}))

	// RFC 6455 §5.4: continuation rules. "The fragments of one message
	// MUST NOT be interleaved between the fragments of another message
	// unless an extension has been negotiated that can interpret the
	// interleaving."
	add(framesCase(g, "RFC 6455 §5.4", "continuation with no message started", closes(closeProtocol),
		frag(opContinuation, false, "orphan")))
	add(framesCase(g, "RFC 6455 §5.4", "final continuation with no message started", closes(closeProtocol),
		frag(opContinuation, true, "orphan")))
	add(framesCase(g, "RFC 6455 §5.4", "continuation after a complete message", echoes(textReply("done")).thenClose(closeProtocol),
		textFrame("done"), frag(opContinuation, true, "late")))
	add(framesCase(g, "RFC 6455 §5.4", "text frame inside a fragmented text message", closes(closeProtocol),
		frag(opText, false, "one"), frag(opText, true, "two")))
	add(framesCase(g, "RFC 6455 §5.4", "binary frame inside a fragmented text message", closes(closeProtocol),
		frag(opText, false, "one"), frag(opContinuation, false, "two"), frag(opBinary, true, "three")))
	add(framesCase(g, "RFC 6455 §5.4", "new fragmented message started inside another", closes(closeProtocol),
		frag(opBinary, false, "one"), frag(opText, false, "two"), frag(opContinuation, true, "three")))
	return cs
}

func utf8Cases() []Case {
	const g = "utf8"
	var cs []Case
	add := func(c Case) { cs = append(cs, c) }

	// RFC 6455 §5.6: "The "Payload data" is text data encoded as UTF-8."
	valid := []struct{ name, text string }{
		{"two-byte sequences", "κόσμε"},
		{"three-byte sequences", "€ ひらがな"},
		{"four-byte sequences", "𝄞 𐍈 🚀"},
		{"U+0000", "\x00"},
		{"U+007F, U+0080, U+07FF, U+0800", "\x7f\u0080\u07ff\u0800"},
		{"U+D7FF and U+E000 around the surrogates", "\ud7ff\ue000"},
		{"U+FFFD, U+FFFE, U+FFFF", "\ufffd\ufffe\uffff"},
		{"U+10000 and U+10FFFF", "\U00010000\U0010ffff"},
		{"byte order mark", "\ufeffbom"},
	}
	for _, v := range valid {
		add(framesCase(g, "RFC 6455 §5.6", "valid text: "+v.name, echoes(textReply(v.text)), textFrame(v.text)))
	}

	// RFC 6455 §8.1: "When an endpoint is to interpret a byte stream as
	// UTF-8 but finds that the byte stream is not, in fact, a valid UTF-8
	// stream, that endpoint MUST _Fail the WebSocket Connection_." with
	// 1007 (§7.4.1).
	invalid := []struct{ name, text string }{
		{"lone continuation byte 0x80", "a\x80b"},
		{"byte 0xFF", "\xff"},
		{"byte 0xFE", "ab\xfe"},
		{"overlong '/' (C0 AF)", "\xc0\xaf"},
		{"overlong NUL (E0 80 80)", "\xe0\x80\x80"},
		{"overlong four-byte (F0 80 80 80)", "\xf0\x80\x80\x80"},
		{"surrogate U+D800 (ED A0 80)", "\xed\xa0\x80"},
		{"surrogate pair as CESU-8", "\xed\xa0\x80\xed\xb0\x80"},
		{"code point past U+10FFFF (F4 90 80 80)", "\xf4\x90\x80\x80"},
		{"five-byte sequence", "\xf8\x88\x80\x80\x80"},
		{"truncated two-byte sequence at the end", "κόσμ\xce"},
		{"truncated four-byte sequence at the end", "abc\xf0\x9d\x84"},
		{"lead byte followed by ASCII (C3 28)", "ok\xc3\x28"},
	}
	for _, v := range invalid {
		add(framesCase(g, "RFC 6455 §8.1", "invalid text: "+v.name, closes(closeInvalidData), textFrame(v.text)))
	}
	add(framesCase(g, "RFC 6455 §8.1", "invalid text fragmented, valid fragments first", closes(closeInvalidData),
		frame{op: opText, payload: []byte("valid ")}, frame{op: opContinuation, payload: []byte("still valid ")},
		frame{fin: true, op: opContinuation, payload: []byte("\xed\xbf\xbf")}))
	add(framesCase(g, "RFC 6455 §8.1", "message ends inside a sequence, the fragments valid alone", closes(closeInvalidData),
		frame{op: opText, payload: []byte("ab")}, frame{fin: true, op: opContinuation, payload: []byte("\xe2\x82")}))

	// RFC 6455 §5.6: "a particular text frame might include a partial
	// UTF-8 sequence; however, the whole message MUST contain valid
	// UTF-8." Valid text split at every byte, so every sequence is cut at
	// every place.
	text := "aκό€𝄞z"
	add(splitEverywhereCase(g, "valid text split in two at every byte", text))
	add(splitSinglesCase(g, text))
	bad := "aκ\xed\xa0\x80z"
	for i := 1; i < len(bad); i++ {
		add(splitAtCase(g, bad, i))
	}

	// Fail fast: the connection fails as soon as the invalid bytes arrive,
	// without waiting for the message to end (RFC 6455 §8.1 says "MUST
	// _Fail_" when the endpoint "finds" the bytes invalid).
	add(newCase(g, "RFC 6455 §8.1", "invalid first fragment, rest never sent", failsFast(closeInvalidData),
		func(s *session) error {
			return s.send(frame{op: opText, payload: []byte("hello \xc0\xaf world")})
		}))
	add(newCase(g, "RFC 6455 §8.1", "invalid second fragment, rest never sent", failsFast(closeInvalidData),
		func(s *session) error {
			return s.send(frame{op: opText, payload: []byte("valid ")}, frame{op: opContinuation, payload: []byte("\xf4\x90\x80\x80 then more")})
		}))
	add(newCase(g, "RFC 6455 §8.1", "sequence cut by a fragment boundary and broken in the next, rest never sent", failsFast(closeInvalidData),
		func(s *session) error {
			return s.send(frame{op: opText, payload: []byte("ab\xe2")}, frame{op: opContinuation, payload: []byte("\x28\xa1")})
		}))
	add(midFrameFailFastCase())

	// RFC 6455 §5.5.1: the close reason is UTF-8; §8.1 applies to it.
	add(framesCase(g, "RFC 6455 §5.5.1", "close reason with invalid UTF-8", closes(closeInvalidData, closeProtocol),
		frame{fin: true, op: opClose, payload: closePayload(closeNormal, "bad \xff reason")}))
	return cs
}

// midFrameFailFastCase sends the first 1 KiB of a 64 KiB text frame whose
// first bytes are invalid. Failing before the frame ends is the strict
// reading of §8.1; failing once it is complete is allowed (a validator
// may run per frame), and noted.
func midFrameFailFastCase() Case {
	c := Case{Group: "utf8", Section: "RFC 6455 §8.1", Name: "invalid bytes at the start of a 64 KiB frame, the frame unfinished",
		Expect: "fail fast 1007 (or close 1007 at the frame's end)"}
	c.run = func(s *session) error {
		payload := bytes.Repeat([]byte("a"), 64<<10)
		copy(payload[10:], "\xc0\xaf")
		f := frame{fin: true, op: opText, payload: payload, key: [4]byte{1, 2, 3, 4}}
		wire := appendFrame(nil, f)
		if err := s.writeRaw(wire[:1024]); err != nil {
			return err
		}
		s.nc.SetReadDeadline(time.Now().Add(time.Second))
		_, err := s.br.Peek(1)
		s.nc.SetReadDeadline(time.Now().Add(caseTimeout))
		if err == nil {
			return s.expectClose([]uint16{closeInvalidData})
		}
		if !isTimeout(err) {
			return err
		}
		if err := s.writeRaw(wire[1024:]); err != nil {
			return err
		}
		if err := s.expectClose([]uint16{closeInvalidData}); err != nil {
			return err
		}
		return &noteError{"the server validates a text frame once it is complete, not as its bytes arrive"}
	}
	return c
}

func splitEverywhereCase(g, name, text string) Case {
	var fs []frame
	var rs []reply
	for i := 0; i <= len(text); i++ {
		fs = append(fs, frame{op: opText, payload: []byte(text[:i])}, frame{fin: true, op: opContinuation, payload: []byte(text[i:])})
		rs = append(rs, textReply(text))
	}
	return framesCase(g, "RFC 6455 §5.6", fmt.Sprintf("%s (%d messages)", name, len(rs)), echoes(rs...), fs...)
}

func splitSinglesCase(g, text string) Case {
	var fs []frame
	for i := range len(text) {
		op := opContinuation
		if i == 0 {
			op = opText
		}
		fs = append(fs, frame{fin: i == len(text)-1, op: op, payload: []byte{text[i]}})
	}
	return framesCase(g, "RFC 6455 §5.6", "valid text in one-byte fragments", echoes(textReply(text)), fs...)
}

func splitAtCase(g, text string, i int) Case {
	return framesCase(g, "RFC 6455 §8.1", fmt.Sprintf("invalid text split at byte %d of %d", i, len(text)), closes(closeInvalidData),
		frame{op: opText, payload: []byte(text[:i])}, frame{fin: true, op: opContinuation, payload: []byte(text[i:])})
}

func closeCases() []Case {
	const g = "close"
	var cs []Case
	add := func(c Case) { cs = append(cs, c) }
	closeFrame := func(p []byte) frame { return frame{fin: true, op: opClose, payload: p} }

	// The closing handshake from the client (RFC 6455 §7.1.2, §5.5.1):
	// "If an endpoint receives a Close frame and did not previously send a
	// Close frame, the endpoint MUST send a Close frame in response." and
	// §7.1.1: the server closes the TCP connection first.
	add(newCase(g, "RFC 6455 §7.1.2", "client close 1000 after a message: close 1000 back, then TCP closed by the server",
		echoes(textReply("last")), func(s *session) error { return s.send(textFrame("last")) }))
	add(framesCase(g, "RFC 6455 §7.1.5", "close without a body", closes(1005, closeNormal), closeFrame(nil)))
	add(framesCase(g, "RFC 6455 §5.5.1", "close with a one-byte body", closes(closeProtocol), closeFrame([]byte{0x03})))

	// §7.4.1 and §7.4.2: codes an endpoint may send.
	for _, code := range []uint16{1000, 1001, 1002, 1003, 1007, 1008, 1009, 1010, 1011, 3000, 3999, 4000, 4999} {
		add(framesCase(g, "RFC 6455 §7.4", fmt.Sprintf("close with valid code %d", code), closes(code, closeNormal),
			closeFrame(closePayload(code, ""))))
	}
	// 1012-1014 are in the IANA registry (§11.7) though not in RFC 6455:
	// accepting and refusing them are both seen.
	for _, code := range []uint16{1012, 1013, 1014} {
		add(framesCase(g, "RFC 6455 §11.7", fmt.Sprintf("close with IANA-registered code %d", code), closes(code, closeNormal, closeProtocol),
			closeFrame(closePayload(code, ""))))
	}
	// §7.4.1: 1004 reserved, 1005, 1006 and 1015 "MUST NOT be set as a
	// status code in a Close control frame by an endpoint"; §7.4.2: 0-999
	// "not used", 1016-2999 reserved; 5000+ undefined.
	for _, code := range []uint16{0, 999, 1004, 1005, 1006, 1015, 1016, 1100, 2000, 2999, 5000, 65535} {
		add(framesCase(g, "RFC 6455 §7.4", fmt.Sprintf("close with invalid code %d", code), closes(closeProtocol),
			closeFrame(closePayload(code, ""))))
	}
	add(framesCase(g, "RFC 6455 §5.5.1", "close with a 123-byte reason (the longest)", closes(closeNormal),
		closeFrame(closePayload(closeNormal, strings.Repeat("r", 123)))))
	add(framesCase(g, "RFC 6455 §5.5.1", "close with a UTF-8 reason", closes(4001, closeNormal),
		closeFrame(closePayload(4001, "κόσμε 𝄞"))))
	add(framesCase(g, "RFC 6455 §5.5", "close with a 124-byte reason (126-byte body)", closes(closeProtocol),
		closeFrame(closePayload(closeNormal, strings.Repeat("r", 124)))))

	// §5.5.1: "after sending a Close frame, the endpoint MUST NOT send any
	// more data frames" and the server discards what follows ours.
	add(framesCase(g, "RFC 6455 §5.5.1", "text after the client's close is not echoed", closes(closeNormal),
		closeFrame(closePayload(closeNormal, "")), textFrame("after close")))
	add(framesCase(g, "RFC 6455 §5.4", "close in the middle of a fragmented message", closes(closeNormal),
		frame{op: opText, payload: []byte("never ")}, closeFrame(closePayload(closeNormal, "")), frame{fin: true, op: opContinuation, payload: []byte("finished")}))
	add(framesCase(g, "RFC 6455 §5.5.1", "ping after the client's close is not answered", closes(closeNormal),
		closeFrame(closePayload(closeNormal, "")), frame{fin: true, op: opPing, payload: []byte("late")}))
	add(serverCloseCase())
	return cs
}

// serverCloseCase is the closing handshake started by the server (RFC
// 6455 §7.1.2, §7.1.3): on shutdown it sends close 1001, then waits for
// the client's close before it closes the TCP connection.
func serverCloseCase() Case {
	c := Case{Group: "close", Section: "RFC 6455 §7.1.2", Name: "server-initiated close: 1001, waits for the client's close, then closes TCP",
		Expect: "close 1001", needs: needShutdown}
	c.run = func(s *session) error {
		if err := s.send(textFrame("before shutdown")); err != nil {
			return err
		}
		if err := s.expectReply(textReply("before shutdown"), false); err != nil {
			return err
		}
		s.target.Shutdown()
		r, err := s.next()
		if err != nil {
			return fmt.Errorf("waiting for the server's close: %w", err)
		}
		if code, reason := parseClose(r.payload); r.op != opClose || code != closeGoingAway {
			return fmt.Errorf("got %s (%d %q), want close 1001", describeReply(r), code, reason)
		}
		// §7.1.2: the server waits for the client's close (or a timeout)
		// before it closes the TCP connection. 200 ms with the socket open
		// shows it waits; a server that closed at once would show EOF.
		s.nc.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
		if _, err := s.br.Peek(1); err == nil || !isTimeout(err) {
			return fmt.Errorf("after its close the server did not wait for the client's: %v", err)
		}
		s.nc.SetReadDeadline(time.Now().Add(caseTimeout))
		if err := s.send(frame{fin: true, op: opClose, payload: closePayload(closeGoingAway, "")}); err != nil {
			return err
		}
		return s.expectEOF()
	}
	return c
}

func limitCases() []Case {
	const g = "limits"
	var cs []Case
	lim := func(c Case, n needs) Case { c.needs |= n; return c }
	// RFC 6455 §10.4: "Implementations SHOULD impose a limit on frame sizes
	// and the total message size after reassembly from multiple frames."
	// and §7.4.1: 1009 "indicates that an endpoint is terminating the
	// connection because it has received a message that is too big for it
	// to process."
	cs = append(cs, lim(Case{Group: g, Section: "RFC 6455 §10.4", Name: "message of exactly the limit", Expect: "echo",
		run: func(s *session) error {
			p := pattern(int(s.target.MaxMessage))
			if err := s.send(binFrame(p)); err != nil {
				return err
			}
			return s.verify(echoes(binReply(p)))
		}}, needMaxMessage))
	cs = append(cs, lim(Case{Group: g, Section: "RFC 6455 §10.4", Name: "frame one byte over the limit, refused from its header", Expect: "fail fast 1009",
		run: func(s *session) error {
			f := binFrame(pattern(int(s.target.MaxMessage) + 1))
			if err := s.sendPartial(f, 14+1024); err != nil {
				return err
			}
			return s.verify(failsFast(closeMessageTooBig))
		}}, needMaxMessage))
	cs = append(cs, lim(Case{Group: g, Section: "RFC 6455 §10.4", Name: "fragmented message one byte over the limit", Expect: "close 1009",
		run: func(s *session) error {
			n := int(s.target.MaxMessage)
			p := pattern(n + 1)
			if err := s.send(frame{op: opBinary, payload: p[:n/2]}, frame{op: opContinuation, payload: p[n/2 : n]}, frame{fin: true, op: opContinuation, payload: p[n:]}); err != nil {
				return err
			}
			return s.verify(closes(closeMessageTooBig))
		}}, needMaxMessage))
	cs = append(cs, lim(Case{Group: g, Section: "RFC 6455 §10.4", Name: "message of the most fragments allowed", Expect: "echo",
		run: func(s *session) error {
			return s.fragmentsCase(s.target.MaxFragments, echoes(binReply(pattern(s.target.MaxFragments))))
		}}, needMaxFragments))
	cs = append(cs, lim(Case{Group: g, Section: "RFC 6455 §10.4", Name: "message of one fragment more than allowed", Expect: "close 1009",
		run: func(s *session) error {
			return s.fragmentsCase(s.target.MaxFragments+1, closes(closeMessageTooBig))
		}}, needMaxFragments))
	return cs
}

// fragmentsCase sends a binary message of n one-byte fragments.
func (s *session) fragmentsCase(n int, want outcome) error {
	p := pattern(n)
	fs := make([]frame, n)
	for i := range fs {
		fs[i] = frame{fin: i == n-1, op: opContinuation, payload: p[i : i+1]}
	}
	fs[0].op = opBinary
	if err := s.send(fs...); err != nil {
		return err
	}
	return s.verify(want)
}

// pattern returns n bytes cycling through every byte value.
func pattern(n int) []byte {
	p := make([]byte, n)
	for i := range p {
		p[i] = byte(i)
	}
	return p
}

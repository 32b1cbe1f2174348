package main

import (
	"bytes"
	"errors"
	"io"
	"testing"

	"github.com/gobwas/ws"
	"github.com/gobwas/ws/wsutil"
	"github.com/hotpath-go/hotpath/wsframe"
)

// decodeGobwas reads in with gobwas/ws in its most conformant
// configuration: a wsutil.Reader that checks every header (ws.CheckHeader)
// and the UTF-8 of text messages, with intermediate control frames handed
// to a handler, close frames checked by wsutil.ControlHandler, and a frame
// size limit. gobwas leaves the close code to send to the application;
// the harness maps its errors as gobwas's own Autobahn example does:
// ws.ProtocolError is 1002, wsutil.ErrInvalidUTF8 1007, and
// wsutil.ErrFrameTooLarge 1009.
func decodeGobwas(t *testing.T, in []byte, state ws.State, maxFrame int64) outcome {
	var o outcome
	var sent bytes.Buffer
	control := func(h ws.Header, r io.Reader) error {
		if h.OpCode == ws.OpClose {
			ch := wsutil.ControlHandler{Src: r, Dst: &sent, State: state, DisableSrcCiphering: true}
			err := ch.HandleClose(h)
			if errors.Is(err, io.EOF) {
				// The close payload was cut short before its first byte:
				// HandleClose returns io.ReadFull's io.EOF, which
				// wsutil.Reader.Read passes on as the end of the message
				// (README.md, B6).
				err = io.ErrUnexpectedEOF
			}
			var ce wsutil.ClosedError
			if errors.As(err, &ce) {
				o.events = append(o.events, event{op: wsframe.OpClose, code: wsframe.CloseCode(ce.Code), payload: ce.Reason})
			}
			return err
		}
		// Read exactly the announced length, and report a payload cut
		// short as io.ErrUnexpectedEOF: the frame reader an intermediate
		// control frame comes with reports the end of the input as a clean
		// io.EOF, which io.ReadAll, and wsutil.Reader.Read after the
		// handler, would take for the end of the payload and the message.
		p := make([]byte, h.Length)
		if _, err := io.ReadFull(r, p); err != nil {
			return io.ErrUnexpectedEOF
		}
		o.events = append(o.events, event{op: wsframe.Opcode(h.OpCode), payload: string(p)})
		return nil
	}
	rd := &wsutil.Reader{
		Source:         bytes.NewReader(in),
		State:          state,
		CheckUTF8:      true,
		MaxFrameSize:   maxFrame,
		OnIntermediate: control,
	}
	for {
		h, err := rd.NextFrame()
		if err == nil && h.OpCode.IsControl() {
			err = control(h, rd)
			if err == nil {
				continue
			}
		}
		if err != nil {
			gobwasEnd(t, &o, err)
			return o
		}
		data, err := io.ReadAll(rd)
		if err != nil {
			gobwasEnd(t, &o, err)
			return o
		}
		o.events = append(o.events, event{op: wsframe.Opcode(h.OpCode), payload: string(data)})
	}
}

func gobwasEnd(t *testing.T, o *outcome, err error) {
	var pe ws.ProtocolError
	var ce wsutil.ClosedError
	switch {
	case errors.As(err, &ce):
		o.end = closed
	case errors.As(err, &pe):
		o.end, o.code, o.err = failed, wsframe.CloseProtocolError, err
	case errors.Is(err, wsutil.ErrInvalidUTF8):
		o.end, o.code, o.err = failed, wsframe.CloseInvalidPayload, err
	case errors.Is(err, wsutil.ErrFrameTooLarge):
		o.end, o.code, o.err = failed, wsframe.CloseMessageTooBig, err
	case errors.Is(err, ws.ErrHeaderLengthMSB):
		o.end, o.err = failed, err
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		o.end = ranOut
	default:
		t.Fatalf("gobwas: unexpected error %v", err)
	}
}

// gobwasLimits are the frame limits the fuzzer picks from; none is below
// 125, since gobwas applies its frame limit to control frames too.
var gobwasLimits = []int64{125, 126, 1000, 65535, 65536, 1 << 20}

// FuzzFramesGobwas: wsframe's Decoder and gobwas/ws's wsutil.Reader, for
// either role, given the same bytes and the same frame limit (and no
// message or fragment limit, which gobwas does not have), deliver the same
// messages and control frames and end the same way, but for the
// differences README.md lists (rules B1-B5 below).
func FuzzFramesGobwas(f *testing.F) {
	for _, s := range frameSeeds(true) {
		f.Add(s.in, s.mode)
	}
	for _, s := range frameSeeds(false) {
		f.Add(s.in, s.mode|2)
	}
	f.Fuzz(func(t *testing.T, in []byte, mode byte) {
		role, state := wsframe.Server, ws.StateServerSide
		if mode&2 != 0 {
			role, state = wsframe.Client, ws.StateClientSide
		}
		if mode&1 != 0 {
			in = structured(in, role == wsframe.Server)
		}
		limit := gobwasLimits[int(mode>>2)%len(gobwasLimits)]
		cfg := wsframe.Config{Role: role, MaxFrameSize: limit, MaxMessageSize: 1 << 62, MaxFragments: 1 << 30}
		o := decodeOurs(t, cfg, bytes.Clone(in))
		p := decodeGobwas(t, bytes.Clone(in), state, limit)
		checkGobwas(t, in, o, p)
	})
}

func checkGobwas(t *testing.T, in []byte, o ours, p outcome) {
	t.Helper()
	var last event
	if len(o.events) > 0 {
		last = o.events[len(o.events)-1]
	}
	switch {
	case o.end == failed && errors.Is(o.err, wsframe.ErrNonMinimalLength):
		// B1: gobwas accepts a length in a longer encoding than needed.
		if !prefixOf(o.events, p.events) {
			diff(t, "gobwas (B1)", in, o, p)
		}
	case o.end == closed && last.code >= wsframe.CloseServiceRestart && last.code <= wsframe.CloseBadGateway:
		// B2: gobwas refuses the close codes 1012-1014, registered with
		// IANA after RFC 6455, with 1002.
		if !sameEvents(o.events[:len(o.events)-1], p.events) || p.end != failed || p.code != wsframe.CloseProtocolError {
			diff(t, "gobwas (B2)", in, o, p)
		}
	case o.end == failed && errors.Is(o.err, wsframe.ErrInvalidCloseCode) && len(p.events) == len(o.events)+1 && p.events[len(o.events)].code >= 5000:
		// B3: gobwas accepts close codes from 5000 up, which RFC 6455 §7.4.2
		// leaves undefined and wsframe refuses with 1002.
		if !prefixOf(o.events, p.events) || p.end != closed {
			diff(t, "gobwas (B3)", in, o, p)
		}
	case o.end == failed && errors.Is(o.err, wsframe.ErrInvalidUTF8) && o.tailOpcode() == wsframe.OpClose:
		// B4: gobwas fails a close reason that is not UTF-8 with 1002,
		// wsframe with 1007 (RFC 6455 §8.1).
		if !sameEvents(o.events, p.events) || p.end != failed || p.code != wsframe.CloseProtocolError {
			diff(t, "gobwas (B4)", in, o, p)
		}
	case o.end == failed && errors.Is(o.err, wsframe.ErrLengthMSB):
		// B5: gobwas refuses a 64-bit length with its top bit set with a
		// plain error, not a ws.ProtocolError: no close code.
		if !sameEvents(o.events, p.events) || p.end != failed || p.code != 0 {
			diff(t, "gobwas (B5)", in, o, p)
		}
	default:
		if !equalOutcomes(o.outcome, p) {
			diff(t, "gobwas", in, o, p)
		}
	}
}

// TestGobwasCutCloseEndsMessage records the gobwas/ws behaviour behind B6:
// wsutil.ReadClientData (a wsutil.Reader whose intermediate control frames
// go to wsutil.ControlHandler) returns the first fragment of a message as
// the whole message, without an error, when the input ends right after the
// header of a close frame between its fragments. wsframe reports the
// input as cut short (ErrNeedMore), and the harness makes gobwas do the
// same before comparing.
func TestGobwasCutCloseEndsMessage(t *testing.T) {
	key := [4]byte{1, 2, 3, 4}
	in := wsframe.AppendMaskedFrame(nil, wsframe.OpText, []byte("Hel"), 0, key)
	in = append(in, wsframe.AppendHeader(nil, wsframe.Header{Flags: wsframe.Fin, Opcode: wsframe.OpClose, Masked: true, Key: key, Length: 5})...)
	rw := struct {
		io.Reader
		io.Writer
	}{bytes.NewReader(in), io.Discard}
	data, op, err := wsutil.ReadClientData(rw)
	if string(data) != "Hel" || op != ws.OpText || err != nil {
		t.Errorf("gobwas/ws changed: ReadClientData = %q, %v, %v; update README.md (B6) and the harness", data, op, err)
	}
	if _, _, err := wsframe.NewDecoder(wsframe.Config{}).DecodeMessage(in, nil); !errors.Is(err, wsframe.ErrNeedMore) {
		t.Errorf("wsframe: %v, want ErrNeedMore", err)
	}
}

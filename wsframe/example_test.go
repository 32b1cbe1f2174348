package wsframe_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"

	"github.com/hotpath-go/hotpath/wsframe"
)

// A server's read loop without a socket: bytes arrive in pieces (here, cut
// inside a header and inside a payload), the Decoder returns whole messages
// and control frames, and a violation comes with the close code to send.
func Example() {
	key := [4]byte{1, 2, 3, 4}
	var wire []byte // what a client sent
	wire = wsframe.AppendMaskedFrame(wire, wsframe.OpText, []byte("Hel"), 0, key)
	wire = wsframe.AppendMaskedFrame(wire, wsframe.OpPing, []byte("are you there?"), wsframe.Fin, key)
	wire = wsframe.AppendMaskedFrame(wire, wsframe.OpContinuation, []byte("lo, world"), wsframe.Fin, key)
	wire = wsframe.AppendMaskedFrame(wire, wsframe.OpText, []byte{0xff}, wsframe.Fin, key)

	dec := wsframe.NewDecoder(wsframe.Config{Role: wsframe.Server})
	var pending, assembly, out []byte
	for _, read := range [][]byte{wire[:4], wire[4:30], wire[30:]} {
		pending = append(pending, read...)
		for {
			m, n, err := dec.DecodeMessage(pending, &assembly)
			pending = pending[n:]
			if errors.Is(err, wsframe.ErrNeedMore) {
				break // wait for the next read
			}
			if err != nil {
				var pe *wsframe.ProtocolError
				errors.As(err, &pe)
				fmt.Printf("fail: close %d, %s\n", wsframe.CloseCodeOf(err), pe.Reason)
				out = append(out, wsframe.CloseFrameFor(wsframe.CloseCodeOf(err))...)
				fmt.Printf("reply % x\n", out)
				return
			}
			switch m.Opcode {
			case wsframe.OpPing:
				fmt.Printf("ping %q\n", m.Payload)
				out = wsframe.AppendFrame(out, wsframe.OpPong, m.Payload, wsframe.Fin)
			case wsframe.OpText:
				fmt.Printf("text %q\n", m.Payload)
			}
		}
	}
	// Output:
	// ping "are you there?"
	// text "Hello, world"
	// fail: close 1007, WS_ERR_INVALID_UTF8
	// reply 8a 0e 61 72 65 20 79 6f 75 20 74 68 65 72 65 3f 88 02 03 ef
}

// A broadcast framed once: every connection writes the same bytes, and a
// compressed variant is built by the first connection that needs it.
func ExamplePrepared() {
	msg, err := wsframe.NewPrepared(wsframe.OpText, []byte(`{"event":"tick"}`))
	if err != nil {
		panic(err)
	}
	plain := msg.Frame() // built once, shared by every writer
	compressedSlot := 3  // chosen by the compressing module, per window
	compressed, err := msg.Variant(compressedSlot, func(op wsframe.Opcode, payload []byte) ([]byte, error) {
		deflated := bytes.ToUpper(payload) // stands in for a real compressor
		return wsframe.AppendFrame(nil, op, deflated, wsframe.Fin|wsframe.Rsv1), nil
	})
	if err != nil {
		panic(err)
	}
	fmt.Printf("% x\n", plain[:2])
	fmt.Printf("% x\n", compressed[:2])
	// Output:
	// 81 10
	// c1 10
}

// readLoop is the README's read loop, word for word, so that the compiler
// and this example keep it true: pending holds what was read, conn takes
// the replies.
func readLoop(conn io.Writer, pending []byte, handle func(payload []byte, compressed bool)) error {
	var out []byte
	dec := wsframe.NewDecoder(wsframe.Config{Role: wsframe.Server})
	var assembly []byte // reused for fragmented messages
	for {
		m, n, err := dec.DecodeMessage(pending, &assembly)
		pending = pending[n:] // n counts consumed bytes, whatever err is
		if errors.Is(err, wsframe.ErrNeedMore) {
			break // read more; dec.Need() says how much at least
		}
		if err != nil {
			conn.Write(wsframe.CloseFrameFor(wsframe.CloseCodeOf(err)))
			return err
		}
		switch m.Opcode {
		case wsframe.OpPing:
			out = wsframe.AppendFrame(out, wsframe.OpPong, m.Payload, wsframe.Fin)
		case wsframe.OpClose:
			out = wsframe.AppendCloseFrame(out, m.CloseCode, "")
			conn.Write(out) // the close reply last
			return nil      // the decoder returns io.EOF from now on
		case wsframe.OpText, wsframe.OpBinary:
			handle(m.Payload, m.Compressed) // valid until the next call
		}
	}
	return nil
}

// The README's read loop on a ping, a text message and a close: the pong
// and the close reply leave together, the close last.
func ExampleDecoder_DecodeMessage() {
	key := [4]byte{9, 8, 7, 6}
	var read []byte // what a client sent
	read = wsframe.AppendMaskedFrame(read, wsframe.OpPing, []byte("hi"), wsframe.Fin, key)
	read = wsframe.AppendMaskedFrame(read, wsframe.OpText, []byte("hello"), wsframe.Fin, key)
	read = wsframe.AppendMaskedFrame(read, wsframe.OpClose, wsframe.AppendClosePayload(nil, wsframe.CloseNormal, "bye"), wsframe.Fin, key)

	var conn bytes.Buffer
	err := readLoop(&conn, read, func(payload []byte, compressed bool) {
		fmt.Printf("message %q, compressed %v\n", payload, compressed)
	})
	fmt.Printf("err %v, replies % x\n", err, conn.Bytes())
	// Output:
	// message "hello", compressed false
	// err <nil>, replies 8a 02 68 69 88 02 03 e8
}

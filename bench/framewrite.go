package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"time"

	coder "github.com/coder/websocket"
	"github.com/gobwas/ws"
	gorilla "github.com/gorilla/websocket"
	nbws "github.com/lesismal/nbio/nbhttp/websocket"
	"github.com/lxzan/gws"
)

// A frameWriter is one library's fastest idiomatic way to send one binary
// message from a server, unmasked, to conn: one final frame, or fragments
// where the library splits large messages (nbio does, at 32 KiB).
// hotpath's row is one more entry in frameWriters with Role Ours,
// declared from its own file's init.
type frameWriter struct {
	Library string
	Role    Role
	// Header reports whether the library writes a frame header; the limit
	// row does not, and what it writes is the payload alone.
	Header bool
	// Open binds the library to conn (after whatever handshake it needs)
	// and returns the function that writes one message.
	Open func(conn net.Conn) (write func(payload []byte) error, err error)
}

var frameWriters = []frameWriter{
	{Library: "gorilla/websocket", Role: Peer, Header: true, Open: openGorillaWriter},
	{Library: "lxzan/gws", Role: Peer, Header: true, Open: openGwsWriter},
	{Library: "gobwas/ws", Role: Peer, Header: true, Open: openGobwasWriter},
	{Library: "coder/websocket", Role: Peer, Header: true, Open: openCoderWriter},
	{Library: "lesismal/nbio", Role: Peer, Header: true, Open: openNbioWriter},
	{Library: "copy (limit)", Role: Limit, Header: false, Open: openCopyWriter},
}

var frameSizes = []int{200, 4 << 10, 64 << 10}

func init() {
	register(&Scenario{
		Number: 1,
		Name:   "framewrite",
		Title:  "Frame write",
		About: "One binary message written by a server (one final frame, unmasked) to a connection " +
			"that copies what it is given into a buffer and forgets it, as the kernel copies a " +
			"write into a socket buffer. Each library uses its fastest idiomatic call on an " +
			"upgraded server connection. The limit row hands the payload to the same connection " +
			"with no frame at all: one copy of the payload is the least any write can cost. Before " +
			"timing, one message of each row is decoded and must be the payload, unmasked (a " +
			"library may fragment it); a row is invalid if a timed message then puts a different " +
			"number of bytes on the connection.",
		Metrics: []Metric{
			{Key: "time", Unit: "ns/op", Better: LowerIsBetter},
			{Key: "rate", Unit: "MB/s", Better: HigherIsBetter},
			{Key: "allocs", Unit: "allocs/op", Better: LowerIsBetter},
			{Key: "bytes", Unit: "B/op", Better: LowerIsBetter},
		},
		Cases: frameWriteCases,
	})
}

func frameWriteCases(cfg Config) ([]Case, error) {
	target := 200 * time.Millisecond
	if cfg.Quick {
		target = 20 * time.Millisecond
	}
	var cases []Case
	for _, size := range frameSizes {
		c := Case{Label: sizeLabel(size)}
		for _, fw := range frameWriters {
			c.Rows = append(c.Rows, Row{
				Library: fw.Library,
				Role:    fw.Role,
				Open:    openFrameWriteRow(fw, size, target),
			})
		}
		cases = append(cases, c)
	}
	return cases, nil
}

// openFrameWriteRow binds fw to a fresh discard connection; each trial then
// writes the payload in a loop timed by measureLoop.
func openFrameWriteRow(fw frameWriter, size int, target time.Duration) func(context.Context) (Instance, error) {
	return func(context.Context) (Instance, error) {
		conn := newDiscardConn()
		write, err := fw.Open(conn)
		if err != nil {
			return nil, err
		}
		payload := make([]byte, size)
		for i := range payload {
			payload[i] = byte(i)
		}
		// Check one message byte for byte before timing any: it must
		// decode to the payload. After that, every message must put the
		// same number of bytes on the connection.
		conn.recording = true
		if err := write(payload); err != nil {
			return nil, err
		}
		conn.recording = false
		if err := checkWritten(conn.recorded, payload, fw.Header); err != nil {
			return nil, err
		}
		want := int64(len(conn.recorded))
		return TrialFunc(func(context.Context) (Outcome, error) {
			conn.written = 0
			var msgs int64 // every message written, calibration runs included
			r, err := measureLoop(target, 50_000_000, func(n int) error {
				msgs += int64(n)
				for range n {
					if err := write(payload); err != nil {
						return err
					}
				}
				return nil
			})
			if err != nil {
				return Outcome{}, err
			}
			out := Outcome{Values: map[string]float64{
				"time":   r.NsPerOp,
				"rate":   float64(size) / r.NsPerOp * 1e3, // bytes per ns → MB/s
				"allocs": r.AllocsPerOp,
				"bytes":  r.BytesPerOp,
			}}
			if conn.written != msgs*want {
				out.Invalid = fmt.Sprintf("wrote %d bytes for %d messages, want %d each", conn.written, msgs, want)
			}
			return out, nil
		}), nil
	}
}

// checkWritten reports whether b is payload as a server sends it: one
// binary message, in one frame or fragments, unmasked; or, for the limit
// row, the payload itself.
func checkWritten(b, payload []byte, framed bool) error {
	if !framed {
		if !bytes.Equal(b, payload) {
			return errors.New("limit row wrote something other than the payload")
		}
		return nil
	}
	op, got, err := decodeServerMessage(b)
	switch {
	case err != nil:
		return err
	case op != 0x2:
		return fmt.Errorf("message has opcode %d, want 2 (binary)", op)
	case !bytes.Equal(got, payload):
		return errors.New("message payload differs from what was written")
	}
	return nil
}

// decodeServerMessage decodes the frames of one complete message in b and
// returns its opcode and payload.
func decodeServerMessage(b []byte) (opcode byte, payload []byte, err error) {
	for first := true; ; first = false {
		if len(b) < 2 {
			return 0, nil, errors.New("short frame header")
		}
		fin, op := b[0]&0x80 != 0, b[0]&0x0f
		// RFC 6455 §5.1: "A server MUST NOT mask any frames that it sends
		// to the client."
		if b[1]&0x80 != 0 {
			return 0, nil, errors.New("server frame is masked")
		}
		if b[0]&0x70 != 0 {
			return 0, nil, errors.New("reserved bits set without an extension")
		}
		n, h := uint64(b[1]&0x7f), 2
		switch n {
		case 126:
			if len(b) < 4 {
				return 0, nil, errors.New("short frame header")
			}
			n, h = uint64(binary.BigEndian.Uint16(b[2:])), 4
		case 127:
			if len(b) < 10 {
				return 0, nil, errors.New("short frame header")
			}
			n, h = binary.BigEndian.Uint64(b[2:]), 10
		}
		if uint64(len(b)-h) < n {
			return 0, nil, errors.New("frame shorter than its length")
		}
		if op >= 0x8 {
			return 0, nil, fmt.Errorf("control frame (opcode %d) where a data message was expected", op)
		}
		if first == (op == 0) {
			return 0, nil, errors.New("continuation frames out of order")
		}
		if first {
			opcode = op
		}
		payload = append(payload, b[h:h+int(n)]...)
		b = b[h+int(n):]
		if fin {
			if len(b) != 0 {
				return 0, nil, fmt.Errorf("%d bytes after the final frame", len(b))
			}
			return opcode, payload, nil
		}
	}
}

func sizeLabel(n int) string {
	if n >= 1024 && n%1024 == 0 {
		return fmt.Sprintf("%d KiB", n/1024)
	}
	return fmt.Sprintf("%d B", n)
}

// discardConn is a net.Conn whose Write copies into a fixed sink and
// counts, standing in for a socket: a library that hands the payload
// straight to Write pays one copy, as it would in the kernel, and one that
// first copies it into its own buffer pays two. Reads block until Close;
// no library reads during a write benchmark.
type discardConn struct {
	sink    []byte
	written int64
	closed  chan struct{}
	// recording keeps a copy of what is written in recorded, to check
	// one message before the timed loop.
	recording bool
	recorded  []byte
}

func newDiscardConn() *discardConn {
	return &discardConn{sink: make([]byte, 128<<10), closed: make(chan struct{})}
}

func (c *discardConn) Write(p []byte) (int, error) {
	for rest := p; len(rest) > 0; {
		rest = rest[copy(c.sink, rest):]
	}
	c.written += int64(len(p))
	if c.recording {
		c.recorded = append(c.recorded, p...)
	}
	return len(p), nil
}

func (c *discardConn) Read([]byte) (int, error) {
	<-c.closed
	return 0, net.ErrClosed
}

func (c *discardConn) Close() error {
	select {
	case <-c.closed:
	default:
		close(c.closed)
	}
	return nil
}

var discardAddr = &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 9}

func (c *discardConn) LocalAddr() net.Addr              { return discardAddr }
func (c *discardConn) RemoteAddr() net.Addr             { return discardAddr }
func (c *discardConn) SetDeadline(time.Time) error      { return nil }
func (c *discardConn) SetReadDeadline(time.Time) error  { return nil }
func (c *discardConn) SetWriteDeadline(time.Time) error { return nil }

// hijackWriter is the http.ResponseWriter of a server whose connection is
// conn: libraries that upgrade through net/http get a real upgraded
// connection without a server. Error responses are discarded; the
// library returns the error too.
type hijackWriter struct {
	conn   net.Conn
	header http.Header
}

func (w *hijackWriter) Header() http.Header {
	if w.header == nil {
		w.header = http.Header{}
	}
	return w.header
}
func (w *hijackWriter) Write(p []byte) (int, error) { return len(p), nil }
func (w *hijackWriter) WriteHeader(int)             {}
func (w *hijackWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	return w.conn, bufio.NewReadWriter(bufio.NewReader(w.conn), bufio.NewWriter(w.conn)), nil
}

// upgradeRequest is a client's opening handshake as net/http would parse
// it (RFC 6455 §4.1).
func upgradeRequest() *http.Request {
	key := base64.StdEncoding.EncodeToString([]byte("hotpath bench 16"))
	return &http.Request{
		Method:     http.MethodGet,
		URL:        &url.URL{Path: "/"},
		Proto:      "HTTP/1.1",
		ProtoMajor: 1,
		ProtoMinor: 1,
		Host:       "127.0.0.1",
		Header: http.Header{
			"Upgrade":               {"websocket"},
			"Connection":            {"Upgrade"},
			"Sec-Websocket-Key":     {key},
			"Sec-Websocket-Version": {"13"},
		},
	}
}

// openGorillaWriter: WriteMessage writes a server frame straight from the
// caller's slice when compression is off.
func openGorillaWriter(conn net.Conn) (func([]byte) error, error) {
	up := gorilla.Upgrader{}
	c, err := up.Upgrade(&hijackWriter{conn: conn}, upgradeRequest(), nil)
	if err != nil {
		return nil, err
	}
	return func(p []byte) error { return c.WriteMessage(gorilla.BinaryMessage, p) }, nil
}

// openGwsWriter: WriteMessage frames into a pooled buffer, then writes it.
func openGwsWriter(conn net.Conn) (func([]byte) error, error) {
	up := gws.NewUpgrader(&gws.BuiltinEventHandler{}, nil)
	c, err := up.UpgradeFromConn(conn, bufio.NewReader(conn), upgradeRequest())
	if err != nil {
		return nil, err
	}
	return func(p []byte) error { return c.WriteMessage(gws.OpcodeBinary, p) }, nil
}

// openGobwasWriter: gobwas/ws leaves the connection to the caller; its
// low-level WriteFrame writes the header, then the payload.
func openGobwasWriter(conn net.Conn) (func([]byte) error, error) {
	return func(p []byte) error { return ws.WriteFrame(conn, ws.NewBinaryFrame(p)) }, nil
}

// openCoderWriter: Write sends a whole message as one frame through the
// connection's bufio.Writer and flushes it.
func openCoderWriter(conn net.Conn) (func([]byte) error, error) {
	c, err := coder.Accept(&hijackWriter{conn: conn}, upgradeRequest(), nil)
	if err != nil {
		return nil, err
	}
	ctx := context.Background()
	return func(p []byte) error { return c.Write(ctx, coder.MessageBinary, p) }, nil
}

// openNbioWriter: NewServerConn is the connection nbio's upgrader builds;
// WriteMessage frames into a buffer from the engine's allocator and writes
// it synchronously (asyncWrite off).
func openNbioWriter(conn net.Conn) (func([]byte) error, error) {
	c := nbws.NewServerConn(nbws.NewUpgrader(), conn, "", false, false)
	return func(p []byte) error { return c.WriteMessage(nbws.BinaryMessage, p) }, nil
}

// openCopyWriter is the limit: the payload handed to the connection as it
// is, no header, no framing.
func openCopyWriter(conn net.Conn) (func([]byte) error, error) {
	return func(p []byte) error {
		_, err := conn.Write(p)
		return err
	}, nil
}

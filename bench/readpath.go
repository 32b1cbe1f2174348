package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	coder "github.com/coder/websocket"
	"github.com/gobwas/ws"
	"github.com/gobwas/ws/wsutil"
	gorilla "github.com/gorilla/websocket"
	nbws "github.com/lesismal/nbio/nbhttp/websocket"
	"github.com/lxzan/gws"
)

// A frameReader is one library's fastest idiomatic way for a server to
// read whole messages from a connection: it reads until the connection
// ends and calls onMessage with the length and the payload of every data
// message (the payload is valid during the call; the limit row, which
// parses nothing, passes nil).
type frameReader struct {
	Library string
	Role    Role
	// Open binds the library to conn (after whatever handshake it needs)
	// and starts reading on a goroutine of its own.
	Open func(conn net.Conn, s readStream, onMessage func(n int, payload []byte)) error
}

// readStream describes what a connection of the read path carries: one
// message of msgSize payload bytes takes streamLen bytes of frames, again
// and again.
type readStream struct{ msgSize, streamLen int }

var frameReaders = []frameReader{
	{Library: "gorilla/websocket", Role: Peer, Open: openGorillaReader},
	{Library: "lxzan/gws", Role: Peer, Open: openGwsReader},
	{Library: "gobwas/ws", Role: Peer, Open: openGobwasReader},
	{Library: "coder/websocket", Role: Peer, Open: openCoderReader},
	{Library: "lesismal/nbio", Role: Peer, Open: openNbioReader},
	{Library: "copy (limit)", Role: Limit, Open: openCopyReader},
}

// readCase is one case of the read path: a stream of client frames.
type readCase struct {
	label    string
	msgSize  int // payload bytes of one message
	fragment int // payload bytes of one frame (msgSize: unfragmented)
	perOp    int // messages per timed operation
	segment  int // largest read the in-process connection returns
	loopback bool
}

const readMaxMessage = 16 << 20

func init() {
	register(&Scenario{
		Number: 2,
		Name:   "readpath",
		Title:  "Read path",
		About: "A server reading client messages (masked, as clients send them) until it holds each whole " +
			"message. In process, the connection returns a prepared stream of frames, at most one " +
			"64 KiB segment per read, copying it into the reader's buffer as the kernel would; over " +
			"loopback a client goroutine writes the same stream to a real TCP socket. Cases: 50,000 " +
			"messages of 200 B (one frame each) per operation; one 16 MiB message in 1,024 frames of " +
			"16 KiB, in process and over loopback. Every library reads whole messages on its own " +
			"idiomatic path: hotpath a wsframe.Decoder taking messages from a segmentqueue.Queue " +
			"filled straight from the connection (Fill); gorilla NextReader and coder Reader into a " +
			"reused buffer; gws and nbio their read loops delivering messages to a callback; gobwas " +
			"wsutil.Reader into a reused buffer. The limit row reads the bytes into a 64 KiB buffer " +
			"and does nothing else (the kernel's copy: over loopback, raw TCP throughput). A row is " +
			"invalid if a message arrives with the wrong length, or if the first message it reads " +
			"is not the payload sent, unmasked.",
		Metrics: []Metric{
			{Key: "rate", Unit: "MB/s", Better: HigherIsBetter},
			{Key: "time", Unit: "ns/msg", Better: LowerIsBetter},
			{Key: "allocs", Unit: "allocs/msg", Better: LowerIsBetter},
			{Key: "bytes", Unit: "B/msg", Better: LowerIsBetter},
		},
		Cases: readCases,
	})
}

func readCases(cfg Config) ([]Case, error) {
	target := 200 * time.Millisecond
	if cfg.Quick {
		target = 20 * time.Millisecond
	}
	specs := []readCase{
		{label: "50,000 × 200 B, in process", msgSize: 200, fragment: 200, perOp: 50_000, segment: 64 << 10},
		{label: "16 MiB in 16 KiB frames, in process", msgSize: 16 << 20, fragment: 16 << 10, perOp: 1, segment: 64 << 10},
		{label: "16 MiB in 16 KiB frames, loopback", msgSize: 16 << 20, fragment: 16 << 10, perOp: 1, loopback: true},
	}
	var cases []Case
	for _, rc := range specs {
		stream := clientStream(rc.msgSize, rc.fragment)
		c := Case{Label: rc.label}
		for _, fr := range frameReaders {
			c.Rows = append(c.Rows, Row{Library: fr.Library, Role: fr.Role, Open: openReadRow(fr, rc, stream, target)})
		}
		cases = append(cases, c)
	}
	return cases, nil
}

// clientStream is one message of msgSize bytes as a client sends it, in
// masked frames of fragment bytes.
func clientStream(msgSize, fragment int) []byte {
	payload := clientPayload(msgSize)
	var out []byte
	key := newMaskKey()
	for off := 0; off < msgSize; off += fragment {
		end := min(off+fragment, msgSize)
		op := byte(0x0) // continuation
		if off == 0 {
			op = 0x2
		}
		frame := appendClientFrame(nil, op, payload[off:end], key)
		if end < msgSize {
			frame[0] &^= 0x80 // not the last fragment: FIN clear
		}
		out = append(out, frame...)
	}
	return out
}

// clientPayload is the payload of the read path's messages.
func clientPayload(msgSize int) []byte {
	payload := make([]byte, msgSize)
	for i := range payload {
		payload[i] = 'a' + byte(i%26)
	}
	return payload
}

// readRow is one library reading from a connection fed with budgeted
// copies of the stream. A timed operation grants perOp messages and waits
// until the library has delivered them.
type readRow struct {
	feed    *streamFeed
	conn    net.Conn
	msgSize int
	perOp   int
	target  time.Duration

	want    atomic.Int64 // messages that end the operation
	got     atomic.Int64
	wrong   atomic.Int64
	reached chan struct{}

	// payload is what every message must hold. The first message a row
	// reads is compared with it (only the first: the comparison is not
	// the reader's work), and a mismatch makes every trial invalid.
	payload    []byte
	checked    atomic.Bool
	badContent atomic.Bool
}

func openReadRow(fr frameReader, rc readCase, stream []byte, target time.Duration) func(context.Context) (Instance, error) {
	return func(ctx context.Context) (Instance, error) {
		r := &readRow{msgSize: rc.msgSize, perOp: rc.perOp, target: target, reached: make(chan struct{}, 1), payload: clientPayload(rc.msgSize)}
		var err error
		if rc.loopback {
			r.conn, r.feed, err = loopbackFeed(stream)
		} else {
			sc := newStreamConn(stream, rc.segment)
			r.conn, r.feed = sc, &sc.streamFeed
		}
		if err != nil {
			return nil, err
		}
		if err := fr.Open(r.conn, readStream{msgSize: rc.msgSize, streamLen: len(stream)}, r.onMessage); err != nil {
			r.Close()
			return nil, err
		}
		return r, nil
	}
}

func (r *readRow) onMessage(n int, payload []byte) {
	if n != r.msgSize {
		r.wrong.Add(1)
	}
	if payload != nil && !r.checked.Swap(true) && !bytes.Equal(payload, r.payload) {
		r.badContent.Store(true)
	}
	if r.got.Add(1) == r.want.Load() {
		r.reached <- struct{}{}
	}
}

// readMessages grants n messages of the stream and waits until all have
// been read (or the reader stalls for 10 seconds).
func (r *readRow) readMessages(n int) error {
	r.want.Store(r.got.Load() + int64(n))
	r.feed.grant(n)
	select {
	case <-r.reached:
		return nil
	case <-time.After(10 * time.Second):
		return fmt.Errorf("reader stalled after %d of %d messages", n-int(r.want.Load()-r.got.Load()), n)
	}
}

func (r *readRow) Trial(context.Context) (Outcome, error) {
	w0 := r.wrong.Load()
	res, err := measureLoop(r.target, 1_000, func(n int) error { return r.readMessages(n * r.perOp) })
	if err != nil {
		return Outcome{}, err
	}
	per := float64(r.perOp)
	out := Outcome{Values: map[string]float64{
		"rate":   float64(r.perOp*r.msgSize) / res.NsPerOp * 1e3,
		"time":   res.NsPerOp / per,
		"allocs": res.AllocsPerOp / per,
		"bytes":  res.BytesPerOp / per,
	}}
	if w := r.wrong.Load() - w0; w > 0 {
		out.Invalid = fmt.Sprintf("%d messages had the wrong length", w)
	}
	if r.badContent.Load() {
		out.Invalid = "the first message read differs from the one sent (not unmasked?)"
	}
	return out, nil
}

func (r *readRow) Close() error {
	r.feed.close()
	return r.conn.Close()
}

// streamFeed hands out a cyclic stream of whole messages as they are
// granted: granting n messages allows n × len(message stream) more bytes.
type streamFeed struct {
	stream []byte
	mu     sync.Mutex
	cond   *sync.Cond
	pos    int   // next byte of stream
	budget int64 // bytes granted and not yet handed out
	closed bool
}

func (f *streamFeed) init(stream []byte) {
	f.stream = stream
	f.cond = sync.NewCond(&f.mu)
}

func (f *streamFeed) grant(messages int) {
	f.mu.Lock()
	f.budget += int64(messages) * int64(len(f.stream))
	f.mu.Unlock()
	f.cond.Broadcast()
}

func (f *streamFeed) close() {
	f.mu.Lock()
	f.closed = true
	f.mu.Unlock()
	f.cond.Broadcast()
}

// next waits for budget and returns the next piece of the stream, at most
// limit bytes and never past the end of the stream (which starts over).
func (f *streamFeed) next(limit int) ([]byte, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for f.budget == 0 && !f.closed {
		f.cond.Wait()
	}
	if f.closed {
		return nil, false
	}
	n := min(int64(limit), f.budget, int64(len(f.stream)-f.pos))
	b := f.stream[f.pos : f.pos+int(n)]
	f.budget -= n
	if f.pos += int(n); f.pos == len(f.stream) {
		f.pos = 0
	}
	return b, true
}

// streamConn is the in-process connection: each Read copies the next
// piece of the feed, at most one segment, into the reader's buffer.
// Writes (a handshake's response) are discarded.
type streamConn struct {
	streamFeed
	segment int
	off     int // position within the current segment
}

func newStreamConn(stream []byte, segment int) *streamConn {
	c := &streamConn{segment: segment}
	c.init(stream)
	return c
}

func (c *streamConn) Read(p []byte) (int, error) {
	b, ok := c.next(min(len(p), c.segment-c.off))
	if !ok {
		return 0, io.EOF
	}
	n := copy(p, b)
	if c.off += n; c.off == c.segment {
		c.off = 0
	}
	return n, nil
}

func (c *streamConn) Write(p []byte) (int, error)      { return len(p), nil }
func (c *streamConn) Close() error                     { c.close(); return nil }
func (c *streamConn) LocalAddr() net.Addr              { return discardAddr }
func (c *streamConn) RemoteAddr() net.Addr             { return discardAddr }
func (c *streamConn) SetDeadline(time.Time) error      { return nil }
func (c *streamConn) SetReadDeadline(time.Time) error  { return nil }
func (c *streamConn) SetWriteDeadline(time.Time) error { return nil }

// loopbackFeed connects a TCP pair on 127.0.0.1 and returns the server
// end; a goroutine writes the granted bytes to the client end and discards
// what the server writes (a handshake's response).
func loopbackFeed(stream []byte) (net.Conn, *streamFeed, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, nil, err
	}
	defer ln.Close()
	client, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		return nil, nil, err
	}
	server, err := ln.Accept()
	if err != nil {
		client.Close()
		return nil, nil, err
	}
	f := &streamFeed{}
	f.init(stream)
	go func() { _, _ = io.Copy(io.Discard, client) }()
	go func() {
		defer client.Close()
		for {
			b, ok := f.next(1 << 20)
			if !ok {
				return
			}
			if _, err := client.Write(b); err != nil {
				return
			}
		}
	}()
	return server, f, nil
}

// openGorillaReader: NextReader, then the message read into a reused
// buffer (ReadMessage would allocate a slice per message).
func openGorillaReader(conn net.Conn, _ readStream, onMessage func(int, []byte)) error {
	up := gorilla.Upgrader{}
	c, err := up.Upgrade(&hijackWriter{conn: conn}, upgradeRequest(), nil)
	if err != nil {
		return err
	}
	go func() {
		var buf bytes.Buffer
		for {
			_, rd, err := c.NextReader()
			if err != nil {
				return
			}
			buf.Reset()
			if _, err := buf.ReadFrom(rd); err != nil {
				return
			}
			onMessage(buf.Len(), buf.Bytes())
		}
	}()
	return nil
}

type gwsReadHandler struct {
	gws.BuiltinEventHandler
	onMessage func(int, []byte)
}

func (h gwsReadHandler) OnMessage(_ *gws.Conn, m *gws.Message) {
	h.onMessage(m.Data.Len(), m.Data.Bytes())
	_ = m.Close()
}

// openGwsReader: gws's ReadLoop, which reassembles each message into a
// pooled buffer and hands it to OnMessage.
func openGwsReader(conn net.Conn, _ readStream, onMessage func(int, []byte)) error {
	up := gws.NewUpgrader(gwsReadHandler{onMessage: onMessage}, &gws.ServerOption{ReadMaxPayloadSize: readMaxMessage})
	c, err := up.UpgradeFromConn(conn, bufio.NewReader(conn), upgradeRequest())
	if err != nil {
		return err
	}
	go c.ReadLoop()
	return nil
}

// openGobwasReader: wsutil.Reader over a bufio.Reader, following
// continuation frames, into a reused buffer.
func openGobwasReader(conn net.Conn, _ readStream, onMessage func(int, []byte)) error {
	rd := &wsutil.Reader{Source: bufio.NewReader(conn), State: ws.StateServerSide}
	go func() {
		var buf bytes.Buffer
		for {
			h, err := rd.NextFrame()
			if err != nil {
				return
			}
			if h.OpCode.IsControl() {
				if err := rd.Discard(); err != nil {
					return
				}
				continue
			}
			buf.Reset()
			if _, err := buf.ReadFrom(rd); err != nil {
				return
			}
			onMessage(buf.Len(), buf.Bytes())
		}
	}()
	return nil
}

// openCoderReader: Reader, then the message read into a reused buffer.
func openCoderReader(conn net.Conn, _ readStream, onMessage func(int, []byte)) error {
	c, err := coder.Accept(&hijackWriter{conn: conn}, upgradeRequest(), nil)
	if err != nil {
		return err
	}
	c.SetReadLimit(readMaxMessage)
	go func() {
		ctx := context.Background()
		var buf bytes.Buffer
		for {
			_, rd, err := c.Reader(ctx)
			if err != nil {
				return
			}
			buf.Reset()
			if _, err := buf.ReadFrom(rd); err != nil {
				return
			}
			onMessage(buf.Len(), buf.Bytes())
		}
	}()
	return nil
}

// openNbioReader: nbio's upgrader on a net/http connection, as in the
// echo scenario's goroutine mode: its blocking read loop parses each read
// and delivers whole messages to OnMessage.
func openNbioReader(conn net.Conn, _ readStream, onMessage func(int, []byte)) error {
	up := nbioUpgrader()
	up.MessageLengthLimit = readMaxMessage
	up.OnMessage(func(_ *nbws.Conn, _ nbws.MessageType, data []byte) { onMessage(len(data), data) })
	_, err := up.Upgrade(&hijackWriter{conn: conn}, upgradeRequest(), nil)
	return err
}

// openCopyReader is the limit: the bytes read into a 64 KiB buffer and
// counted, nothing parsed; a message is delivered every streamLen bytes.
func openCopyReader(conn net.Conn, s readStream, onMessage func(int, []byte)) error {
	go func() {
		buf := make([]byte, 64<<10)
		left := s.streamLen
		for {
			n, err := conn.Read(buf)
			for n > 0 {
				step := min(n, left)
				n, left = n-step, left-step
				if left == 0 {
					onMessage(s.msgSize, nil)
					left = s.streamLen
				}
			}
			if err != nil {
				return
			}
		}
	}()
	return nil
}

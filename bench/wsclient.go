package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha1"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync/atomic"
	"time"
)

// wsClient is the one client that drives every server in every loopback
// scenario. It is written here over a net.Conn, not taken from a peer
// library, so that no server plays against its own client, and it does as
// little as it can per message — it sends a frame prepared once and skips
// the payload it reads back without copying it — so that the differences
// a table shows belong to the servers.
type wsClient struct {
	conn net.Conn
	br   *bufio.Reader
	// extensions is the server's Sec-WebSocket-Extensions answer, when
	// the client offered one.
	extensions string
}

// dialOptions say how to open a client connection.
type dialOptions struct {
	// Local is the source address; nil lets the kernel choose. Spreading
	// many connections over 127.0.0.2, .3, ... keeps each source address
	// far from running out of ephemeral ports.
	Local net.IP
	// Handshake sends the HTTP upgrade; false for the raw TCP floor, which
	// echoes bytes and knows nothing of HTTP.
	Handshake bool
	// ReadBuffer sizes the client's read buffer (default 64 KiB); the idle
	// scenario holds 10,000 clients and asks for a small one.
	ReadBuffer int
	// Extensions, when set, is sent as Sec-WebSocket-Extensions (the
	// fan-out scenario's permessage-deflate offers).
	Extensions string
}

// errMessageTooLarge stops the client from trusting a broken length.
var errMessageTooLarge = errors.New("wsclient: message larger than 16 MiB")

const maxClientMessage = 16 << 20

// webSocketGUID is the fixed string of RFC 6455 §1.3 that the server
// appends to the key before hashing.
const webSocketGUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"

// dialWS connects to addr and, when asked, performs the opening handshake.
func dialWS(ctx context.Context, addr string, opt dialOptions) (*wsClient, error) {
	d := net.Dialer{}
	if opt.Local != nil {
		d.LocalAddr = &net.TCPAddr{IP: opt.Local}
	}
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	size := opt.ReadBuffer
	if size == 0 {
		size = 64 << 10
	}
	c := &wsClient{conn: conn, br: bufio.NewReaderSize(conn, size)}
	if opt.Handshake {
		if deadline, ok := ctx.Deadline(); ok {
			_ = conn.SetDeadline(deadline)
		}
		if err := c.handshake(addr, opt.Extensions); err != nil {
			conn.Close()
			return nil, fmt.Errorf("handshake with %s: %w", addr, err)
		}
		_ = conn.SetDeadline(time.Time{})
	}
	return c, nil
}

// handshake sends the opening handshake of RFC 6455 §4.1 and checks the
// server's answer.
func (c *wsClient) handshake(host, extensions string) error {
	// RFC 6455 §4.1: "The request MUST include a header field with the name
	// |Sec-WebSocket-Key|. The value of this header field MUST be a nonce
	// consisting of a randomly selected 16-byte value that has been
	// base64-encoded."
	var nonce [16]byte
	_, _ = rand.Read(nonce[:])
	key := base64.StdEncoding.EncodeToString(nonce[:])
	req := "GET / HTTP/1.1\r\nHost: " + host +
		"\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: " + key +
		"\r\nSec-WebSocket-Version: 13\r\n"
	if extensions != "" {
		req += "Sec-WebSocket-Extensions: " + extensions + "\r\n"
	}
	req += "\r\n"
	if _, err := c.conn.Write([]byte(req)); err != nil {
		return err
	}
	status, err := c.br.ReadSlice('\n')
	if err != nil {
		return err
	}
	// RFC 6455 §4.1: "If the status code received from the server is not
	// 101, the client handles the response per HTTP procedures."
	if f := strings.Fields(string(status)); len(f) < 2 || f[1] != "101" {
		return fmt.Errorf("status %q, want 101", strings.TrimSpace(string(status)))
	}
	accept := ""
	for {
		line, err := c.br.ReadSlice('\n')
		if err != nil {
			return err
		}
		line = bytes.TrimRight(line, "\r\n")
		if len(line) == 0 {
			break
		}
		k, v, ok := bytes.Cut(line, []byte(":"))
		switch {
		case !ok:
		case strings.EqualFold(string(k), "Sec-WebSocket-Accept"):
			accept = string(bytes.TrimSpace(v))
		case strings.EqualFold(string(k), "Sec-WebSocket-Extensions"):
			c.extensions = string(bytes.TrimSpace(v))
		}
	}
	// RFC 6455 §4.1: "If the response lacks a |Sec-WebSocket-Accept| header
	// field or the |Sec-WebSocket-Accept| contains a value other than the
	// base64-encoded SHA-1 of the concatenation of the |Sec-WebSocket-Key|
	// (as a string, not base64-decoded) with the string
	// "258EAFA5-E914-47DA-95CA-C5AB0DC85B11" [...] the client MUST _Fail
	// the WebSocket Connection_."
	if accept != acceptKey(key) {
		return fmt.Errorf("Sec-WebSocket-Accept %q does not match the key", accept)
	}
	return nil
}

func acceptKey(key string) string {
	h := sha1.Sum([]byte(key + webSocketGUID))
	return base64.StdEncoding.EncodeToString(h[:])
}

// newMaskKey returns a random masking key.
func newMaskKey() [4]byte {
	var k [4]byte
	_, _ = rand.Read(k[:])
	return k
}

// appendClientFrame appends one final, masked frame carrying payload.
//
// RFC 6455 §5.1: "a client MUST mask all frames that it sends to the
// server". §5.3 asks for a fresh, unpredictable key per frame; the echo
// scenario instead sends the frame it built once per connection again and
// again. No server can tell (the key travels in the frame), and masking
// anew per message would add the same client cost to every row and blur
// the differences between servers.
func appendClientFrame(dst []byte, opcode byte, payload []byte, key [4]byte) []byte {
	// RFC 6455 §5.2: FIN is the first bit; the payload length is 7 bits,
	// or 126 followed by 16 bits, or 127 followed by 64 bits.
	dst = append(dst, 0x80|opcode)
	switch n := len(payload); {
	case n <= 125:
		dst = append(dst, 0x80|byte(n))
	case n <= 0xffff:
		dst = append(dst, 0x80|126)
		dst = binary.BigEndian.AppendUint16(dst, uint16(n))
	default:
		dst = append(dst, 0x80|127)
		dst = binary.BigEndian.AppendUint64(dst, uint64(n))
	}
	dst = append(dst, key[:]...)
	for i, b := range payload {
		dst = append(dst, b^key[i&3])
	}
	return dst
}

// A closeError is a close frame the server sent.
type closeError struct{ code int }

func (e closeError) Error() string { return fmt.Sprintf("server sent close frame %d", e.code) }

// readMessage reads one whole message, following continuation frames, and
// returns its opcode and payload length. The payload is skipped, never
// copied out: the client checks lengths, not contents, and so costs every
// server the same. Masked frames are accepted because the raw TCP floor
// echoes the client's own (masked) frames back.
func (c *wsClient) readMessage() (opcode byte, n int, err error) {
	for {
		hdr, err := c.br.Peek(2)
		if err != nil {
			return 0, 0, err
		}
		fin, op := hdr[0]&0x80 != 0, hdr[0]&0x0f
		masked, size := hdr[1]&0x80 != 0, uint64(hdr[1]&0x7f)
		hlen := 2
		switch size {
		case 126:
			hlen += 2
		case 127:
			hlen += 8
		}
		if masked {
			hlen += 4
		}
		if hdr, err = c.br.Peek(hlen); err != nil {
			return 0, 0, err
		}
		switch size {
		case 126:
			size = uint64(binary.BigEndian.Uint16(hdr[2:4]))
		case 127:
			size = binary.BigEndian.Uint64(hdr[2:10])
		}
		if size > maxClientMessage || n+int(size) > maxClientMessage {
			return 0, 0, errMessageTooLarge
		}
		if op == 0x8 {
			code := 1005
			if size >= 2 {
				if p, err := c.br.Peek(hlen + 2); err == nil {
					code = int(binary.BigEndian.Uint16(p[hlen:]))
				}
			}
			return 0, 0, closeError{code}
		}
		if _, err := c.br.Discard(hlen + int(size)); err != nil {
			return 0, 0, err
		}
		if op >= 0x8 {
			continue // ping or pong: not part of the echo
		}
		if op != 0 {
			opcode = op
		}
		n += int(size)
		if fin {
			return opcode, n, nil
		}
	}
}

// readMessageData reads one whole message as readMessage does, but copies
// its payload out, unmasked if a frame was masked, and reports whether any
// frame was. It is for checking one echo before timing, never inside it.
func (c *wsClient) readMessageData() (opcode byte, masked bool, payload []byte, err error) {
	for {
		hdr, err := c.br.Peek(2)
		if err != nil {
			return 0, false, nil, err
		}
		fin, op, m := hdr[0]&0x80 != 0, hdr[0]&0x0f, hdr[1]&0x80 != 0
		size, hlen := uint64(hdr[1]&0x7f), 2
		switch size {
		case 126:
			hlen += 2
		case 127:
			hlen += 8
		}
		if m {
			hlen += 4
		}
		if hdr, err = c.br.Peek(hlen); err != nil {
			return 0, false, nil, err
		}
		switch size {
		case 126:
			size = uint64(binary.BigEndian.Uint16(hdr[2:4]))
		case 127:
			size = binary.BigEndian.Uint64(hdr[2:10])
		}
		if size > maxClientMessage || len(payload)+int(size) > maxClientMessage {
			return 0, false, nil, errMessageTooLarge
		}
		var key [4]byte
		if m {
			copy(key[:], hdr[hlen-4:hlen])
		}
		if _, err := c.br.Discard(hlen); err != nil {
			return 0, false, nil, err
		}
		data := make([]byte, size)
		if _, err := io.ReadFull(c.br, data); err != nil {
			return 0, false, nil, err
		}
		if m {
			for i := range data {
				data[i] ^= key[i&3]
			}
		}
		switch {
		case op == 0x8:
			return 0, false, nil, closeError{1005}
		case op >= 0x8:
			continue // ping or pong: not part of the echo
		case op != 0:
			opcode = op
		}
		masked = masked || m
		payload = append(payload, data...)
		if fin {
			return opcode, masked, payload, nil
		}
	}
}

// loadResult is what one bounded echo run measured.
type loadResult struct {
	msgs    int           // echoes received inside the timed window
	elapsed time.Duration // from the first send to the last timed echo
	total   int           // echoes received, the drained ones included
	wrong   int           // echoes whose length differed from the message
}

// echoLoad sends frame (carrying size payload bytes) with at most window
// messages outstanding, for about d or until maxMsgs messages, and records
// every round trip in h. When the time is up it stops sending and drains
// what is still in flight, so the connection is clean for the next trial.
func (c *wsClient) echoLoad(frame []byte, size, window int, d time.Duration, maxMsgs int, h *latencyHist) (loadResult, error) {
	// No server should need more than this beyond d; a server that does
	// has stalled, and the trial fails instead of hanging the run.
	_ = c.conn.SetDeadline(time.Now().Add(d + 10*time.Second))
	defer c.conn.SetDeadline(time.Time{})
	if window <= 1 {
		return c.echoSerial(frame, size, d, maxMsgs, h)
	}
	return c.echoWindow(frame, size, window, d, maxMsgs, h)
}

// echoSerial is one message in flight: write, wait for the echo, repeat.
func (c *wsClient) echoSerial(frame []byte, size int, d time.Duration, maxMsgs int, h *latencyHist) (loadResult, error) {
	var res loadResult
	start := time.Now()
	for res.msgs < maxMsgs {
		t0 := time.Now()
		if t0.Sub(start) >= d {
			break
		}
		if _, err := c.conn.Write(frame); err != nil {
			return res, err
		}
		_, n, err := c.readMessage()
		if err != nil {
			return res, err
		}
		now := time.Now()
		h.add(now.Sub(t0))
		if n != size {
			res.wrong++
		}
		res.msgs++
		res.total++
		res.elapsed = now.Sub(start)
	}
	return res, nil
}

// echoWindow keeps window messages in flight: a writer goroutine sends one
// message per credit, and the reader hands a credit back per echo.
// Echoes come back in order, so message i's send time sits in slot
// i % window, which the writer cannot reuse before the reader has read it
// (it needs the credit that reading returns).
func (c *wsClient) echoWindow(frame []byte, size, window int, d time.Duration, maxMsgs int, h *latencyHist) (loadResult, error) {
	var (
		res      loadResult
		sentAt   = make([]atomic.Int64, window)
		credits  = make(chan struct{}, window)
		stop     atomic.Bool
		sent     atomic.Int64
		writeErr atomic.Value
		done     = make(chan struct{})
		quit     = make(chan struct{}) // closed on return: frees a writer waiting for a credit
		start    = time.Now()
	)
	defer close(quit)
	for range window {
		credits <- struct{}{}
	}
	go func() {
		defer close(done)
		for i := 0; i < maxMsgs; i++ {
			select {
			case <-credits:
			case <-quit:
				return
			}
			if stop.Load() {
				return
			}
			sentAt[i%window].Store(int64(time.Since(start)))
			if _, err := c.conn.Write(frame); err != nil {
				writeErr.Store(err)
				return
			}
			sent.Add(1)
		}
	}()

	received := 0
	read := func() error {
		_, n, err := c.readMessage()
		if err != nil {
			return err
		}
		if n != size {
			res.wrong++
		}
		received++
		res.total = received
		credits <- struct{}{}
		return nil
	}
	for received < maxMsgs {
		if err := read(); err != nil {
			stop.Store(true)
			return res, err
		}
		now := time.Since(start)
		h.add(now - time.Duration(sentAt[(received-1)%window].Load()))
		res.msgs, res.elapsed = received, now
		if now >= d {
			break
		}
	}

	// Drain: no new sends; read every echo still in flight. Once nothing
	// is in flight the writer always finds a credit (one is missing only
	// while its echo travels), sees stop and exits; a message it was
	// writing at that moment is read after it has.
	stop.Store(true)
	for int64(received) < sent.Load() {
		if err := read(); err != nil {
			return res, err
		}
	}
	<-done
	for int64(received) < sent.Load() {
		if err := read(); err != nil {
			return res, err
		}
	}
	if err, _ := writeErr.Load().(error); err != nil {
		return res, err
	}
	return res, nil
}

// closeNow closes the connection with SO_LINGER 0: the kernel resets it
// instead of keeping it in TIME_WAIT, so thousands of short-lived client
// connections do not use up the source ports of the next trial.
func (c *wsClient) closeNow() error {
	if tc, ok := c.conn.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	return c.conn.Close()
}

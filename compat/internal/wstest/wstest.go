// Package wstest is a raw WebSocket client for tests: it performs the
// upgrade by hand and sends any bytes, valid or not, so tests can check how
// a server answers bad input. It reads frames with wsframe in the client
// role.
package wstest

import (
	"bufio"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/hotpath-go/hotpath/wsframe"
)

// Conn is a client connection under test.
type Conn struct {
	NC       net.Conn
	Response *http.Response
	br       *bufio.Reader
	dec      *wsframe.Decoder
	buf      []byte
	asm      []byte
}

// Dial opens a TCP connection to addr and upgrades it at path with the
// extra request headers given as "Name: value" lines.
func Dial(addr, path string, headers ...string) (*Conn, error) {
	nc, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return nil, err
	}
	var key [16]byte
	rand.Read(key[:])
	req := "GET " + path + " HTTP/1.1\r\nHost: " + addr + "\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n" +
		"Sec-WebSocket-Key: " + base64.StdEncoding.EncodeToString(key[:]) + "\r\nSec-WebSocket-Version: 13\r\n"
	for _, h := range headers {
		req += h + "\r\n"
	}
	req += "\r\n"
	nc.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(nc, req); err != nil {
		nc.Close()
		return nil, err
	}
	br := bufio.NewReader(nc)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		nc.Close()
		return nil, err
	}
	cfg := wsframe.Config{Role: wsframe.Client, MaxMessageSize: 64 << 20}
	if strings.HasPrefix(resp.Header.Get("Sec-WebSocket-Extensions"), "permessage-deflate") {
		cfg.Extensions = wsframe.Rsv1 // compressed messages arrive with RSV1 set
	}
	c := &Conn{NC: nc, Response: resp, br: br, dec: wsframe.NewDecoder(cfg)}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		nc.Close()
		return c, fmt.Errorf("wstest: upgrade refused: %s", resp.Status)
	}
	return c, nil
}

// Extensions returns the Sec-WebSocket-Extensions the server answered.
func (c *Conn) Extensions() string { return c.Response.Header.Get("Sec-WebSocket-Extensions") }

// WriteRaw writes b as it is.
func (c *Conn) WriteRaw(b []byte) error {
	_, err := c.NC.Write(b)
	return err
}

// WriteFrame writes one masked frame, any frame: those RFC 6455 §5.5
// forbids (a control frame over 125 bytes or fragmented) included, which
// wsframe.AppendMaskedFrame refuses to build.
func (c *Conn) WriteFrame(op wsframe.Opcode, payload []byte, flags wsframe.Flags) error {
	key := wsframe.NewMaskKey()
	b := wsframe.AppendHeader(nil, wsframe.Header{Flags: flags, Opcode: op, Length: int64(len(payload)), Masked: true, Key: key})
	start := len(b)
	b = append(b, payload...)
	wsframe.Mask(b[start:], key, 0)
	return c.WriteRaw(b)
}

// WriteMessage writes one whole masked message.
func (c *Conn) WriteMessage(op wsframe.Opcode, payload []byte) error {
	return c.WriteFrame(op, payload, wsframe.Fin)
}

// ReadMessage returns the next message or control frame, waiting at most
// timeout.
func (c *Conn) ReadMessage(timeout time.Duration) (wsframe.Message, error) {
	c.NC.SetReadDeadline(time.Now().Add(timeout))
	for {
		if len(c.buf) > 0 {
			m, n, err := c.dec.DecodeMessage(c.buf, &c.asm)
			c.buf = c.buf[n:]
			if err == nil {
				m.Payload = append([]byte(nil), m.Payload...)
				return m, nil
			}
			if !errors.Is(err, wsframe.ErrNeedMore) {
				return m, err
			}
		}
		var tmp [32 << 10]byte
		n, err := c.br.Read(tmp[:])
		c.buf = append(c.buf, tmp[:n]...)
		if err != nil && n == 0 {
			return wsframe.Message{}, err
		}
	}
}

// ReadClose reads until a close frame and returns its code, skipping data
// messages; it returns 1006 (abnormal) when the connection ends without one.
func (c *Conn) ReadClose(timeout time.Duration) (wsframe.CloseCode, string) {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		m, err := c.ReadMessage(time.Until(deadline))
		if err != nil {
			return wsframe.CloseAbnormal, err.Error()
		}
		if m.Opcode == wsframe.OpClose {
			return m.CloseCode, string(m.CloseReason())
		}
	}
	return wsframe.CloseAbnormal, "timeout"
}

// Close sends a close frame and closes the connection.
func (c *Conn) Close() error {
	c.WriteFrame(wsframe.OpClose, wsframe.AppendClosePayload(nil, wsframe.CloseNormal, ""), wsframe.Fin)
	return c.NC.Close()
}

// HasToken reports whether a comma-separated header value lists token.
func HasToken(v, token string) bool {
	for _, t := range strings.Split(v, ",") {
		if strings.TrimSpace(t) == token {
			return true
		}
	}
	return false
}

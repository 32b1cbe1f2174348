package client

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha1"
	"encoding/base64"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hotpath-go/hotpath/compat"
	"github.com/hotpath-go/hotpath/compat/wire"
	"github.com/hotpath-go/hotpath/dispatch"
	"github.com/hotpath-go/hotpath/wsframe"
)

// acceptMark in an input stands for the Sec-WebSocket-Accept value of the
// client's key, which the fuzzer cannot know.
const acceptMark = "{ACCEPT}"

// answerServer is one listener per fuzz process for FuzzUpgradeAnswer.
var answerServer = sync.OnceValue(func() net.Listener {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	return ln
})

// answerUpgrade plays a server that answers the client's upgrade request
// with the input (acceptMark replaced), then a server Capabilities
// packet, and ends its side of the connection; it reads what the client
// sends until the client closes. It returns the key the client sent.
func answerUpgrade(ln net.Listener, answer []byte) (key string, err error) {
	c, err := ln.Accept()
	if err != nil {
		return "", err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	req, err := http.ReadRequest(bufio.NewReader(c))
	if err != nil {
		return "", err
	}
	key = req.Header.Get("Sec-Websocket-Key")
	caps := wire.Append(nil, &wire.Packet{Kind: dispatch.KindCapabilities, Count: 1, Payload: wire.AppendPair(nil, "maxMessage", "4096")})
	out := bytes.ReplaceAll(answer, []byte(acceptMark), []byte(acceptOf(key)))
	out = wsframe.AppendFrame(out, wsframe.OpBinary, caps, wsframe.Fin)
	c.Write(out)
	c.(*net.TCPConn).CloseWrite()
	io.Copy(io.Discard, c)
	return key, nil
}

func acceptOf(key string) string {
	sum := sha1.Sum([]byte(key + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"))
	return base64.StdEncoding.EncodeToString(sum[:])
}

// validAnswer reports whether answer, as net/http reads it, is one RFC
// 6455 §4.1 lets a client take for its request with key, which offered
// the subprotocol hotpath.v1 and no extension: status 101, Upgrade
// "websocket", a Connection with the token "upgrade", the Sec-WebSocket-
// Accept of key, the subprotocol once (compat requires it; §11.3.4 allows
// it once), and no extension ("the client MUST _Fail the WebSocket
// Connection_" for an extension "not present in the client's handshake").
func validAnswer(answer []byte, key string) error {
	resp, err := http.ReadResponse(bufio.NewReader(bytes.NewReader(answer)), nil)
	if err != nil {
		return err
	}
	// RFC 6455 §11.3 has a server send these fields once; a client that
	// takes Upgrade twice, each right, is no worse for it.
	// Sec-WebSocket-Accept and -Protocol are held to one line below.
	one := func(name string) (string, bool) {
		v := resp.Header.Values(name)
		if len(v) == 0 {
			return "", false
		}
		for _, w := range v[1:] {
			if strings.TrimSpace(w) != strings.TrimSpace(v[0]) {
				return "", false
			}
		}
		return strings.TrimSpace(v[0]), true
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		return errors.New("status not 101")
	}
	if v, ok := one("Upgrade"); !ok || !strings.EqualFold(v, "websocket") {
		return errors.New("no Upgrade: websocket")
	}
	upgrade := false
	for _, v := range resp.Header.Values("Connection") {
		for t := range strings.SplitSeq(v, ",") {
			upgrade = upgrade || strings.EqualFold(strings.TrimSpace(t), "upgrade")
		}
	}
	if !upgrade {
		return errors.New("no Connection: upgrade")
	}
	// RFC 6455 §11.3.3: Sec-WebSocket-Accept "MUST NOT appear more than
	// once in an HTTP response" (b32ea3e).
	if v := resp.Header.Values("Sec-Websocket-Accept"); len(v) != 1 || strings.TrimSpace(v[0]) != acceptOf(key) {
		return errors.New("wrong Sec-WebSocket-Accept, or more than one")
	}
	// RFC 6455 §11.3.4: the subprotocol "MUST NOT appear more than once
	// in an HTTP response" (C1, fixed).
	if v := resp.Header.Values("Sec-Websocket-Protocol"); len(v) != 1 || strings.TrimSpace(v[0]) != compat.Subprotocol {
		return errors.New("wrong subprotocol, or more than one")
	}
	for _, v := range resp.Header.Values("Sec-Websocket-Extensions") {
		if strings.Trim(v, " \t,") != "" {
			return errors.New("an extension the client did not offer")
		}
	}
	return nil
}

// FuzzUpgradeAnswer feeds compat's Go client any bytes as the server's
// answer to its WebSocket upgrade (acceptMark stands for the right
// Sec-WebSocket-Accept), followed by a Capabilities packet: Dial must
// return before its context ends, and may succeed only for an answer
// validAnswer takes. A refusal with a status other than 101 that net/http
// reads is an *HTTPError with that status.
func FuzzUpgradeAnswer(f *testing.F) {
	valid := "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n" +
		"Sec-WebSocket-Accept: " + acceptMark + "\r\nSec-WebSocket-Protocol: " + compat.Subprotocol + "\r\n\r\n"
	f.Add([]byte(valid))
	f.Add([]byte(strings.Replace(valid, acceptMark, "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=", 1)))
	f.Add([]byte(strings.Replace(valid, "\r\n\r\n", "\r\nSec-WebSocket-Extensions: permessage-deflate\r\n\r\n", 1)))
	f.Add([]byte(strings.Replace(valid, "Sec-WebSocket-Protocol: ", "Sec-WebSocket-Protocol: x\r\nSec-WebSocket-Protocol: ", 1)))
	f.Add([]byte(strings.Replace(valid, "Sec-WebSocket-Accept: ", "Sec-WebSocket-Accept: x\r\nSec-WebSocket-Accept: ", 1)))
	f.Add([]byte(strings.Replace(valid, "\r\n\r\n", "\r\nSec-WebSocket-Accept: "+acceptMark+"\r\n\r\n", 1)))
	f.Add([]byte(strings.ReplaceAll(valid, "\r\n", "\n")))
	f.Add([]byte(strings.Replace(valid, "\r\n\r\n", "\r\nSec-WebSocket-Protocol: "+compat.Subprotocol+"\r\n\r\n", 1)))
	f.Add([]byte(strings.Replace(valid, "Sec-WebSocket-Protocol: ", "Sec-WebSocket-Protocol : ", 1)))
	f.Add([]byte(strings.Replace(valid, "\r\n\r\n", "\r\n X-Folded: x\r\n\r\n", 1)))
	f.Add([]byte("HTTP/1.1 403 Forbidden\r\nContent-Length: 4\r\n\r\nnope"))
	f.Add([]byte("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"))
	ln := answerServer()
	f.Fuzz(func(t *testing.T, answer []byte) {
		type served struct {
			key string
			err error
		}
		done := make(chan served, 1)
		go func() {
			key, err := answerUpgrade(ln, answer)
			done <- served{key, err}
		}()
		// Long enough for a loaded machine; an input ends in milliseconds.
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		c, err := compat.Dial(ctx, "ws://"+ln.Addr().String()+"/ws", compat.ClientOptions{
			Reconnect:   compat.Reconnect{Disabled: true},
			IdleTimeout: -1,
			Logger:      slog.New(slog.DiscardHandler),
		})
		if ctx.Err() != nil {
			t.Fatalf("Dial returned after its context ended: %v", err)
		}
		if err == nil {
			c.Close()
		}
		var s served
		select {
		case s = <-done:
		case <-time.After(20 * time.Second):
			t.Fatal("the connection never ended")
		}
		if s.err != nil {
			t.Fatalf("fake server: %v", s.err)
		}
		sent := bytes.ReplaceAll(answer, []byte(acceptMark), []byte(acceptOf(s.key)))
		if err == nil {
			if why := validAnswer(sent, s.key); why != nil {
				t.Fatalf("Dial took an answer RFC 6455 §4.1 fails (%v): %q", why, sent)
			}
			return
		}
		var he *compat.HTTPError
		if errors.As(err, &he) {
			resp, rerr := http.ReadResponse(bufio.NewReader(bytes.NewReader(sent)), nil)
			if rerr == nil && resp.StatusCode != he.Status {
				t.Fatalf("answer with status %d refused as %d: %q", resp.StatusCode, he.Status, sent)
			}
		}
	})
}

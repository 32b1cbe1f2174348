package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"log"
	"net"
	"net/http"
	"sync"
	"time"

	coder "github.com/coder/websocket"
	"github.com/gobwas/ws"
	gorilla "github.com/gorilla/websocket"
	"github.com/lesismal/nbio/logging"
	"github.com/lesismal/nbio/nbhttp"
	nbws "github.com/lesismal/nbio/nbhttp/websocket"
	"github.com/lxzan/gws"
)

// An echoServer is one library's raw echo: every message it reads goes
// back as it came, on the library's fastest idiomatic path, with the
// library's default limits and buffers. The echo scenario drives each over
// loopback; the idle scenario runs each in a process of its own (-serve)
// and holds thousands of connections to it. hotpath's server joins by
// appending an entry with Role Ours from its own file's init.
type echoServer struct {
	Library string
	Role    Role
	// Mode is how the server holds a connection: "goroutine" (a goroutine
	// per connection, blocked in a read) or "epoll" (an event loop, no
	// goroutine while a connection is idle).
	Mode string
	// Handshake is false for the raw TCP floor, which speaks no HTTP.
	Handshake bool
	// Serve serves ln until stop is called; stop closes the listener, and
	// connections end when their clients close them.
	Serve func(ln net.Listener) (stop func(), err error)
	// Request, when set, wraps the payload the client sends in what the
	// server expects (an RPC call) and says how long the answer is; nil
	// for a raw echo, whose answer is the payload itself.
	Request func(payload []byte) (request []byte, answerSize int)
}

// message returns what the client sends to srv for payload and the length
// of the answer it expects back.
func (srv echoServer) message(payload []byte) ([]byte, int) {
	if srv.Request == nil {
		return payload, len(payload)
	}
	return srv.Request(payload)
}

var echoServers = []echoServer{
	{Library: "gorilla/websocket", Role: Peer, Mode: "goroutine", Handshake: true, Serve: serveGorilla},
	{Library: "gorilla/websocket (write buffer pool)", Role: Peer, Mode: "goroutine", Handshake: true, Serve: serveGorillaPooled},
	{Library: "lxzan/gws", Role: Peer, Mode: "goroutine", Handshake: true, Serve: serveGws},
	{Library: "gobwas/ws", Role: Peer, Mode: "goroutine", Handshake: true, Serve: serveGobwas},
	{Library: "coder/websocket", Role: Peer, Mode: "goroutine", Handshake: true, Serve: serveCoder},
	{Library: "lesismal/nbio (goroutine)", Role: Peer, Mode: "goroutine", Handshake: true, Serve: serveNbioGoroutine},
	{Library: "lesismal/nbio (epoll)", Role: Peer, Mode: "epoll", Handshake: true, Serve: serveNbioEpoll},
	{Library: "raw TCP echo (floor)", Role: Limit, Mode: "goroutine", Handshake: false, Serve: serveRawEcho},
}

func findEchoServer(library string) (echoServer, bool) {
	for _, s := range echoServers {
		if s.Library == library {
			return s, true
		}
	}
	return echoServer{}, false
}

// maxEchoMessage is the read limit every server is given where its default
// is smaller than the largest message a scenario sends.
const maxEchoMessage = 16 << 20

// serveHTTP runs handler on a net/http server over ln, quietly: a client
// resetting its connection at the end of a trial is not news.
func serveHTTP(ln net.Listener, handler http.HandlerFunc) func() {
	srv := &http.Server{Handler: handler, ErrorLog: log.New(io.Discard, "", 0)}
	go func() { _ = srv.Serve(ln) }()
	return func() { _ = srv.Close() }
}

// acceptLoop hands every accepted connection to handle on its own
// goroutine until ln is closed. A failed accept (out of file descriptors)
// is retried after a pause rather than ending the server.
func acceptLoop(ln net.Listener, handle func(net.Conn)) {
	for {
		conn, err := ln.Accept()
		if errors.Is(err, net.ErrClosed) {
			return
		}
		if err != nil {
			time.Sleep(10 * time.Millisecond)
			continue
		}
		go handle(conn)
	}
}

// serveGorilla: net/http, Upgrade, then NextReader into a reused buffer and
// WriteMessage. (ReadMessage would allocate a new slice per message.)
func serveGorilla(ln net.Listener) (func(), error) {
	return serveGorillaWith(ln, gorilla.Upgrader{})
}

// serveGorillaPooled is serveGorilla with a WriteBufferPool, the setting
// gorilla's documentation gives for many connections that write little: a
// connection holds a write buffer only while it writes, as hotpath's do,
// instead of for its whole life.
func serveGorillaPooled(ln net.Listener) (func(), error) {
	return serveGorillaWith(ln, gorilla.Upgrader{WriteBufferPool: &sync.Pool{}})
}

func serveGorillaWith(ln net.Listener, up gorilla.Upgrader) (func(), error) {
	return serveHTTP(ln, func(w http.ResponseWriter, r *http.Request) {
		c, err := up.Upgrade(w, r, nil)
		if err != nil {
			return
		}
		defer c.Close()
		var buf bytes.Buffer
		for {
			op, rd, err := c.NextReader()
			if err != nil {
				return
			}
			buf.Reset()
			if _, err := buf.ReadFrom(rd); err != nil {
				return
			}
			if err := c.WriteMessage(op, buf.Bytes()); err != nil {
				return
			}
		}
	}), nil
}

// gwsEcho answers every message from gws's read loop; the message buffer
// goes back to gws's pool on Close.
type gwsEcho struct{ gws.BuiltinEventHandler }

func (gwsEcho) OnMessage(c *gws.Conn, m *gws.Message) {
	_ = c.WriteMessage(m.Opcode, m.Bytes())
	_ = m.Close()
}

// serveGws runs the loop of gws.Server.RunListener (read the request,
// UpgradeFromConn, ReadLoop on the connection's goroutine) but returns
// when the listener closes; RunListener itself retries a closed
// listener's Accept forever.
func serveGws(ln net.Listener) (func(), error) {
	up := gws.NewUpgrader(gwsEcho{}, &gws.ServerOption{ReadMaxPayloadSize: maxEchoMessage})
	go acceptLoop(ln, func(conn net.Conn) {
		br := bufio.NewReaderSize(conn, 4<<10)
		r, err := http.ReadRequest(br)
		if err != nil {
			conn.Close()
			return
		}
		c, err := up.UpgradeFromConn(conn, br, r)
		if err != nil {
			return // UpgradeFromConn has answered and closed
		}
		c.ReadLoop()
	})
	return func() { _ = ln.Close() }, nil
}

// serveGobwas: gobwas/ws's zero-copy Upgrade on the raw connection, then
// its low-level header API over a bufio.Reader and bufio.Writer, unmasking
// in place into a reused payload buffer and flushing once per echo.
func serveGobwas(ln net.Listener) (func(), error) {
	go acceptLoop(ln, func(conn net.Conn) {
		defer conn.Close()
		if _, err := ws.Upgrade(conn); err != nil {
			return
		}
		br, bw := bufio.NewReader(conn), bufio.NewWriter(conn)
		var payload []byte
		for {
			h, err := ws.ReadHeader(br)
			if err != nil || h.Length > maxEchoMessage {
				return
			}
			if int64(cap(payload)) < h.Length {
				payload = make([]byte, h.Length)
			}
			payload = payload[:h.Length]
			if _, err := io.ReadFull(br, payload); err != nil {
				return
			}
			if h.Masked {
				ws.Cipher(payload, h.Mask, 0)
			}
			var out ws.Frame
			switch h.OpCode {
			case ws.OpClose:
				_ = ws.WriteFrame(bw, ws.NewCloseFrame(payload))
				_ = bw.Flush()
				return
			case ws.OpPing:
				out = ws.NewPongFrame(payload)
			case ws.OpPong:
				continue
			default:
				out = ws.NewFrame(h.OpCode, h.Fin, payload)
			}
			if err := ws.WriteFrame(bw, out); err != nil {
				return
			}
			if err := bw.Flush(); err != nil {
				return
			}
		}
	})
	return func() { _ = ln.Close() }, nil
}

// serveCoder: net/http, Accept, then Reader into a reused buffer and Write
// (one frame per message). Read would allocate a new slice per message.
func serveCoder(ln net.Listener) (func(), error) {
	return serveHTTP(ln, func(w http.ResponseWriter, r *http.Request) {
		c, err := coder.Accept(w, r, nil)
		if err != nil {
			return
		}
		defer c.CloseNow()
		c.SetReadLimit(maxEchoMessage)
		// Not r.Context(): coder/websocket warns it may misbehave once
		// the connection is hijacked.
		ctx := context.Background()
		var buf bytes.Buffer
		for {
			typ, rd, err := c.Reader(ctx)
			if err != nil {
				return
			}
			buf.Reset()
			if _, err := buf.ReadFrom(rd); err != nil {
				return
			}
			if err := c.Write(ctx, typ, buf.Bytes()); err != nil {
				return
			}
		}
	}), nil
}

// nbioUpgrader is nbio's upgrader with an echo handler. Its default
// 120-second keepalive deadline is turned off, as no other server here
// has one.
func nbioUpgrader() *nbws.Upgrader {
	logging.SetLevel(logging.LevelNone)
	up := nbws.NewUpgrader()
	up.KeepaliveTime = 0
	up.MessageLengthLimit = maxEchoMessage
	up.OnMessage(func(c *nbws.Conn, op nbws.MessageType, data []byte) {
		_ = c.WriteMessage(op, data)
	})
	return up
}

// serveNbioEpoll: nbio's own engine, the mode it exists for: connections
// live in an epoll loop, messages run on its goroutine pool. MaxLoad is
// raised from its default of 10,000 so the idle scenario's connections
// all fit.
func serveNbioEpoll(ln net.Listener) (func(), error) {
	up := nbioUpgrader()
	engine := nbhttp.NewEngine(nbhttp.Config{
		Network: "tcp",
		Addrs:   []string{ln.Addr().String()},
		Listen:  func(string, string) (net.Listener, error) { return ln, nil },
		MaxLoad: 1 << 20,
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = up.Upgrade(w, r, nil)
		}),
		ReleaseWebsocketPayload: true,
	})
	if err := engine.Start(); err != nil {
		return nil, err
	}
	return engine.Stop, nil
}

// serveNbioGoroutine: nbio's upgrader on a net/http server, its
// documented way to serve from the standard library: a reading goroutine
// per connection, writes handed to a goroutine per burst.
func serveNbioGoroutine(ln net.Listener) (func(), error) {
	up := nbioUpgrader()
	return serveHTTP(ln, func(w http.ResponseWriter, r *http.Request) {
		_, _ = up.Upgrade(w, r, nil)
	}), nil
}

// serveRawEcho is the floor: bytes back as they arrive, no HTTP, no
// framing, and no buffer held while a connection waits (see rawEcho).
func serveRawEcho(ln net.Listener) (func(), error) {
	go acceptLoop(ln, rawEcho)
	return func() { _ = ln.Close() }, nil
}

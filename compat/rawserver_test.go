package compat

// A hand-made server for the tests that play the server to the Go client:
// it speaks the WebSocket carrier with gobwas/ws and writes whatever
// packets, good or bad, a test gives it, where the real Server would
// refuse to. The tests whose server misbehaves below the WebSocket layer
// (a bad upgrade answer, a partial write) keep their own.

import (
	"net"
	"testing"
	"time"

	"github.com/gobwas/ws"
	"github.com/gobwas/ws/wsutil"
	"github.com/hotpath-go/hotpath/compat/wire"
	"github.com/hotpath-go/hotpath/dispatch"
	"github.com/hotpath-go/hotpath/wsframe"
)

// listenLoopback listens on a free loopback port for a raw server; the
// listener closes when the test ends.
func listenLoopback(t *testing.T) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln
}

// capsOf is a server's Capabilities packet holding the pairs key, value,
// key, value... in that order, kept as they are (an empty key too).
func capsOf(kv ...string) []byte {
	if len(kv)%2 != 0 {
		panic("capsOf: a key without its value")
	}
	var pairs []byte
	for i := 0; i < len(kv); i += 2 {
		pairs = wire.AppendPair(pairs, kv[i], kv[i+1])
	}
	return wire.Append(nil, &wire.Packet{Kind: dispatch.KindCapabilities, Count: uint32(len(kv) / 2), Payload: pairs})
}

// acceptRaw is the start of a raw server: it accepts one connection on
// ln, upgrades it as the Server does (subprotocol hotpath.v1), and, unless
// codec is "", sends capabilities naming codec before the client asks.
func acceptRaw(ln net.Listener, codec string) (net.Conn, error) {
	nc, err := ln.Accept()
	if err != nil {
		return nil, err
	}
	if _, err := (ws.Upgrader{Protocol: func(p []byte) bool { return string(p) == Subprotocol }}).Upgrade(nc); err != nil {
		nc.Close()
		return nil, err
	}
	if codec != "" {
		if err := wsutil.WriteServerBinary(nc, capsOf("codec", codec)); err != nil {
			nc.Close()
			return nil, err
		}
	}
	return nc, nil
}

// rawClose is what a raw server read of the client's close frame: code 0
// when the connection ended (or hangBound passed) without one.
type rawClose struct {
	code   wsframe.CloseCode
	reason string
}

// serveRaw is the rest of a raw server: it reads the client's frames on
// nc, calls on (unless nil) with the packet of each binary frame that
// decodes, in order, on this goroutine, and returns at the client's close
// frame, which it does not answer. It closes nc. A connection that lasts
// past hangBound ends there, so a test that waits for the close fails
// rather than hangs.
func serveRaw(nc net.Conn, on func(p wire.Packet)) rawClose {
	defer nc.Close()
	nc.SetDeadline(time.Now().Add(hangBound))
	for {
		f, err := ws.ReadFrame(nc)
		if err != nil {
			return rawClose{}
		}
		f = ws.UnmaskFrameInPlace(f)
		switch f.Header.OpCode {
		case ws.OpClose:
			code, reason := ws.ParseCloseFrameData(f.Payload)
			return rawClose{wsframe.CloseCode(code), reason}
		case ws.OpBinary:
			if p, err := wire.Decode(f.Payload); err == nil && on != nil {
				on(p)
			}
		}
	}
}

// rawServer is a whole raw server of one connection: acceptRaw, then
// serveRaw with on, which writes its answers to nc.
func rawServer(ln net.Listener, codec string, on func(nc net.Conn, p wire.Packet)) rawClose {
	nc, err := acceptRaw(ln, codec)
	if err != nil {
		return rawClose{}
	}
	return serveRaw(nc, func(p wire.Packet) {
		if on != nil {
			on(nc, p)
		}
	})
}

// wantClientClose waits up to hangBound for what a raw server read of the
// client's close, and checks its code, and its reason unless reason is "".
func wantClientClose(t *testing.T, closed <-chan rawClose, code wsframe.CloseCode, reason string) {
	t.Helper()
	select {
	case got := <-closed:
		if got.code != code || reason != "" && got.reason != reason {
			t.Errorf("the client closed with %d %q, want %d %s", got.code, got.reason, code, reason)
		}
	case <-time.After(hangBound):
		t.Fatal("the client never closed the connection")
	}
}

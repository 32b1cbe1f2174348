package compat

// What ends an inflate pause besides a close asked for through the Peer
// or the Client: a close the link asks for off the read loop (a
// violation in a datagram, a write that failed), and the carrier
// connection's end.

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gobwas/ws/wsutil"
	"github.com/hotpath-go/hotpath/compat/wire"
	"github.com/hotpath-go/hotpath/dictionary"
	"github.com/hotpath-go/hotpath/dispatch"
	"github.com/hotpath-go/hotpath/wsframe"
	"github.com/pion/sctp"
	"github.com/quic-go/quic-go"
)

// A server's read loop paused for MaxInflateRate ends its pause at once,
// on every carrier but WebSocket (TestInflatePauseEndsWithTheWebSocket),
// when the connection ends off the read loop: a packet of a kind
// datagrams may not carry (PROTOCOL.md §8.4: 1008), found by the
// datagram handler, which closes the link itself (pktConn.violate), not
// through the Peer; or the client dropping the carrier connection, which
// no read tells of while the loop is paused. Both left the pause to run
// its time, up to maxInflatePause. The pause here is a whole
// maxInflatePause; the hook tells whether it ran out.
func TestInflatePauseEndsWithTheCarrier(t *testing.T) {
	const size = 64 << 10
	r, d := pauseRouter(t)
	e := newCarrierEnv(t, Options{Router: r, Limits: pauseLimits(size)})
	paused, ended := watchPauses(t, e.srv)
	for _, carrier := range goCarriers {
		for _, how := range []string{"violation", "peer gone"} {
			t.Run(carrierName(carrier)+"/"+how, func(t *testing.T) {
				c := e.dial(t, carrier, ClientOptions{Dictionary: d, Reconnect: Reconnect{Disabled: true}})
				cc := sendPauseBombs(t, c, size)
				select {
				case <-paused:
				case <-time.After(hangBound):
					t.Fatal("the third event did not pause the reading")
				}
				var timedOut bool
				switch how {
				case "violation":
					// A datagram may be lost: it is sent again until the
					// pause ends.
					call := wire.AppendCall(nil, dispatch.KindCall, 9, "ping", 0, nil)
					resend := time.NewTicker(50 * time.Millisecond)
					defer resend.Stop()
					guard := time.After(hangBound)
				wait:
					for {
						cc.link.sendDatagram(call)
						select {
						case timedOut = <-ended:
							break wait
						case <-resend.C:
						case <-guard:
							t.Fatal("the pause did not end")
						}
					}
				case "peer gone":
					cc.link.abort()
					select {
					case timedOut = <-ended:
					case <-time.After(hangBound):
						t.Fatal("the pause did not end")
					}
				}
				if timedOut {
					t.Error("the pause ran its whole time: the connection's end did not cut it short")
				}
				waitLong(t, "the connection's end", func() bool { return e.srv.Peers() == 0 })
			})
		}
	}
}

// A Go client's read loop paused for MaxInflateRate ends its pause at
// once when the server closes the QUIC connection meanwhile, which the
// paused loop does not read, or sends a datagram of a kind datagrams may
// not carry (PROTOCOL.md §8.4: 1008), which the client's datagram
// handler closes the connection for. The pause is a whole
// maxInflatePause; the hook tells whether it ran out.
func TestClientInflatePauseEndsWithTheCarrier(t *testing.T) {
	d := bombDictionary(t)
	bomb := dictBomb(t, d)
	for _, how := range []string{"server closes", "violation"} {
		t.Run(how, func(t *testing.T) {
			send := make(chan struct{})
			act := make(chan struct{})
			url, opts := rawQUICServerCaps(t, capsOf("codec", "json", "dict", "deflate:"+d.ID()), func(qc *quic.Conn, control *quic.Stream) {
				if !writeBombsWhen(qc, control, send, bomb, 3) {
					return
				}
				select {
				case <-act:
				case <-qc.Context().Done():
					return
				}
				if how == "server closes" {
					qc.CloseWithError(0, "")
					return
				}
				call := wire.AppendCall(nil, dispatch.KindCall, 9, "ping", 0, nil)
				resend := time.NewTicker(50 * time.Millisecond)
				defer resend.Stop()
				for {
					qc.SendDatagram(call) // may be lost: sent until the connection ends
					select {
					case <-resend.C:
					case <-qc.Context().Done():
						return
					}
				}
			})
			_, cc := dialBombed(t, url, opts, d, 1)
			cutClientPause(t, cc, send, act, "the connection's end")
		})
	}
}

// sendPauseBombs has c send three Events, dictionary compressed, each
// inflating to about size: with pauseLimits(size), two spend the burst
// and a second more, and the third pauses the server's reading for a
// whole maxInflatePause. It returns c's connection.
func sendPauseBombs(t *testing.T, c *Client, size int) *clientConn {
	t.Helper()
	if err := callWithin(t, c, context.Background(), "ping", []byte("1"), nil); err != nil {
		t.Fatal(err)
	}
	cc, err := c.current()
	if err != nil || cc.dict.Load() == nil {
		t.Fatalf("no dictionary negotiated: %v", err)
	}
	pkt := wire.Append(nil, &wire.Packet{Kind: dispatch.KindEvent, Name: []byte("bomb"), Payload: []byte(`"` + strings.Repeat("a", size-80) + `"`)})
	for range 3 {
		b, release, ok := cc.dict.Load().compressPacket(pkt)
		if !ok {
			t.Fatal("the event did not compress")
		}
		cc.link.sendBuilt(b)
		release()
	}
	return cc
}

// A server's read loop paused for MaxInflateRate over WebSocket, served
// plain or over TLS, ends its pause at once when the connection ends off
// the read loop: the client gone (its FIN, its reset), which the paused
// loop does not read; a write that failed (the outbox's onWriteError,
// which drops the socket: the paused loop reads no closed socket); a
// close asked of the link alone (requestClose, whose wake-up is a read
// deadline). Each left the pause to run its time, up to
// maxInflatePause. The pause is a whole maxInflatePause; the hook tells
// whether it ran out. The client's going is seen without a read on
// Linux only (watchHangUp), over TLS through the TCP connection under
// it; the connection then ends as at the EOF or reset the next read
// would have met: 1006, or the client's close when it sent one before
// its FIN (closeUnread).
func TestInflatePauseEndsWithTheWebSocket(t *testing.T) {
	const size = 64 << 10
	r, d := pauseRouter(t)
	disconnected := make(chan error, 1)
	s, addr := newTestServer(t, Options{
		Router:       r,
		Limits:       pauseLimits(size),
		OnDisconnect: func(_ *Peer, err error) { disconnected <- err },
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go s.Serve(tls.NewListener(ln, testCert().ServerTLSConfig()))
	paused, ended := watchPauses(t, s)
	writeFailed := errors.New("test: the write failed")
	for _, url := range []string{"ws://" + addr + "/ws", "wss://" + ln.Addr().String() + "/ws"} {
		for _, how := range []string{"peer closes", "peer closes after its close frame", "peer resets", "write fails", "close asked"} {
			t.Run(url[:strings.Index(url, ":")]+"/"+how, func(t *testing.T) {
				peerGoes, tlsOn := strings.HasPrefix(how, "peer"), strings.HasPrefix(url, "wss:")
				if peerGoes && runtime.GOOS != "linux" {
					t.Skip("a peer's going is seen without a read on Linux only")
				}
				ctx, cancel := context.WithTimeout(context.Background(), hangBound)
				defer cancel()
				c, err := Dial(ctx, url, ClientOptions{Dictionary: d, TLSConfig: testCert().ClientTLSConfig(), Reconnect: Reconnect{Disabled: true}})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { c.Close() })
				cc := sendPauseBombs(t, c, size)
				var p *Peer
				select {
				case p = <-paused:
				case <-time.After(hangBound):
					t.Fatal("the third event did not pause the reading")
				}
				ws := p.link.(*wsConn)
				switch how {
				case "peer closes", "peer closes after its close frame":
					if how == "peer closes after its close frame" {
						cws := cc.link.(*wsConn)
						cws.sendClose(wsframe.CloseGoingAway, "")
						select {
						case <-cws.out.Drained():
						case <-time.After(hangBound):
							t.Fatal("the close frame was not written")
						}
					}
					nc := cc.link.(*wsConn).nc
					if tc, ok := nc.(*tls.Conn); ok {
						nc = tc.NetConn().(*upgradeConn).Conn
					}
					if err := nc.(*net.TCPConn).CloseWrite(); err != nil { // a FIN
						t.Fatal(err)
					}
				case "peer resets":
					cc.link.abort()
				case "write fails":
					ws.onWriteError(writeFailed)
				case "close asked":
					ws.requestClose(wsframe.CloseGoingAway, "")
				}
				wantPauseCutShort(t, ended, "the connection's end")
				select {
				case err := <-disconnected:
					var ce *CloseError
					switch {
					case how == "peer closes after its close frame":
						if !errors.As(err, &ce) || ce.Code != wsframe.CloseGoingAway || !ce.Remote {
							t.Errorf("the server ended the connection with %v, want the client's 1001", err)
						}
					case peerGoes && CloseStatus(err) != wsframe.CloseAbnormal:
						t.Errorf("the server ended the connection with %v, want 1006", err)
					case how == "write fails" && !tlsOn && !errors.Is(err, writeFailed):
						// Over TLS, the close_notify that the drop sends
						// may have the client gone, and its close read,
						// before the socket is closed: 1006 then.
						t.Errorf("the server ended the connection with %v, want the write's error", err)
					}
				case <-time.After(hangBound):
					t.Fatal("the connection did not end")
				}
			})
		}
	}
}

// An SCTP association that the client breaks by opening a stream
// PROTOCOL.md §8.2 does not allow, while the server's reading is paused
// for MaxInflateRate, ends the pause, and its end closes the
// transport's ended channel (transportEnd), as any other end of the
// association does. The stream had acceptStreams close the link and
// return, and ended, closed only by acceptStreams, stayed open for good.
func TestInflatePauseEndsWithAnUnexpectedSCTPStream(t *testing.T) {
	const size = 64 << 10
	r, d := pauseRouter(t)
	e := newCarrierEnv(t, Options{Router: r, Limits: pauseLimits(size)})
	paused, ended := watchPauses(t, e.srv)
	for _, carrier := range []Carrier{CarrierSCTP, carrierSCTPDTLS} {
		t.Run(carrierName(carrier), func(t *testing.T) {
			c := e.dial(t, carrier, ClientOptions{Dictionary: d, Reconnect: Reconnect{Disabled: true}})
			cc := sendPauseBombs(t, c, size)
			var p *Peer
			select {
			case p = <-paused:
			case <-time.After(hangBound):
				t.Fatal("the third event did not pause the reading")
			}
			st, err := cc.link.(*pktConn).t.(*sctpTransport).assoc.OpenStream(7, sctp.PayloadTypeWebRTCBinary)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := st.Write([]byte("x")); err != nil {
				t.Fatal(err)
			}
			wantPauseCutShort(t, ended, "the unexpected stream")
			select {
			case <-p.link.(*pktConn).t.(*sctpTransport).ended():
			case <-time.After(hangBound):
				t.Fatal("the association's end did not close the transport's ended channel")
			}
			waitLong(t, "the connection's end", func() bool { return e.srv.Peers() == 0 })
		})
	}
}

// A Go client's read loop paused for MaxInflateRate over WebSocket,
// plain or over TLS, ends its pause at once when the server goes (its
// FIN, its reset), which the paused loop does not read, on Linux
// (watchHangUp); over TLS the watch reaches the socket through the
// dialer's upgradeConn. The pause is a whole maxInflatePause; the hook
// tells whether it ran out. The connection ends with 1006, or with the
// server's close when it sent one before its FIN (closeUnread).
func TestClientInflatePauseEndsWithTheWebSocket(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("a peer's going is seen without a read on Linux only")
	}
	d := bombDictionary(t)
	bomb := wsframe.AppendFrame(nil, wsframe.OpBinary, dictBomb(t, d), wsframe.Fin)
	for _, scheme := range []string{"ws", "wss"} {
		for _, how := range []string{"server closes", "server closes after its close frame", "server resets"} {
			t.Run(scheme+"/"+how, func(t *testing.T) {
				ln := listenLoopback(t)
				if scheme == "wss" {
					ln = tls.NewListener(ln, testCert().ServerTLSConfig())
				}
				send := make(chan struct{})
				act := make(chan struct{})
				served := make(chan struct{})
				go func() {
					defer close(served)
					nc, err := acceptRaw(ln, "")
					if err != nil {
						return
					}
					defer nc.Close()
					wsutil.WriteServerBinary(nc, capsOf("codec", "json", "dict", "deflate:"+d.ID()))
					for _, ch := range []chan struct{}{send, act} {
						select {
						case <-ch:
						case <-time.After(hangBound):
							return
						}
						if ch == send {
							nc.Write(append(append(append([]byte(nil), bomb...), bomb...), bomb...))
						}
					}
					tcp := nc
					if tc, ok := nc.(*tls.Conn); ok {
						tcp = tc.NetConn()
					}
					if how == "server closes after its close frame" {
						nc.Write(wsframe.AppendCloseFrame(nil, wsframe.CloseGoingAway, "bye"))
					}
					if how != "server resets" {
						tcp.(*net.TCPConn).CloseWrite() // a FIN
						return
					}
					tcp.(*net.TCPConn).SetLinger(0) // a reset, as nc closes
				}()
				c, cc := dialBombed(t, scheme+"://"+ln.Addr().String()+"/ws", ClientOptions{TLSConfig: testCert().ClientTLSConfig(), Reconnect: Reconnect{Disabled: true}}, d, 1)
				cutClientPause(t, cc, send, act, "the server's going")
				<-served
				// The server's close, sent before its FIN, is what the
				// connection ends with (closeUnread); without, 1006.
				want := wsframe.CloseAbnormal
				if how == "server closes after its close frame" {
					want = wsframe.CloseGoingAway
				}
				if err := c.endError(cc); CloseStatus(err) != want {
					t.Errorf("the connection ended with %v, want %d", err, want)
				}
			})
		}
	}
}

// cutClientPause lets the server send its bombs (send), waits for the
// client's read loop to pause, has the connection end (act), and checks
// that the pause was cut short by what, and that the connection ended.
func cutClientPause(t *testing.T, cc *clientConn, send, act chan struct{}, what string) {
	t.Helper()
	began := make(chan struct{}, 1)
	ended := make(chan bool, 1)
	clientPauseHooks(t, cc, func() { began <- struct{}{} }, func(timedOut bool) { ended <- timedOut })
	close(send)
	select {
	case <-began:
	case <-time.After(hangBound):
		t.Fatal("the third bomb did not pause the reading")
	}
	close(act)
	wantPauseCutShort(t, ended, what)
	select {
	case <-cc.ended:
	case <-time.After(hangBound):
		t.Fatal("the connection did not end")
	}
}

// pauseRouter is the router of the pause tests, whose events inflate
// (inflateRateRouter), and its dictionary.
func pauseRouter(t *testing.T) (*Router, *dictionary.Dictionary) {
	t.Helper()
	r := inflateRateRouter(new(atomic.Int64), new(atomic.Int32))
	d, err := RouterDictionary(r)
	if err != nil {
		t.Fatal(err)
	}
	return r, d
}

// watchPauses reports s's inflate pauses: the Peer of each that begins,
// and whether each that ends ran out its time (pauseHooks).
func watchPauses(t *testing.T, s *Server) (paused <-chan *Peer, ended <-chan bool) {
	began, over := make(chan *Peer, 1), make(chan bool, 1)
	pauseHooks(t, s, func(p *Peer) { began <- p }, func(timedOut bool) { over <- timedOut })
	return began, over
}

package compat

import (
	"errors"
	"testing"
	"time"

	"github.com/hotpath-go/hotpath/wsframe"
)

// TestServerDropIsCloseErrorOnEveryCarrier: a connection the server drops
// itself, without a closing handshake (Peer.dropSlow, as SlowConsumer =
// Disconnect does), ends in OnDisconnect with the same *CloseError on
// every carrier: errDropped, 1006, this end's. WebSocket reported the
// read's *net.OpError ("use of closed network connection"), QUIC quic-go's
// "Application error 0x3ee (local)", WebTransport an empty
// *webtransport.SessionError, WebRTC pion's "sending reset packet in
// non-established state", and SCTP the 1006 of an end the other end made
// (Remote, "connection closed without a close notice").
//
// A drop while a close asked for waits for its turn to end keeps that
// close's code where the carrier's close carries it (native QUIC; a
// WebTransport server's does not): the peer's close request is set as
// requestClose sets it during a turn, its notice not yet sent. Elsewhere
// the drop's 1006, or the request's code where a turn still under way
// (the client's last packets) sent its notice as it ended.
func TestServerDropIsCloseErrorOnEveryCarrier(t *testing.T) {
	peers := make(chan *Peer, 1)
	ended := make(chan error, 1)
	e := newCarrierEnv(t, Options{
		OnConnect:    func(p *Peer) { peers <- p },
		OnDisconnect: func(_ *Peer, err error) { ended <- err },
	})
	idle := &CloseError{Code: wsframe.CloseGoingAway, Reason: idleTimeoutReason}
	for _, requested := range []bool{false, true} {
		for _, carrier := range append([]Carrier{CarrierWebSocket}, goCarriers...) {
			name := carrierName(carrier) + map[bool]string{false: "/drop", true: "/requested"}[requested]
			t.Run(name, func(t *testing.T) {
				before := e.srv.Metrics().Closes
				e.dial(t, carrier, ClientOptions{Reconnect: Reconnect{Disabled: true}})
				var p *Peer
				select {
				case p = <-peers:
				case <-time.After(10 * time.Second):
					t.Fatal("no OnConnect")
				}
				want := errDropped
				if requested {
					switch l := p.link.(type) {
					case *pktConn:
						l.closeRequest.Store(idle)
					case *wsConn:
						l.closeRequest.Store(idle)
					}
					if carrier == CarrierQUIC {
						want = idle
					}
				}
				p.dropSlow()
				var err error
				select {
				case err = <-ended:
				case <-time.After(10 * time.Second):
					t.Fatal("no OnDisconnect after the drop")
				}
				var ce *CloseError
				if requested && errors.As(err, &ce) && *ce == *idle {
					want = idle // the notice sent: a closing handshake's end
				}
				if !errors.As(err, &ce) || *ce != *want {
					t.Fatalf("OnDisconnect got %T %v; want %#v", err, err, *want)
				}
				if n := e.srv.Metrics().Closes[want.Code] - before[want.Code]; n != 1 {
					t.Errorf("Closes[%d] rose by %d, want 1", want.Code, n)
				}
			})
		}
	}
}

package compat

// Rules of PROTOCOL.md §8 that no other test checked, each named by its
// section (compat/PROTOCOL-MUSTS.md).

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/hotpath-go/hotpath/compat/wire"
	"github.com/hotpath-go/hotpath/dispatch"
	"github.com/hotpath-go/hotpath/wsframe"
	"github.com/quic-go/quic-go"
)

// PROTOCOL.md §8.1: on a message carrier (a WebRTC data channel) a text
// message closes the connection with 1003 HP_ERR_TEXT_MESSAGE, whichever
// end receives it. compat/js checks its own end ("a text message on the
// data channel fails the connection at once").
func TestProtocolTextOnADataChannel(t *testing.T) {
	ended := make(chan error, 4)
	peers := make(chan *Peer, 4)
	e := newCarrierEnv(t, Options{
		OnConnect:    func(p *Peer) { peers <- p },
		OnDisconnect: func(p *Peer, err error) { ended <- err },
	})
	want := func(who string, err error) {
		t.Helper()
		var ce *CloseError
		if !errors.As(err, &ce) || ce.Code != wsframe.CloseUnsupportedData || ce.Reason != "HP_ERR_TEXT_MESSAGE" {
			t.Errorf("%s: %v, want 1003 HP_ERR_TEXT_MESSAGE", who, err)
		}
	}
	wait := func(who string, errs <-chan error) {
		t.Helper()
		select {
		case err := <-errs:
			want(who, err)
		case <-time.After(10 * time.Second):
			t.Fatalf("%s did not see the connection end", who)
		}
	}
	channel := func(l link) *rtcChannel { return l.(*pktConn).ch.(*rtcChannel) }

	// From the client: the server closes.
	c := e.dial(t, CarrierWebRTC, ClientOptions{Reconnect: Reconnect{Disabled: true}})
	<-peers
	failed, cc := callInFlight(t, c)
	if err := channel(cc.link).dc.SendText("hi"); err != nil {
		t.Fatal(err)
	}
	wait("the server (text from the client)", ended)
	wait("the client's call (text from the client)", failed)

	// From the server: the client closes.
	c = e.dial(t, CarrierWebRTC, ClientOptions{Reconnect: Reconnect{Disabled: true}})
	p := <-peers
	failed, _ = callInFlight(t, c)
	if err := channel(p.link).dc.SendText("hi"); err != nil {
		t.Fatal(err)
	}
	wait("the client's call (text from the server)", failed)
	wait("the server (text from the server)", ended)
}

// PROTOCOL.md §8.3: "A carrier that ends without a notice is an abnormal
// closure (1006)", at both Go ends: here a QUIC connection closed with
// application code 0 and no close notice before it, by a client the
// server has registered, and by a server the Go client has connected to.
func TestProtocolCarrierEndWithoutNoticeIs1006(t *testing.T) {
	t.Run("server", func(t *testing.T) {
		ended := make(chan error, 1)
		e := newCarrierEnv(t, Options{OnDisconnect: func(p *Peer, err error) { ended <- err }})
		qc, str := rawQUIC(t, e)
		str.Write(framed(wire.Append(nil, &wire.Packet{Kind: dispatch.KindPing})))
		for deadline := time.Now().Add(hangBound); e.srv.Peers() == 0; time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatal("the server never registered the raw QUIC client")
			}
		}
		qc.CloseWithError(0, "")
		select {
		case err := <-ended:
			if CloseStatus(err) != wsframe.CloseAbnormal {
				t.Errorf("the server saw the connection end with %v, want 1006", err)
			}
		case <-time.After(hangBound):
			t.Fatal("the server never saw the connection end")
		}
	})
	t.Run("client", func(t *testing.T) {
		dialed := make(chan struct{})
		url, opts := rawQUICServer(t, func(qc *quic.Conn) {
			<-dialed
			qc.CloseWithError(0, "")
		})
		states := make(chan State, 8)
		opts.OnState = sendState(states)
		c, err := Dial(context.Background(), url, opts)
		close(dialed)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		for s := State(0); s != Closed; {
			select {
			case s = <-states:
			case <-time.After(hangBound):
				t.Fatal("the client never saw the connection end")
			}
		}
		if err := c.Emit("room", "event", 1, false); CloseStatus(err) != wsframe.CloseAbnormal {
			t.Errorf("an Emit after the end: %v, want ErrDisconnected with 1006", err)
		}
	})
}

package compat

// Rules of PROTOCOL.md §8 that no other test checked, each named by its
// section (compat/PROTOCOL-MUSTS.md).

import (
	"errors"
	"testing"
	"time"

	"github.com/hotpath-go/hotpath/wsframe"
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

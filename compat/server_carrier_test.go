package compat

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hotpath-go/hotpath/compat/wire"
	"github.com/hotpath-go/hotpath/dispatch"
	"github.com/pion/sctp"
)

// sendRawDatagram sends pkt, a whole packet, as a datagram of c's
// carrier, as a client other than the Go one may (the Go client's Event
// goes on the control stream). On WebRTC the unreliable channel opens
// after the control one, so it may not be open yet when Dial returns: a
// datagram the carrier did not take is tried again, up to hangBound (a
// CI run under -race failed at the first datagram).
func sendRawDatagram(t *testing.T, c *Client, pkt []byte) {
	t.Helper()
	c.mu.Lock()
	l := c.conn.link
	c.mu.Unlock()
	for deadline := time.Now().Add(hangBound); ; time.Sleep(5 * time.Millisecond) {
		if _, ok := l.sendDatagram(pkt); ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the carrier took no datagram")
		}
	}
}

// An event handler held by a client's Event that came as a datagram
// holds none of that client's calls, on every carrier (PROTOCOL.md §8.4:
// datagrams never delay the control stream). On SCTP and WebRTC the
// unreliable stream or channel shares the association's receive window
// with the control stream: while the handler held the server's datagram
// reader, a burst of unreliable Events filled that window unread, and
// every call after it timed out; QUIC drops the datagrams nobody reads.
// The server's side of TestHeldDatagramListenerHoldsNoCall.
func TestHeldDatagramEventHandlerHoldsNoCall(t *testing.T) {
	r := testRouter()
	release := make(chan struct{})
	defer close(release)
	entered := make(chan struct{}, 64)
	HandleEvent(r, "test/hold", func(ctx context.Context, _ string) {
		select {
		case entered <- struct{}{}:
		default:
		}
		select {
		case <-release:
		case <-ctx.Done():
		}
	})
	e := newCarrierEnv(t, Options{Router: r})
	for _, carrier := range goCarriers {
		t.Run(carrierName(carrier), func(t *testing.T) {
			c := e.dial(t, carrier, ClientOptions{Reconnect: Reconnect{Disabled: true}})
			pkt := wire.Append(nil, &wire.Packet{Kind: dispatch.KindEvent, Name: []byte("test/hold"), Payload: []byte(`"` + strings.Repeat("x", 900) + `"`)})
			for i := range 4000 { // 3.6 MB, past an association's 1 MiB window
				sendRawDatagram(t, c, pkt)
				if i%10 == 0 {
					time.Sleep(time.Millisecond) // the client's queue drops past 256 KiB
				}
			}
			select {
			case <-entered:
			case <-time.After(hangBound):
				t.Fatal("the event handler was never called")
			}
			callsStillAnswer(t, c, "a call while an event handler holds an unreliable Event")
		})
	}
}

// One SCTP message larger than the association's 1 MiB receive window
// never completes (the sender may not pass the full window) and pion
// shows nothing of it, so the server cannot refuse it with 1009; what
// bounds it is the keepalive: nothing more is read, and the peer is given
// up as silent (close 1001 HP_IDLE_TIMEOUT) within IdleTimeout and a
// keepalive interval, not held for good. No hotpath end sends such a
// message: the client's association is told to allow one here.
func TestSCTPMessageOverTheWindowEndsAtIdleTimeout(t *testing.T) {
	ended := make(chan error, 1)
	e := newCarrierEnv(t, Options{IdleTimeout: 2 * time.Second, OnDisconnect: func(_ *Peer, err error) { ended <- err }})
	c := e.dial(t, CarrierSCTP, ClientOptions{Reconnect: Reconnect{Disabled: true}})
	c.mu.Lock()
	ct := c.conn.link.(*pktConn).t.(*sctpTransport)
	c.mu.Unlock()
	ct.assoc.SetMaxMessageSize(4 << 20)
	control, err := ct.assoc.OpenStream(sctpControlStream, sctp.PayloadTypeWebRTCBinary) // the one the client opened
	if err != nil {
		t.Fatal(err)
	}
	go control.Write(make([]byte, 2<<20))
	select {
	case err := <-ended:
		var ce *CloseError
		if !errors.As(err, &ce) || ce.Reason != "HP_IDLE_TIMEOUT" {
			t.Fatalf("the connection ended with %v, want the idle timeout", err)
		}
	case <-time.After(hangBound * 2):
		t.Fatal("a connection stalled by a message over the window was never given up")
	}
}

// Every Event a server's datagram reader takes on SCTP and WebRTC is
// either handled or, while the inbox is full behind a held handler,
// dropped and counted in Metrics.DroppedEvents: none is lost uncounted.
func TestDatagramInboxDropsAreCounted(t *testing.T) {
	r := testRouter()
	release := make(chan struct{})
	var handled atomic.Int64
	HandleEvent(r, "test/hold", func(ctx context.Context, _ string) {
		if handled.Add(1) == 1 {
			<-release
		}
	})
	peers := make(chan *Peer, 1)
	e := newCarrierEnv(t, Options{Router: r, OnConnect: func(p *Peer) { peers <- p }})
	for _, carrier := range []Carrier{CarrierSCTP, CarrierWebRTC} {
		t.Run(carrierName(carrier), func(t *testing.T) {
			handled.Store(0)
			release = make(chan struct{})
			c := e.dial(t, carrier, ClientOptions{Reconnect: Reconnect{Disabled: true}})
			p := <-peers
			// Count what the server's datagram reader takes.
			var deliverp *atomic.Pointer[func([]byte)]
			switch st := p.link.(*pktConn).t.(type) {
			case *sctpTransport:
				deliverp = &st.deliver
			case *rtcTransport:
				deliverp = &st.deliver
			}
			waitFor(t, func() bool { return deliverp.Load() != nil })
			deliver := *deliverp.Load()
			var read atomic.Int64
			counting := func(pkt []byte) { read.Add(1); deliver(pkt) }
			deliverp.Store(&counting)
			dropped := e.srv.Metrics().DroppedEvents

			pkt := wire.Append(nil, &wire.Packet{Kind: dispatch.KindEvent, Name: []byte("test/hold"), Payload: []byte(`"` + strings.Repeat("x", 900) + `"`)})
			for i := range 1500 { // 1.35 MB: past the inbox's 256 KiB
				sendRawDatagram(t, c, pkt)
				if i%10 == 0 {
					time.Sleep(time.Millisecond)
				}
			}
			// Quiet: the reader has taken what it will take.
			for last := int64(-1); last != read.Load(); {
				last = read.Load()
				time.Sleep(300 * time.Millisecond)
			}
			if e.srv.Metrics().DroppedEvents == dropped {
				t.Fatalf("%d datagrams read, none dropped: the inbox never filled", read.Load())
			}
			close(release)
			// Compared with what has been read by then: a datagram late
			// on the wire may still come.
			waitFor(t, func() bool {
				return handled.Load()+int64(e.srv.Metrics().DroppedEvents-dropped) == read.Load()
			})
		})
	}
}

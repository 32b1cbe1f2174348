package compat

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/hotpath-go/hotpath/compat/wire"
	"github.com/hotpath-go/hotpath/wsframe"
)

// sctpEnded dials the env's server on SCTP, has write send one raw SCTP
// message of n bytes through the client's association, and returns how
// the server ended the connection.
func sctpEnded(t *testing.T, write func(tr *sctpTransport, link *pktConn, msg []byte) error, n int) error {
	t.Helper()
	ended := make(chan error, 1)
	e := newCarrierEnv(t, Options{OnDisconnect: func(_ *Peer, err error) { ended <- err }})
	c := e.dial(t, CarrierSCTP, ClientOptions{Reconnect: Reconnect{Disabled: true}})
	cc, err := c.current()
	if err != nil {
		t.Fatal(err)
	}
	link := cc.link.(*pktConn)
	if err := write(link.t.(*sctpTransport), link, bytes.Repeat([]byte{0}, n)); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-ended:
		return err
	case <-time.After(5 * time.Second):
		t.Fatal("the server did not end the connection")
		return nil
	}
}

// A peer may send SCTP messages up to the association's 256 KiB; on the
// control stream, no hotpath end writes one over 16 KiB (sctpChunk). One
// panicked the server's read loop, and the process with it: pion reports
// ErrShortBuffer with the message's size for a message the read buffer
// cannot hold, and the loop sliced its 16 KiB buffer to that size (a
// robustness audit). Now: 1009.
func TestSCTPOversizedControlMessage(t *testing.T) {
	err := sctpEnded(t, func(_ *sctpTransport, link *pktConn, msg []byte) error {
		_, err := link.r.(*deadlineTried).deadlineStream.(*sctpStream).Stream.Write(msg)
		return err
	}, 20000)
	if code := CloseStatus(err); code != wsframe.CloseMessageTooBig {
		t.Fatalf("the server ended the connection with %v (%d), want 1009", err, code)
	}
}

// The same on the unreliable stream: pion keeps the message at the head
// of the stream, and the datagram reader read it again, for ever, one core
// spinning after the connection ended (a robustness audit: 2 s of CPU in
// 2 s, also after Shutdown). Now: 1009.
func TestSCTPOversizedDatagram(t *testing.T) {
	err := sctpEnded(t, func(tr *sctpTransport, _ *pktConn, msg []byte) error {
		_, err := tr.unreliableStream().Write(msg)
		return err
	}, 20000)
	if code := CloseStatus(err); code != wsframe.CloseMessageTooBig {
		t.Fatalf("the server ended the connection with %v (%d), want 1009", err, code)
	}
}

// An SCTP message of the control stream (at most 16 KiB) can hold the end
// of one packet and the start of the next, and the read loop may read it
// into the room left for the first packet's rest, smaller than the
// message: pion then returns more than it was given room for, and the
// connection failed (segmentqueue: reader returned an invalid count).
// Events of these sizes, queued in one turn, made it fail at once (a
// robustness audit).
func TestSCTPMessageAcrossPackets(t *testing.T) {
	peers := make(chan *Peer, 1)
	e := newCarrierEnv(t, Options{OnConnect: func(p *Peer) { peers <- p }})
	c := e.dial(t, CarrierSCTP, ClientOptions{Reconnect: Reconnect{Disabled: true}})
	p := <-peers
	got := make(chan int, 4)
	c.On("ev", func(m Message) { got <- len(m.Data) })
	out := p.link.(*pktConn).out
	for n := 10600; n < 10610; n++ {
		out.Cork()
		for _, size := range []int{n, 7400, 3000} {
			if err := p.Event("ev", bytes.Repeat([]byte{'a'}, size)); err != nil {
				t.Fatal(err)
			}
		}
		if err := out.Uncork(); err != nil {
			t.Fatal(err)
		}
		for range 3 {
			select {
			case <-got:
			case <-time.After(5 * time.Second):
				t.Fatalf("events of %d, 7400 and 3000 bytes queued together: lost (a call: %v)", n, c.Call(context.Background(), "echo/raw", []byte("x"), nil))
			}
		}
	}
}

// A full datagram queue drops an unreliable emit, which may be lost
// anyway: it does not make a healthy member a slow consumer. Under
// SlowConsumer Disconnect, a burst of unreliable emits disconnected every
// member once 1,024 were queued (a robustness audit).
func TestUnreliableBurstIsNoSlowConsumer(t *testing.T) {
	for _, carrier := range []Carrier{CarrierQUIC, CarrierWebTransport, CarrierSCTP} {
		t.Run(carrierName(carrier), func(t *testing.T) {
			t.Parallel()
			ended := make(chan error, 4)
			e := newCarrierEnv(t, Options{SlowConsumer: Disconnect, OnDisconnect: func(_ *Peer, err error) { ended <- err }})
			c := e.dial(t, carrier, ClientOptions{Reconnect: Reconnect{Disabled: true}})
			if _, err := c.Join(context.Background(), "r"); err != nil {
				t.Fatal(err)
			}
			for i := range 5000 {
				e.srv.EmitUnreliable("r", "tick", i)
			}
			if err := c.Call(context.Background(), "echo/raw", []byte("x"), nil); err != nil {
				t.Fatalf("a call after the burst: %v", err)
			}
			select {
			case err := <-ended:
				t.Fatalf("a burst of unreliable emits disconnected a healthy member: %v", err)
			default:
			}
		})
	}
}

// A packet as large as the datagram limit compat asked quic-go for goes
// as a datagram and arrives. On WebTransport the limit quic-go reports
// includes HTTP/3's quarter stream ID, which webtransport-go puts before
// each datagram: such a packet was reported queued and lost, every time
// (a robustness audit).
func TestDatagramAtTheLimit(t *testing.T) {
	peers := make(chan *Peer, 1)
	e := newCarrierEnv(t, Options{OnConnect: func(p *Peer) { peers <- p }})
	for _, carrier := range streamCarriers {
		t.Run(carrierName(carrier), func(t *testing.T) {
			c := e.dial(t, carrier, ClientOptions{Reconnect: Reconnect{Disabled: true}})
			p := <-peers
			got := make(chan int, 64)
			c.OnRoom("dg", "ev", func(m Message) { got <- len(m.Data) })
			var dg *quicDatagrams
			switch tr := p.link.(*pktConn).t.(type) {
			case *quicTransport:
				dg = tr.datagrams
			case *wtTransport:
				dg = tr.datagrams
			}
			envelope := len(wire.AppendEmit(nil, "dg", "ev", 0, []byte(`""`)))
			for try := 0; ; try++ {
				if try == 20 {
					t.Fatal("a packet at the datagram limit never arrived in 20 tries")
				}
				if _, ok := p.link.sendDatagram(wire.AppendEmit(nil, "dg", "ev", 0, []byte(`"x"`))); !ok {
					t.Fatal("a small packet did not fit a datagram")
				}
				select {
				case <-got: // the limit is known now
				case <-time.After(time.Second): // a datagram, lost: again
					continue
				}
				limit := int(dg.max.Load())
				pkt := wire.AppendEmit(nil, "dg", "ev", 0, []byte(`"`+strings.Repeat("a", limit-envelope)+`"`))
				if st, ok := p.link.sendDatagram(pkt); !ok {
					t.Fatalf("a packet of the limit's %d bytes did not fit: %v", limit, st)
				}
				select {
				case <-got:
					return
				case <-time.After(200 * time.Millisecond): // lost, or the path's limit moved
				}
			}
		})
	}
}

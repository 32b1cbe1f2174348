package compat

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/hotpath-go/hotpath/compat/wire"
	"github.com/hotpath-go/hotpath/corkwriter"
	"github.com/hotpath-go/hotpath/dispatch"
)

// A compressed server Ping that inflates past the carrier's message limit
// (256 KiB on WebRTC) is answered when its Pong fits that limit as it
// travels, compressed, and the server's maxMessage (1 MiB) inflated: the
// server takes such a Pong. The client checked the carrier's limit
// against the plain Pong and closed the connection with 1009.
func TestClientPongCompressedWithinCarrierLimit(t *testing.T) {
	peers := make(chan *Peer, 1)
	e := newCarrierEnv(t, Options{OnConnect: func(p *Peer) { peers <- p }})
	d, err := RouterDictionary(testRouter())
	if err != nil {
		t.Fatal(err)
	}
	c := e.dial(t, CarrierWebRTC, ClientOptions{Dictionary: d, Reconnect: Reconnect{Disabled: true}})
	p := <-peers
	waitFor(t, func() bool { return p.dict.Load() != nil })
	data := bytes.Repeat([]byte("a ping that compresses well "), (300<<10)/28)
	if len(data) <= maxChannelMessage {
		t.Fatalf("a Ping of %d bytes: not past the carrier's limit", len(data))
	}
	ping := wire.Append(beginFrame(nil), &wire.Packet{Kind: dispatch.KindPing, Payload: data})
	if cb, release, ok := p.dict.Load().compressPacket(ping[frameHeadroom:]); !ok || len(cb)-frameHeadroom > maxChannelMessage {
		t.Fatal("the Ping does not compress within the carrier's limit")
	} else {
		release()
	}
	before := e.srv.Metrics().MessagesIn
	if st := p.sendPacket(ping); st != corkwriter.Sent && st != corkwriter.Queued {
		t.Fatalf("sending the Ping: %v", st)
	}
	// The Ping goes before the call's answer: a client that closed on it
	// fails the call.
	ctx, cancel := context.WithTimeout(context.Background(), hangBound)
	defer cancel()
	var out []byte
	if err := c.Call(ctx, "echo/raw", []byte("x"), &out); err != nil {
		t.Fatalf("a call after the Ping: %v", err)
	}
	// The server read the Pong and the call: two messages.
	deadline := time.Now().Add(hangBound)
	for e.srv.Metrics().MessagesIn < before+2 {
		if time.Now().After(deadline) {
			t.Fatalf("the server read %d messages after its Ping, want the Pong and the call", e.srv.Metrics().MessagesIn-before)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if err := c.Call(ctx, "echo/raw", []byte("x"), &out); err != nil {
		t.Fatalf("a call after the Pong: %v", err)
	}
}

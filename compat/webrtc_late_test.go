package compat

import (
	"io"
	"testing"
	"time"

	"github.com/pion/datachannel"
)

// oneMessageChannel is a data channel that holds one binary message.
type oneMessageChannel struct {
	datachannel.ReadWriteCloser // the methods not used here
	msg                         []byte
}

func (c *oneMessageChannel) ReadDataChannel(p []byte) (int, bool, error) {
	if c.msg == nil {
		return 0, false, io.EOF
	}
	n := copy(p, c.msg)
	c.msg = nil
	return n, false, nil
}

// A WebRTC client may open its unreliable channel long after the control
// channel: the server reads it whenever it opens, until the transport
// closes. It used to stop waiting after the handshake timeout, and a
// channel opened later was never read: its messages piled up in the
// association's receive window, which the control channel shares. Takes
// the handshake timeout (10 s), in parallel with the other parallel tests.
func TestWebRTCUnreliableChannelOpensLate(t *testing.T) {
	t.Parallel()
	tr := &rtcTransport{datagrams: make(chan datachannel.ReadWriteCloser, 1), closed: make(chan struct{})}
	got := make(chan string, 1)
	ended := make(chan struct{})
	go func() {
		tr.receiveDatagrams(func(p []byte) { got <- string(p) })
		close(ended)
	}()
	time.Sleep(handshakeTimeout + 500*time.Millisecond)
	tr.datagrams <- &oneMessageChannel{msg: []byte("late")}
	select {
	case m := <-got:
		if m != "late" {
			t.Fatalf("read %q from the unreliable channel", m)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("an unreliable channel opened after the handshake timeout was never read")
	}
	<-ended

	// Closed before any channel opened: the reader ends.
	tr = &rtcTransport{datagrams: make(chan datachannel.ReadWriteCloser, 1), closed: make(chan struct{})}
	ended = make(chan struct{})
	go func() {
		tr.receiveDatagrams(func([]byte) {})
		close(ended)
	}()
	close(tr.closed)
	select {
	case <-ended:
	case <-time.After(5 * time.Second):
		t.Fatal("the datagram reader outlived its transport")
	}
}

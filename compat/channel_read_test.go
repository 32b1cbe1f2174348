package compat

import (
	"bytes"
	"errors"
	"io"
	"sync"
	"testing"
	"time"

	"github.com/hotpath-go/hotpath/wsframe"
)

// fakeChannel is a message channel that yields msgs, one per read, as
// pion's data channels do: a buffer too small for the next message gets
// io.ErrShortBuffer and the message stays. It records the size of every
// buffer a read was given.
type fakeChannel struct {
	mu    sync.Mutex
	msgs  [][]byte
	sizes []int
}

func (f *fakeChannel) readMessage(p []byte) (int, bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.sizes = append(f.sizes, len(p))
	if len(f.msgs) == 0 {
		return 0, false, io.EOF
	}
	if len(f.msgs[0]) > len(p) {
		return 0, false, io.ErrShortBuffer
	}
	n := copy(p, f.msgs[0])
	f.msgs = f.msgs[1:]
	return n, false, nil
}

func (f *fakeChannel) writeMessage(p []byte) error { return nil }
func (f *fakeChannel) buffered() int               { return 0 }

type recordingHandler struct{ got [][]byte }

func (r *recordingHandler) handleMessage(_ wsframe.Opcode, p []byte) error {
	r.got = append(r.got, append([]byte(nil), p...))
	return nil
}

// A message channel's reader (WebRTC's control and unreliable channels)
// waits for a message with a buffer of channelReadSize, not one of the
// largest message the channel takes: every WebRTC connection held two of
// 256 KiB for its life, idle or not. A larger message is still read
// whole, and one over maxChannelMessage ends the connection with 1009.
func TestChannelReaderHoldsASmallBuffer(t *testing.T) {
	big := bytes.Repeat([]byte{7}, 200<<10)
	ch := &fakeChannel{msgs: [][]byte{[]byte("a"), big, []byte("b"), make([]byte, maxChannelMessage+1)}}
	c := newMessageConn(&sctpTransport{}, ch, Limits{}.withDefaults())
	h := &recordingHandler{}
	err := c.readMessages(h)
	if ce := (*CloseError)(nil); !errors.As(err, &ce) || ce.Code != wsframe.CloseMessageTooBig {
		t.Fatalf("readMessages ended with %v, want 1009 for the message over maxChannelMessage", err)
	}
	if len(h.got) != 3 || string(h.got[0]) != "a" || !bytes.Equal(h.got[1], big) || string(h.got[2]) != "b" {
		t.Fatalf("handled %d messages, want a, the 200 KiB one and b", len(h.got))
	}
	// Every read that waits (the first of each message) has the small
	// buffer; only a message it cannot hold is read again into a larger one.
	for i, want := range []int{channelReadSize, channelReadSize, maxChannelMessage, channelReadSize, channelReadSize, maxChannelMessage} {
		if i >= len(ch.sizes) || ch.sizes[i] != want {
			t.Fatalf("read buffers %v, want %d at read %d", ch.sizes, want, i)
		}
	}
}

// A connection's datagram inbox (SCTP, WebRTC) makes its channel and
// goroutine at the first datagram: a connection that sends none, as most
// do, holds neither. It then hands the datagram on.
func TestDatagramInboxMadeAtTheFirstDatagram(t *testing.T) {
	c := newMessageConn(&sctpTransport{}, &fakeChannel{}, Limits{}.withDefaults())
	defer close(c.done)
	got := make(chan []byte, 1)
	ib := c.newDatagramInbox(datagramFunc(func(pkt []byte) error { got <- pkt; return nil }))
	if ib.ch != nil {
		t.Fatal("the inbox's channel was made before any datagram")
	}
	ib.deliver([]byte("x"))
	if ib.ch == nil {
		t.Fatal("the first datagram made no channel")
	}
	select {
	case pkt := <-got:
		if string(pkt) != "x" {
			t.Fatalf("handled %q, want x", pkt)
		}
	case <-time.After(hangBound):
		t.Fatal("the datagram was never handled")
	}
}

type datagramFunc func(pkt []byte) error

func (f datagramFunc) handleDatagram(pkt []byte) error { return f(pkt) }

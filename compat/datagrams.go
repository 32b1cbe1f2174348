package compat

import (
	"errors"
	"sync"
	"sync/atomic"

	"github.com/hotpath-go/hotpath/corkwriter"
	"github.com/quic-go/quic-go"
)

// datagramQueue holds a connection's unreliable packets for a writer
// goroutine of its own. A carrier's send may wait: SCTP's while the
// association has a write pending, quic-go's once 32 datagrams are
// queued, and for a peer that went silent until the connection ends. A
// room emit sends on the emitter's goroutine (a client's read loop, when
// it relays the client's emit) under the room's lock, so one silent member
// held every emit and Join of its room. Past maxQueuedDatagrams bytes,
// packets are dropped: they may be lost.
type datagramQueue struct {
	// write sends one packet and reports whether to go on: false ends
	// the writer (the connection is gone).
	write  func([]byte) bool
	done   <-chan struct{} // closed with the connection
	once   sync.Once
	ch     chan []byte
	queued atomic.Int64 // bytes in ch
}

// maxQueuedDatagrams bounds the unreliable packets a connection holds
// while its carrier cannot take them: in a datagramQueue, or buffered in
// a WebRTC data channel.
const maxQueuedDatagrams = 256 << 10

func newDatagramQueue(write func([]byte) bool, done <-chan struct{}) *datagramQueue {
	return &datagramQueue{write: write, done: done}
}

// push queues pkt, by reference (see link.sendDatagram); the writer
// starts with the first packet.
func (q *datagramQueue) push(pkt []byte) corkwriter.Status {
	q.once.Do(func() {
		q.ch = make(chan []byte, 1024)
		go q.run()
	})
	// Counted before it is queued, so that pushes racing each other
	// cannot all pass the bound (a check, then an add, let them).
	n := int64(len(pkt))
	if q.queued.Add(n) > maxQueuedDatagrams {
		q.queued.Add(-n)
		return corkwriter.Dropped
	}
	select {
	case <-q.done:
		q.queued.Add(-n)
		return corkwriter.Closed
	case q.ch <- pkt:
		return corkwriter.Queued
	default:
		q.queued.Add(-n)
		return corkwriter.Dropped
	}
}

func (q *datagramQueue) run() {
	for {
		select {
		case <-q.done:
			return
		case pkt := <-q.ch:
			q.queued.Add(-int64(len(pkt)))
			if !q.write(pkt) {
				return
			}
		}
	}
}

// quicDatagrams sends the datagrams of a QUIC connection or WebTransport
// session through a datagramQueue. A packet larger than the path takes
// goes on the control stream instead (the caller's !ok), as does every
// packet to a peer that did not negotiate datagrams: the size is
// asked of quic-go, whose check comes before its queue, once and again
// after a datagram was refused as too large.
type quicDatagrams struct {
	send func([]byte) error
	// overhead is what send adds before the packet within the size
	// quic-go checks: a WebTransport datagram's quarter stream ID
	// (RFC 9297 §2.1), a varint of up to 8 bytes.
	overhead int64
	max      atomic.Int64 // the largest payload; 0 until asked
	// none: the peer did not negotiate datagrams, which the handshake
	// settled for good; not asked again (an emit to a room probed each
	// such member on every unreliable emit).
	none  atomic.Bool
	queue *datagramQueue
}

func newQUICDatagrams(send func([]byte) error, overhead int64, done <-chan struct{}) *quicDatagrams {
	d := &quicDatagrams{send: send, overhead: overhead}
	d.queue = newDatagramQueue(d.write, done)
	return d
}

// oversized is larger than any datagram: sent, it only asks the limit.
var oversized = make([]byte, 1<<16)

func (d *quicDatagrams) push(pkt []byte) (corkwriter.Status, bool) {
	if d.none.Load() {
		return 0, false
	}
	m := d.max.Load()
	if m == 0 {
		var tooLarge *quic.DatagramTooLargeError
		if err := d.send(oversized); !errors.As(err, &tooLarge) {
			// The peer takes no datagrams (quic-go checks the size only
			// once they were negotiated, and also after the connection
			// ended): the packet goes on the control stream, which
			// reports a connection that is gone (PROTOCOL.md §8.4). So do
			// the next ones: a connection that ended has nothing more to
			// send, one without datagrams never will have them.
			d.none.Store(true)
			return 0, false
		}
		m = max(tooLarge.MaxDatagramPayloadSize-d.overhead, 1)
		d.max.Store(m)
	}
	if int64(len(pkt)) > m {
		return 0, false
	}
	return d.queue.push(pkt), true
}

func (d *quicDatagrams) write(pkt []byte) bool {
	var tooLarge *quic.DatagramTooLargeError
	err := d.send(pkt)
	if errors.As(err, &tooLarge) {
		d.max.Store(0) // the path shrank: ask again; this one is lost
		return true
	}
	return err == nil
}

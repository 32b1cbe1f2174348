package compat

import (
	"encoding/binary"
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hotpath-go/hotpath/corkwriter"
	"github.com/hotpath-go/hotpath/wsframe"
)

// link is the carrier under a Peer or a Client: a WebSocket (wsConn), a
// byte stream with length-prefixed packets (streamConn: QUIC, WebTransport
// and SCTP streams) or a message channel (msgConn: WebRTC data channels).
// The router, rooms, limits, scheduler, batching and dictionary
// negotiation talk to a link only, so none of them knows the carrier.
//
// Every method but run and start is safe for concurrent use.
type link interface {
	// start serves the link on goroutines of its own and calls done with
	// why it ended; run serves it on the caller's goroutine.
	start(h messageHandler, done func(error))
	run(h messageHandler) error

	// sendBuilt sends the packet that follows frameHeadroom in b (see
	// beginFrame). The link may write its framing into the headroom and
	// transform the packet in place; the caller owns b again on return.
	sendBuilt(b []byte) corkwriter.Status
	// sendPrepared sends a room broadcast by reference to its shared,
	// immutable encoding for this link's framing.
	sendPrepared(bc *broadcast) corkwriter.Status
	// sendDatagram sends one packet without delivery guarantee; ok is false
	// when the carrier has no datagrams, or the packet does not fit one,
	// and the caller sends it reliably instead. pkt must not change
	// afterwards: it may be queued by reference (a room emit's packet,
	// shared by its members, is).
	sendDatagram(pkt []byte) (st corkwriter.Status, ok bool)
	// awaitRoom waits, until deadline, for room for a packet built in
	// b (see beginFrame) in the queue for the peer, so that an answer the
	// outbox had no room for can be sent again; inTurn says the caller is
	// the read loop in a turn, whose queue leaves only when the turn
	// ends: it is written first. It reports false when no room came in
	// time, or the link has no queue to wait on. Others may take the room
	// first: a send after it may be refused again.
	awaitRoom(b []byte, inTurn bool, deadline time.Time) bool
	// pauseTurn runs wait on the read loop, in a turn, with the turn's
	// answers so far sent rather than held for its end (an inflate
	// pause, inflateBudget.pauseReading). ended, which wait selects on, is
	// closed when the carrier connection ends: on WebSocket, when the
	// other end hangs up (a FIN or a reset), seen without a read on Linux
	// only (watchHangUp), nil elsewhere. The link calls wake, meanwhile,
	// when it is closed or dropped off the read loop. Both cut the pause
	// short.
	pauseTurn(wake func(), wait func(ended <-chan struct{}))
	// ping sends a keepalive probe that the other end answers.
	ping()
	// maxPacket is the largest packet the carrier takes, 0 for no limit
	// beyond Limits.MaxMessageSize.
	maxPacket() int

	// requestClose asks the link to close with code after what is queued,
	// exchanging close notices with the other end (PROTOCOL.md §7, §8).
	requestClose(code wsframe.CloseCode, reason string)
	// closeNow closes the link with code after what is queued, and ends
	// it once the close is written, without waiting for the other end's
	// answer, as a protocol violation does: a close that has nothing for
	// the answer to confirm (Client.Close before the server's
	// capabilities), which a silent other end must not hold for
	// closeTimeout. Unlike abort, it tells the other end the code.
	closeNow(code wsframe.CloseCode, reason string)
	// refuse closes a link that was never started, with code.
	refuse(code wsframe.CloseCode, reason string)
	// abort drops the link at once, without a closing handshake: a write
	// failed, or the other end does not read.
	abort()
	// closeCause is why the link is closing once its closing handshake
	// has begun (closeHandshake.closeCause), before its read loop ends.
	closeCause() *CloseError

	// liveness is when the link last read, for the server's keepalive.
	liveness() *liveness
	// carrier names the carrier, for logs and metrics.
	carrier() Carrier
	// encrypted reports whether the carrier encrypts the link: TLS,
	// DTLS, or QUIC's TLS (Peer.Encrypted).
	encrypted() bool
}

// messageHandler receives the packets of a link, decompressed when they
// were compressed. op is OpBinary on every carrier but WebSocket, where a
// text message is possible (and refused). payload is valid until the
// handler returns.
type messageHandler interface {
	handleMessage(op wsframe.Opcode, payload []byte) error
}

// Carrier names what a connection runs over.
type Carrier uint8

const (
	CarrierWebSocket    Carrier = iota + 1 // ws:// and wss://
	CarrierQUIC                            // quic://, native QUIC
	CarrierWebTransport                    // https://, WebTransport over HTTP/3
	CarrierSCTP                            // sctp:// and sctp+dtls://, SCTP over UDP or DTLS
	CarrierWebRTC                          // webrtc+http(s)://, a WebRTC data channel
)

// String returns the carrier's name in lower case: "websocket", "quic",
// "webtransport", "sctp" or "webrtc".
func (c Carrier) String() string {
	switch c {
	case CarrierWebSocket:
		return "websocket"
	case CarrierQUIC:
		return "quic"
	case CarrierWebTransport:
		return "webtransport"
	case CarrierSCTP:
		return "sctp"
	case CarrierWebRTC:
		return "webrtc"
	}
	return "unknown"
}

// liveness is what the keepalive scheduler reads of a link.
type liveness struct {
	lastRead atomic.Int64 // monoNow of the last read
	// pongPending is set when a keepalive ping went out and cleared by any
	// read: a peer that reads nothing back within the next interval is gone.
	pongPending atomic.Bool
	// paused counts the pauses of the link's own reading under way (an
	// inflate pause, inflateBudget.pauseReading): while one is, check
	// gives nothing up. A count, not a flag, so that no pause's end can
	// clear another's. Beside pongPending, in its padding: a pktConn
	// stays in its size class.
	paused   atomic.Int32
	pingedAt atomic.Int64 // monoNow of the last keepalive ping
}

func (l *liveness) touch() {
	l.lastRead.Store(monoNow())
	l.pongPending.Store(false)
}

// pause marks a pause of the link's own reading begun: what the other
// end sends meanwhile, the answers to this end's pings among it, waits
// unread, so its silence is this end's doing, not a sign that it is
// gone.
func (l *liveness) pause() { l.paused.Add(1) }

// resume marks the pause over, however it ended, and restarts the idle
// clock there, as a read would: the other end's silence counts from the
// end of the pause. A pause lasts maxInflatePause at most, and one
// begins only before a message already read is inflated, so a dead
// other end, which sends nothing more, is given up about IdleTimeout
// after the last of what it sent is read and inflated
// (TestInflatePauseThenASilentClientIsGivenUp). The touch comes before
// paused falls, and check loads paused first: a check that finds no
// pause under way sees the touch of any pause that ended.
func (l *liveness) resume() {
	l.touch()
	l.paused.Add(-1)
}

// clockBase is the origin of monoNow.
var clockBase = time.Now()

// monoNow is the monotonic clock in nanoseconds since clockBase. Every
// read of every connection records it (touch): it reads one clock where
// time.Now reads two.
func monoNow() int64 { return int64(time.Since(clockBase)) }

// monoTime is the time of a monoNow reading.
func monoTime(ns int64) time.Time { return clockBase.Add(time.Duration(ns)) }

// keepaliveAction is what a keepalive check does with a link.
type keepaliveAction uint8

const (
	keepWaiting keepaliveAction = iota
	keepPing                    // silent for the keepalive interval: ping it
	keepGiveUp                  // silent for the idle timeout: close it
)

// check is the keepalive rule of both ends, at now: a link silent for
// interval is pinged, once; one whose ping has gone unanswered for idle
// minus interval (silent for idle, when the ping went out on time) is
// given up; next is when its silence would next matter.
//
// The give-up counts from the ping, not from the last read: a check that
// runs late (its goroutine starved on a loaded machine) finds a link
// silent for longer than it was pinged, and a peer that answered the last
// ping at once has been sent nothing since, so it is pinged, not given up
// (TestClientKeepalive, pinned to one core beside a CPU burner: the check
// due 50 ms after a ping answered within 1 ms ran 740 to 750 ms late, in
// 2 runs of 199). While a ping waits for its answer the link is checked
// again every interval, not only at the timeout: a read does not re-arm
// the check, and an answer seen only then would have the next ping sent
// with the link silent for most of idle, leaving that ping's answer
// little more than the interval to arrive.
//
// A link whose own reading is paused (pause, an inflate pause of up to
// maxInflatePause) is pinged as any other but not given up: the answer
// waits unread behind the pause, and with idle minus interval under the
// pause a live peer was given up for this end's silence
// (TestInflatePauseIsNotTheClientsSilence). The clock restarts as the
// pause ends (resume).
func (l *liveness) check(now time.Time, interval, idle time.Duration) (act keepaliveAction, next time.Time) {
	paused := l.paused.Load() > 0 // before lastRead: see resume
	last := monoTime(l.lastRead.Load())
	silent := now.Sub(last)
	if !l.pongPending.Load() {
		if silent < interval {
			return keepWaiting, last.Add(interval)
		}
		l.pingedAt.Store(int64(now.Sub(clockBase)))
		l.pongPending.Store(true)
		return keepPing, now.Add(min(interval, idle-interval))
	}
	// A ping is pending: checked again at its timeout, or an interval
	// from now.
	timeout := monoTime(l.pingedAt.Load()).Add(idle - interval)
	if !now.Before(timeout) {
		if paused {
			// The answer may be waiting behind this end's pause, which
			// restarts the clock when it ends (resume); checked again
			// an interval from now, by when the silence counts afresh.
			return keepWaiting, now.Add(interval)
		}
		return keepGiveUp, time.Time{}
	}
	if again := now.Add(interval); again.Before(timeout) {
		return keepWaiting, again
	}
	return keepWaiting, timeout
}

// broadcast is one room emit, encoded once per framing and shared by every
// member: the WebSocket frame (and its compressed variants) through
// wsframe.Prepared, the length-prefixed packet of stream carriers, and the
// bare packet of message carriers.
type broadcast struct {
	prep *wsframe.Prepared
	pkt  []byte

	streamOnce sync.Once
	stream     []byte
}

// newBroadcast takes a packet built after a frame's headroom (beginEmit):
// the WebSocket frame is the same buffer, its header written into the
// headroom, so an emit costs one buffer, not a second for its frame.
func newBroadcast(framed []byte) (*broadcast, error) {
	prep, err := wsframe.NewPreparedAfter(wsframe.OpBinary, framed, frameHeadroom)
	if err != nil {
		return nil, err
	}
	return &broadcast{prep: prep, pkt: framed[frameHeadroom:]}, nil
}

// beginEmit returns an empty buffer with a frame's headroom (beginFrame)
// and room for an Emit packet whose room and event names take names bytes
// and its payload about payloadHint, so that building it allocates once.
func beginEmit(names, payloadHint int) []byte {
	const fixed = 2 + 2*binary.MaxVarintLen32 // kind, flags, two name lengths
	return make([]byte, frameHeadroom, frameHeadroom+fixed+names+payloadHint)
}

// streamFrame returns the packet with its length prefix, built by the
// first stream member that needs it.
func (bc *broadcast) streamFrame() []byte {
	bc.streamOnce.Do(func() {
		b := make([]byte, 0, binary.MaxVarintLen32+len(bc.pkt))
		bc.stream = append(binary.AppendUvarint(b, uint64(len(bc.pkt))), bc.pkt...)
	})
	return bc.stream
}

// closeHandshake is one end's record of a closing handshake, guarded by
// wmu, the link's write lock; each link says what else wmu orders.
type closeHandshake struct {
	wmu       sync.RWMutex
	closing   bool // this end sent its close: no more data
	initiated bool // this end's close went first
	noticed   bool // the other end's close arrived
	// receivedCode and receivedReason are the other end's close, once
	// noticed: two fields, not a CloseError, so that the code fits beside
	// the flags and a pktConn stays in its 512-byte size class.
	receivedCode   wsframe.CloseCode
	sent           CloseError // this end's close, once closing
	receivedReason string
}

// markSent records this end's close and reports whether it is the first.
// The caller holds wmu.
func (h *closeHandshake) markSent(code wsframe.CloseCode, reason string) bool {
	if h.closing {
		return false
	}
	h.closing, h.initiated = true, !h.noticed
	h.sent = CloseError{Code: code, Reason: reason}
	return true
}

// markNoticed records that the other end's close, ce, arrived.
func (h *closeHandshake) markNoticed(ce *CloseError) {
	h.wmu.Lock()
	h.noticed = true
	h.receivedCode, h.receivedReason = ce.Code, ce.Reason
	h.wmu.Unlock()
}

// closeCause is why the link is closing, once it refuses packets for its
// closing handshake: this end's close when it went first, else the other
// end's, as outcome will say when the read loop has ended; nil while the
// handshake has not begun (a link dropped without one refuses packets
// too).
func (h *closeHandshake) closeCause() *CloseError {
	h.wmu.RLock()
	defer h.wmu.RUnlock()
	switch {
	case !h.closing:
		return nil
	case h.initiated:
		sent := h.sent
		return &sent
	}
	return &CloseError{Code: h.receivedCode, Reason: h.receivedReason, Remote: true}
}

// sentBeforeEnd returns this end's close when err, the end of reading (a
// closed socket, EOF, a deadline), came after it was sent: a clean end of
// the closing handshake. Otherwise it returns nil.
func (h *closeHandshake) sentBeforeEnd(err error) *CloseError {
	if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) && !errors.Is(err, os.ErrDeadlineExceeded) {
		return nil
	}
	h.wmu.RLock()
	defer h.wmu.RUnlock()
	if !h.closing {
		return nil
	}
	sent := h.sent
	return &sent
}

// outcome is why a link whose read loop ended with err closed. When this
// end began the handshake (Shutdown, an idle timeout, a violation,
// Close), that is its own close, whatever ended the reading after it: the
// other end's answer, which echoes the code without the reason, or the
// timeout of a peer that never answered. OnDisconnect and a client's
// calls then say what this end decided (1001 HP_IDLE_TIMEOUT, not the
// peer's 1001).
func (h *closeHandshake) outcome(err error) error {
	h.wmu.RLock()
	defer h.wmu.RUnlock()
	if h.initiated {
		sent := h.sent
		return &sent
	}
	return err
}

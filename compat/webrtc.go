package compat

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hotpath-go/hotpath/corkwriter"
	"github.com/hotpath-go/hotpath/wsframe"
	"github.com/pion/datachannel"
	"github.com/pion/ice/v4"
	"github.com/pion/webrtc/v4"
)

// The data channels of a hotpath WebRTC connection (PROTOCOL.md §8.2),
// both opened by the client: the control channel, ordered and reliable,
// and the unreliable one, unordered and never retransmitted, for
// unreliable emits. Each carries one packet per message.
const (
	ControlChannel    = Subprotocol
	UnreliableChannel = Subprotocol + "/unreliable"
)

// WebRTCOptions configures the WebRTC carrier of a server or a client.
// The SCTP retransmission cap of its data channels is native SCTP's:
// Options.SCTPRTOMax, or ClientOptions.SCTPRTOMax on a client.
type WebRTCOptions struct {
	// ICEServers are the STUN and TURN servers for NAT traversal; none are
	// needed between hosts that reach each other directly.
	ICEServers []webrtc.ICEServer
	// LoopbackOnly gathers loopback host candidates only and turns mDNS
	// off, so that no packet leaves the machine: for tests and peers on
	// one host. (Chromium never offers a loopback candidate itself; the
	// pair forms through a peer-reflexive one.)
	LoopbackOnly bool
	// MaxPending bounds the peer connections signalled and still waiting
	// for their control channel to open (each holds its ICE agent, UDP
	// sockets and DTLS state for up to 10 s, about 110 KiB; a client that
	// completes ICE and DTLS may make it hold up to its SCTP association's
	// 1 MiB receive window more, with the fragments of a message larger
	// than the window, which pion keeps until it completes); a signalling
	// request past it is answered 503 with Retry-After, so that a flood of
	// offers cannot exhaust the process's sockets, unless the oldest has
	// been pending for 2 s: that one is given up and the newcomer takes
	// its slot. 256 by default.
	MaxPending int
}

// api is the pion API of the carrier; rtoMax caps the retransmission
// timeout of its SCTP associations (Options.SCTPRTOMax, as on native
// SCTP; pion's default is 60 s).
func (o WebRTCOptions) api(rtoMax time.Duration) *webrtc.API {
	var se webrtc.SettingEngine
	se.DetachDataChannels()
	se.SetSCTPMaxMessageSize(maxChannelMessage)
	se.SetSCTPRTOMax(rtoMax)
	se.LoggerFactory = quietLogs
	if o.LoopbackOnly {
		se.SetIncludeLoopbackCandidate(true)
		se.SetICEMulticastDNSMode(ice.MulticastDNSModeDisabled)
		se.SetNetworkTypes([]webrtc.NetworkType{webrtc.NetworkTypeUDP4})
		se.SetIPFilter(func(ip net.IP) bool { return ip.IsLoopback() })
	}
	return webrtc.NewAPI(webrtc.WithSettingEngine(se))
}

// maxSignalBody bounds a signalling request: an SDP offer is a few KiB.
const maxSignalBody = 64 << 10

// maxOfferCandidates bounds the ICE candidates of an offer. Each is a
// candidate pair the server's ICE agent checks with STUN binding requests,
// about 8 of them, sent to an address the client chose: unbounded, one
// 62 KB offer of 1,000 candidates made the server send 8,000 requests to
// third parties, a reflector for whoever can POST to the endpoint. A
// browser offers a few per network interface (host or mDNS, server
// reflexive, relayed), rarely 20 in all; RFC 8445 §6.1.2.5 caps a check
// list at 100 pairs by default for the same reason.
const maxOfferCandidates = 64

// maxOfferMedia bounds the media sections (m= lines) of an offer. A
// hotpath offer has one, its data channels' (PROTOCOL.md §8.2); pion
// answers every section, so that an offer of 673 audio sections (62 KB)
// took 43 ms of CPU and held 2 MiB of heap for its MaxPending slot, where
// a plain one takes 1.5 ms and 110 KiB.
const maxOfferMedia = 8

// offerLines counts the ICE candidates and the media sections of an SDP
// offer line by line, as pion's parser reads it: a line ends at '\n', and
// the '\r' and '\n' before a line's type are skipped. Counted as the
// string "\na=candidate:", an offer whose candidate lines began with '\r'
// passed maxOfferCandidates with any number of them (200 drew 1,600 STUN
// requests).
func offerLines(sdp string) (candidates, media int) {
	for line := range strings.SplitSeq(sdp, "\n") {
		line = strings.TrimLeft(line, "\r")
		switch {
		case strings.HasPrefix(line, "a=candidate"):
			candidates++
		case strings.HasPrefix(line, "m="):
			media++
		}
	}
	return candidates, media
}

// signalBodyTimeout bounds the reading of a signalling request's body (a
// variable for the tests).
var signalBodyTimeout = handshakeTimeout

// WebRTCHandler returns the HTTP signalling endpoint of the WebRTC
// carrier. A client POSTs its offer, a JSON RTCSessionDescription with
// every ICE candidate gathered, and gets the answer the same way; the
// connection is a peer once the client's control channel opens. The
// request passes Options.CheckOrigin and Options.Authenticate as a
// WebSocket upgrade does.
func (s *Server) WebRTCHandler(opts WebRTCOptions) http.Handler {
	api := opts.api(s.opts.SCTPRTOMax)
	config := webrtc.Configuration{ICEServers: opts.ICEServers}
	maxPending := int64(opts.MaxPending)
	if maxPending <= 0 {
		maxPending = 256
	}
	pending := &pendingHandshakes{max: int(maxPending)}
	bodyTimeout := signalBodyTimeout
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			w.Header().Set("Allow", http.MethodPost)
			http.Error(w, "POST an SDP offer", http.StatusMethodNotAllowed)
			return
		}
		// Counted by address from the signalling request on, its offer's
		// reading and MaxPending's slot included; the goroutine that
		// waits for the control channel takes the slot over.
		slot, err := s.reserveAddr(r.RemoteAddr)
		if err != nil {
			s.refuse(w, err)
			return
		}
		handedOver := false
		defer func() {
			if !handedOver {
				slot.abandon()
			}
		}()
		up, err := s.prepareUpgrade(r, slot)
		if err != nil {
			s.refuse(w, err)
			return
		}
		// The body has bodyTimeout to arrive, whatever the http.Server's
		// own timeouts: a ReadHeaderTimeout (cmd/hotpath's) ends at the
		// headers, and a client trickling its offer, or stopping halfway,
		// held a goroutine and a descriptor for good, any number of them
		// (no MaxPending slot is taken before the offer is read). The
		// deadline is lifted once it is read: it would end the request's
		// context, which ICE gathering waits on.
		rc := http.NewResponseController(w)
		rc.SetReadDeadline(time.Now().Add(bodyTimeout))
		var offer webrtc.SessionDescription
		err = readSignal(r.Body, &offer)
		if err != nil {
			// The deadline stays: net/http reads what is left of a body
			// before it answers, to keep the connection.
			w.Header().Set("Connection", "close")
		} else {
			rc.SetReadDeadline(time.Time{})
		}
		if ne, ok := errors.AsType[net.Error](err); ok && ne.Timeout() {
			s.refuse(w, &HTTPError{Status: http.StatusRequestTimeout, Message: "the offer did not arrive in time"})
			return
		}
		if err == errSignalTrailing {
			s.refuse(w, &HTTPError{Status: http.StatusBadRequest, Message: err.Error()})
			return
		}
		if err != nil || offer.Type != webrtc.SDPTypeOffer {
			s.refuse(w, &HTTPError{Status: http.StatusBadRequest, Message: "body is not an SDP offer"})
			return
		}
		switch candidates, media := offerLines(offer.SDP); {
		case candidates > maxOfferCandidates:
			s.refuse(w, &HTTPError{Status: http.StatusBadRequest, Message: "too many ICE candidates in the offer"})
			return
		case media > maxOfferMedia:
			s.refuse(w, &HTTPError{Status: http.StatusBadRequest, Message: "too many media sections in the offer"})
			return
		}
		// The connection has handshakeTimeout from here to open its
		// control channel; Shutdown cuts that short when its ctx ends, and
		// a newcomer when the slot is wanted after staleHandshake.
		ctx, cancel := context.WithTimeout(context.Background(), handshakeTimeout)
		end, ok := pending.begin(cancel)
		if !ok {
			cancel()
			w.Header().Set("Retry-After", "1")
			s.refuse(w, &HTTPError{Status: http.StatusServiceUnavailable, Message: "too many WebRTC connections opening"})
			return
		}
		pc, err := api.NewPeerConnection(config)
		if err != nil {
			end()
			cancel()
			s.refuse(w, &HTTPError{Status: http.StatusInternalServerError, Message: err.Error()})
			return
		}
		t := newRTCTransport(pc)
		opened := t.acceptChannels()
		gathering := context.AfterFunc(r.Context(), cancel)
		answer, err := answerOffer(ctx, pc, offer)
		gathering()
		if err != nil {
			end()
			cancel()
			pc.Close()
			s.refuse(w, &HTTPError{Status: http.StatusBadRequest, Message: err.Error()})
			return
		}
		s.conns.add()
		abandon := &cancelCloser{cancel}
		s.handshakes.add(abandon)
		handedOver = true
		go func() {
			defer cancel()
			defer slot.abandon() // unless the Peer kept it
			select {
			case ch := <-opened:
				s.handshakes.remove(abandon)
				end()
				link := newMessageConn(t, ch, s.opts.Limits)
				t.attach(link)
				s.serveLink(link, up)
				return
			case <-ctx.Done():
			case <-t.closed:
				// Closed before its control channel opened: a channel
				// PROTOCOL.md §8.2 does not have, or ICE or DTLS failed.
				// Waiting for ctx held the slot, and the handshake
				// Shutdown waits for, for handshakeTimeout after.
			}
			s.handshakes.remove(abandon)
			end()
			s.metrics.handshakeFailures.Add(1)
			pc.Close()
			s.conns.done()
		}()
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(answer)
	})
}

// errSignalTrailing refuses a signalling body with more than whitespace
// after its offer: it is not one JSON value (RFC 8259 §2: a JSON text is
// one value, whitespace around it), and a second value, or garbage, was
// read and dropped, so the offer the client meant is in doubt. json.Marshal
// (the Go client) and JSON.stringify (hotpath.js) send the offer alone.
var errSignalTrailing = errors.New("body has more than its SDP offer")

// errSignalAnswerTrailing refuses, on the client, a signalling answer with
// more than whitespace after its JSON value, as errSignalTrailing refuses
// such an offer.
var errSignalAnswerTrailing = errors.New("more than one JSON value: the SDP answer is followed by more than whitespace")

// readSignal reads a signalling body into sd: the offer at the server,
// the answer at the client, each one JSON value within maxSignalBody,
// whitespace around it (offerEnd), the body then read to its end
// (readBodyEnd): one rule for both directions.
func readSignal(body io.Reader, sd *webrtc.SessionDescription) error {
	limited := io.LimitReader(body, maxSignalBody)
	dec := json.NewDecoder(limited)
	if err := dec.Decode(sd); err != nil {
		return err
	}
	if err := offerEnd(dec); err != nil {
		return err
	}
	return readBodyEnd(limited, body)
}

// offerEnd reads what follows the offer's JSON value in a signalling
// body (or the answer's, on the client), through dec, which decoded it:
// nil for whitespace up to the body's end, errSignalTrailing for anything
// else, and the body's error for a read that failed (its deadline, a body
// cut short).
func offerEnd(dec *json.Decoder) error {
	_, err := dec.Token()
	_, syntax := errors.AsType[*json.SyntaxError](err)
	switch {
	case err == io.EOF:
		return nil
	case err == nil || syntax:
		return errSignalTrailing
	}
	return err
}

// errSignalBodyTooLarge is a signalling body that goes on past
// maxSignalBody after its offer.
var errSignalBodyTooLarge = errors.New("compat: signalling body over 64 KiB")

// readBodyEnd reads what is left of a signalling body after its offer,
// through limited (the body as the decoder read it, limited to
// maxSignalBody) up to the body's end, under the body's deadline. Left
// unread, net/http reads it once the handler has returned (up to 256 KiB,
// to keep the connection), and before it writes the answer's header: with
// the deadline lifted, a client whose Content-Length promised more than it
// sent, or whose chunked body never ended, held the connection and its
// goroutine for as long as it liked, and a refused offer (of the wrong
// type, say) took no MaxPending slot to do it.
func readBodyEnd(limited, body io.Reader) error {
	if _, err := io.Copy(io.Discard, limited); err != nil {
		return err
	}
	var b [1]byte
	switch n, err := body.Read(b[:]); {
	case n > 0:
		return errSignalBodyTooLarge
	case err != nil && err != io.EOF:
		return err
	}
	return nil
}

// answerOffer answers offer with every local candidate in the answer (no
// trickle ICE: one request, one response).
func answerOffer(ctx context.Context, pc *webrtc.PeerConnection, offer webrtc.SessionDescription) (*webrtc.SessionDescription, error) {
	if err := pc.SetRemoteDescription(offer); err != nil {
		return nil, err
	}
	answer, err := pc.CreateAnswer(nil)
	if err != nil {
		return nil, err
	}
	gathered := webrtc.GatheringCompletePromise(pc)
	if err := pc.SetLocalDescription(answer); err != nil {
		return nil, err
	}
	if err := waitGathered(ctx, gathered); err != nil {
		return nil, err
	}
	return pc.LocalDescription(), nil
}

func waitGathered(ctx context.Context, gathered <-chan struct{}) error {
	ctx, cancel := context.WithTimeout(ctx, handshakeTimeout)
	defer cancel()
	select {
	case <-gathered:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("compat: ICE gathering: %w", ctx.Err())
	}
}

// rtcTransport is a WebRTC peer connection under a pktConn.
type rtcTransport struct {
	pc *webrtc.PeerConnection

	mu           sync.Mutex
	sendMu       sync.Mutex                  // an unreliable send's bound check and write
	unreliable   datachannel.ReadWriteCloser // nil until it opens
	unreliableDC *webrtc.DataChannel         // the channel unreliable is detached from
	datagrams    chan datachannel.ReadWriteCloser
	closeOnce    sync.Once
	closed       chan struct{} // closed with the transport
	// link is the connection's engine once it exists, for
	// unexpectedChannel to close it with a code.
	link atomic.Pointer[pktConn]
	// reading is set once the unreliable channel has its reader
	// (readDatagrams), and deliver once the connection takes what it
	// reads (receiveDatagrams).
	reading atomic.Bool
	deliver atomic.Pointer[func([]byte)]
}

func newRTCTransport(pc *webrtc.PeerConnection) *rtcTransport {
	t := &rtcTransport{pc: pc, datagrams: make(chan datachannel.ReadWriteCloser, 1), closed: make(chan struct{})}
	pc.OnConnectionStateChange(func(st webrtc.PeerConnectionState) {
		if st == webrtc.PeerConnectionStateFailed || st == webrtc.PeerConnectionStateClosed {
			t.closeTransport(wsframe.CloseAbnormal, "")
		}
	})
	return t
}

// acceptChannels takes the channels the client opens and returns the
// control channel once it is open.
func (t *rtcTransport) acceptChannels() <-chan msgChannel {
	opened := make(chan msgChannel, 1)
	var control, unreliable atomic.Bool // opened once each; a second is unexpected
	t.pc.OnDataChannel(func(dc *webrtc.DataChannel) {
		switch {
		case dc.Label() == ControlChannel && control.CompareAndSwap(false, true):
			dc.OnOpen(func() {
				if raw, err := dc.Detach(); err == nil {
					opened <- &rtcChannel{raw: raw, dc: dc}
				}
			})
		case dc.Label() == UnreliableChannel && unreliable.CompareAndSwap(false, true):
			dc.OnOpen(func() { t.setUnreliable(dc) })
		default:
			t.unexpectedChannel(dc)
		}
	})
	return opened
}

func (t *rtcTransport) attach(c *pktConn) { t.link.Store(c) }

// unexpectedChannel ends a connection whose other end opened a channel
// besides the two of PROTOCOL.md §8.2, or one of them twice. Closing the
// channel alone left its SCTP stream in the association until the other
// end reset it too, so a peer could pin thousands of them; a second control
// or unreliable channel blocked a pion goroutine for good.
func (t *rtcTransport) unexpectedChannel(dc *webrtc.DataChannel) {
	dc.Close()
	if link := t.link.Load(); link != nil {
		link.requestClose(wsframe.CloseProtocolError, unexpectedStreamReason)
		return
	}
	// Before the connection exists there is no one to tell why.
	t.closeTransport(wsframe.CloseAbnormal, unexpectedStreamReason)
}

func (t *rtcTransport) setUnreliable(dc *webrtc.DataChannel) {
	raw, err := dc.Detach()
	if err != nil {
		return
	}
	t.mu.Lock()
	t.unreliable, t.unreliableDC = raw, dc
	t.mu.Unlock()
	t.datagrams <- raw
	if t.reading.CompareAndSwap(false, true) {
		go t.readDatagrams()
	}
}

func (t *rtcTransport) carriesCloseCode() bool { return false }

func (t *rtcTransport) carrier() Carrier { return CarrierWebRTC }

// ended: closed is closed with the peer connection, by this end, or as
// it fails or closes, which is how the other end's close shows
// (transportEnd).
func (t *rtcTransport) ended() <-chan struct{} { return t.closed }

// encrypted: a data channel always runs over DTLS (RFC 8831), whatever
// the signalling ran over.
func (t *rtcTransport) encrypted() bool { return true }

// closeTransport closes the peer connection: a data channel carries no
// close code (the close notice does). Except on an abnormal close, it
// first waits, for up to noticeDeliveryTimeout, until the other end has
// acknowledged what the control channel sent, the close notice included,
// as SCTP's graceful shutdown does (sctpTransport.closeTransport): pion's
// PeerConnection.Close aborts the association, which drops what it has
// not delivered, and a connection refused as it opened (past
// Options.MaxConnections, or during Shutdown) ended in 1006 without its
// notice.
func (t *rtcTransport) closeTransport(code wsframe.CloseCode, _ string) {
	t.close(code != wsframe.CloseAbnormal)
}

// close closes the peer connection once, after the control channel's
// delivery (awaitDelivered) if deliver is set.
//
// It lets go of the connection's datagram function, which reaches the
// connection's handler (a client, a Peer): pion keeps a closed peer
// connection, and this transport with it, from timers that outlive the
// close by up to seconds, and the runtime keeps stopped timers' functions
// until their P cleans its timer heap (go.dev/issue/75935). Kept, it kept
// a closed client reachable with its buffers (a soak: 4 MB, up to a second
// after Close). What arrives after the close is not delivered.
func (t *rtcTransport) close(deliver bool) {
	t.closeOnce.Do(func() {
		close(t.closed)
		t.deliver.Store(nil)
		go func() {
			if deliver {
				t.awaitDelivered(time.Now().Add(noticeDeliveryTimeout))
			}
			t.pc.Close()
		}()
	})
}

// noticeDeliveryTimeout bounds the wait for the close notice's delivery
// before a peer connection is closed: the second SCTP's graceful shutdown
// has.
const noticeDeliveryTimeout = time.Second

// awaitDelivered waits until the control channel holds nothing the other
// end has not acknowledged, the peer connection has failed, or the
// deadline passes. pion tells of a channel's buffer shrinking in one
// callback only, the application's; a close polls instead.
func (t *rtcTransport) awaitDelivered(deadline time.Time) {
	link := t.link.Load()
	if link == nil || link.ch == nil {
		return
	}
	for link.ch.buffered() > 0 && time.Now().Before(deadline) {
		switch t.pc.ConnectionState() {
		case webrtc.PeerConnectionStateFailed, webrtc.PeerConnectionStateClosed:
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// closeAfterHandshake closes a peer connection whose closing handshake
// this end started and the other end answered: the answer shows that the
// notice arrived, and the acknowledgement awaitDelivered waits for may
// come up to 200 ms later (SCTP's delayed SACK).
func (t *rtcTransport) closeAfterHandshake() { t.close(false) }

// closeClosed closes a peer connection the other end closed after this end
// answered its close notice: nothing is left to deliver.
func (t *rtcTransport) closeClosed() { t.close(false) }

// closeUnanswered closes a peer connection whose close notice went
// unanswered for closeTimeout at once: the notice had that long to be
// delivered, and awaitDelivered would only add its second on a dead path.
func (t *rtcTransport) closeUnanswered(wsframe.CloseCode, string) { t.close(false) }

func (t *rtcTransport) closeErrorOf(error) *CloseError { return nil }

func (t *rtcTransport) sendDatagram(pkt []byte) (corkwriter.Status, bool) {
	t.mu.Lock()
	raw, dc := t.unreliable, t.unreliableDC
	t.mu.Unlock()
	if raw == nil || len(pkt) > maxChannelMessage {
		return 0, false
	}
	// A data channel's write never waits: pion queues what the peer has
	// not taken, without bound. For a peer that stopped answering, every
	// emit would stay in memory until the connection ends; one that may
	// be lost is dropped instead when it would take the buffered amount
	// past maxQueuedDatagrams. The check and the write go together: emits
	// that checked at once all passed it.
	t.sendMu.Lock()
	defer t.sendMu.Unlock()
	if dc.BufferedAmount()+uint64(len(pkt)) > maxQueuedDatagrams {
		return corkwriter.Dropped, true
	}
	if _, err := raw.Write(pkt); err != nil {
		return corkwriter.Closed, true
	}
	return corkwriter.Sent, true
}

// receiveDatagrams hands the connection what the unreliable channel
// carries (readDatagrams).
func (t *rtcTransport) receiveDatagrams(deliver func([]byte)) {
	if keepDeliver(&t.deliver, t.closed, deliver) && t.reading.CompareAndSwap(false, true) {
		t.readDatagrams()
	}
}

// readDatagrams reads the unreliable channel from whenever the client
// opens it until the transport closes, from as soon as it opens or the
// connection starts, and hands what it reads to the connection once it has
// one. A client may open it late; a channel nobody reads would fill the
// association's receive window and stall the control channel with it. A
// client may also open it, and send on it, before its control channel:
// left unread until the connection existed, what it sent stayed in the
// association's 1 MiB window for handshakeTimeout, for an offer that held
// only its MaxPending slot. Dropped, it is what an unreliable datagram
// may be, and one sent before the connection exists has no room to reach.
func (t *rtcTransport) readDatagrams() {
	var raw datachannel.ReadWriteCloser
	select {
	case raw = <-t.datagrams:
	case <-t.closed:
		return
	}
	small := make([]byte, channelReadSize)
	for {
		buf, n, text, release, err := readChannelMessage(raw.ReadDataChannel, small)
		if err == nil && !text {
			if deliver := t.deliver.Load(); deliver != nil {
				(*deliver)(buf[:n]) // the inbox copies what it keeps
			}
		}
		release()
		if errors.Is(err, io.ErrShortBuffer) {
			// Over the a=max-message-size this end announces.
			datagramTooBig(t.link.Load(), t)
			return
		}
		if err != nil {
			return
		}
	}
}

// rtcChannel is a detached data channel as a message channel.
type rtcChannel struct {
	raw datachannel.ReadWriteCloser
	dc  *webrtc.DataChannel
}

func (c *rtcChannel) readMessage(p []byte) (int, bool, error) { return c.raw.ReadDataChannel(p) }

func (c *rtcChannel) writeMessage(p []byte) error {
	_, err := c.raw.Write(p)
	return err
}

func (c *rtcChannel) buffered() int { return int(c.dc.BufferedAmount()) }

// dialWebRTC connects through the signalling endpoint at a
// webrtc+http:// or webrtc+https:// URL (the http or https URL of the
// server's WebRTCHandler) and waits for the control channel to open.
func (c *Client) dialWebRTC(ctx context.Context, u *url.URL) (link, error) {
	signal := *u
	signal.Scheme = strings.TrimPrefix(u.Scheme, "webrtc+")
	pc, err := c.opts.WebRTC.api(c.opts.SCTPRTOMax).NewPeerConnection(webrtc.Configuration{ICEServers: c.opts.WebRTC.ICEServers})
	if err != nil {
		return nil, err
	}
	fail := func(err error) (link, error) {
		pc.Close()
		return nil, fmt.Errorf("compat: webrtc: %w", err)
	}
	t := newRTCTransport(pc)
	pc.OnDataChannel(t.unexpectedChannel) // the server opens none
	dc, err := pc.CreateDataChannel(ControlChannel, nil)
	if err != nil {
		return fail(err)
	}
	opened := make(chan msgChannel, 1)
	dc.OnOpen(func() {
		if raw, err := dc.Detach(); err == nil {
			opened <- &rtcChannel{raw: raw, dc: dc}
		}
	})
	ordered, retransmits := false, uint16(0)
	udc, err := pc.CreateDataChannel(UnreliableChannel, &webrtc.DataChannelInit{Ordered: &ordered, MaxRetransmits: &retransmits})
	if err != nil {
		return fail(err)
	}
	udc.OnOpen(func() { t.setUnreliable(udc) })
	offer, err := pc.CreateOffer(nil)
	if err != nil {
		return fail(err)
	}
	gathered := webrtc.GatheringCompletePromise(pc)
	if err := pc.SetLocalDescription(offer); err != nil {
		return fail(err)
	}
	if err := waitGathered(ctx, gathered); err != nil {
		return fail(err)
	}
	answer, err := c.signal(ctx, signal.String(), pc.LocalDescription())
	if err != nil {
		return fail(err)
	}
	if err := pc.SetRemoteDescription(*answer); err != nil {
		return fail(err)
	}
	setConnectStep(ctx, stepWebRTC)
	select {
	case ch := <-opened:
		link := newMessageConn(t, ch, c.opts.Limits)
		t.attach(link)
		return link, nil
	case <-ctx.Done():
		return fail(ctx.Err())
	}
}

// signalClient sends the offers. One request per connection: no idle
// keep-alive connection (and its two goroutines, and one of the signalling
// server's) is left after a dial. Closing each request's connection
// (Request.Close) was not enough: a Dial canceled while the request's
// connection was being made left that connection, made in the background,
// idle in http.DefaultClient's pool for its 90 s (TestDialCanceled caught
// it, about once in 40 runs). Without keep-alives the transport closes it.
// Its requests are bounded by the dial's ctx (ConnectTimeout). A client
// with ClientOptions.TLSConfig signals through one of its own
// (signalClientFor).
var signalClient = newSignalClient(nil)

func newSignalClient(tlsConf *tls.Config) *http.Client {
	return &http.Client{Transport: &http.Transport{
		Proxy:             http.ProxyFromEnvironment,
		TLSClientConfig:   tlsConf,
		DisableKeepAlives: true,
	}}
}

// signalClientFor returns the client for one offer: one that trusts what
// ClientOptions.TLSConfig trusts, for a webrtc+https:// endpoint with a
// private or pinned certificate, else signalClient. Without keep-alives
// it holds nothing after the offer, so one per dial costs no more. The
// request is HTTP/1.1 (NextProtos cleared).
func (c *Client) signalClientFor() *http.Client {
	if c.opts.TLSConfig == nil {
		return signalClient
	}
	conf := c.opts.TLSConfig.Clone()
	conf.NextProtos = nil
	return newSignalClient(conf)
}

// signal POSTs the offer and returns the answer.
func (c *Client) signal(ctx context.Context, endpoint string, offer *webrtc.SessionDescription) (*webrtc.SessionDescription, error) {
	body, err := json.Marshal(offer)
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, endpoint, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	for k, v := range c.opts.Header {
		req.Header[k] = v
	}
	req.Header.Set("Content-Type", "application/json")
	rsp, err := c.signalClientFor().Do(req)
	if err != nil {
		return nil, err
	}
	defer rsp.Body.Close()
	if rsp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(rsp.Body, 512))
		return nil, &HTTPError{Status: rsp.StatusCode, Message: refusalMessage(msg), RetryAfter: retryAfter(rsp.Header)}
	}
	// The answer is one JSON value, whitespace around it, as the server
	// reads an offer: one followed by more (a second value, garbage) was
	// taken, the rest dropped unread, where the answer meant is in doubt.
	var answer webrtc.SessionDescription
	err = readSignal(rsp.Body, &answer)
	if err == errSignalTrailing {
		err = errSignalAnswerTrailing
	}
	if err != nil {
		return nil, fmt.Errorf("the signalling answer from %s: %w", endpoint, err)
	}
	if answer.Type != webrtc.SDPTypeAnswer {
		return nil, errors.New("signalling answered no SDP answer")
	}
	return &answer, nil
}

package compat

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// A signalling body that stalls after a whole JSON value (a Content-Length
// larger than what is sent, or a chunked body never ended) is still held to
// signalBodyTimeout. The handler lifted the read deadline once the decoder
// had its value, and net/http then read what was left of the body after
// the handler (up to 256 KiB, to keep the connection) with no deadline at
// all: the answer went out, and the connection and its goroutine stayed
// for as long as the client wanted, any number of them. An offer of the
// wrong type needs no ICE agent and no MaxPending slot, so nothing bounded
// them.
func TestWebRTCSignallingBodyStalledAfterTheOffer(t *testing.T) {
	defer func(d time.Duration) { signalBodyTimeout = d }(signalBodyTimeout)
	signalBodyTimeout = 300 * time.Millisecond
	e := newCarrierEnv(t, Options{Router: concurrencyRouter()})
	// The offer's peer connection, which the test keeps, is in the
	// baseline.
	offer, _ := json.Marshal(gatheredOffer(t, ControlChannel))
	base := goroutineBaseline(t, e, CarrierWebRTC)
	host := strings.TrimPrefix(strings.TrimSuffix(e.urls[CarrierWebRTC], "/rtc"), "webrtc+http://")
	bodies := []struct {
		name, body string
		want       int
	}{
		{"an answer", `{"type":"answer","sdp":"v=0"}`, http.StatusBadRequest},
		{"an offer", string(offer), http.StatusOK},
	}
	const each = 10
	var conns []net.Conn
	var names []string
	var wants []int
	for _, b := range bodies {
		for i := range each {
			nc, err := net.Dial("tcp", host)
			if err != nil {
				t.Fatal(err)
			}
			defer nc.Close()
			if i%2 == 0 {
				fmt.Fprintf(nc, "POST /rtc HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", host, len(b.body)+1000, b.body)
			} else {
				fmt.Fprintf(nc, "POST /rtc HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n", host, len(b.body), b.body)
			}
			conns = append(conns, nc)
			names = append(names, b.name)
			wants = append(wants, b.want)
		}
	}
	for i, nc := range conns {
		nc.SetReadDeadline(time.Now().Add(hangBound))
		br := bufio.NewReader(nc)
		rsp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("%s, its body stalled after it: %v", names[i], err)
		}
		io.Copy(io.Discard, rsp.Body)
		rsp.Body.Close()
		// Answered 408 once the deadline passed, or before with what the
		// offer deserved: either way the connection then closes.
		if rsp.StatusCode != http.StatusRequestTimeout && rsp.StatusCode != wants[i] {
			t.Errorf("%s, its body stalled after it: %s, want %d or 408", names[i], rsp.Status, wants[i])
		}
		if _, err := br.ReadByte(); err != io.EOF {
			t.Errorf("%s, its body stalled after it: the connection still open %v after the answer (signalBodyTimeout %v): %v", names[i], hangBound, signalBodyTimeout, err)
		}
	}
	for _, nc := range conns {
		nc.Close()
	}
	// The offers' peer connections, never answered, end at
	// handshakeTimeout.
	settleWithin(t, e.srv, base, "after the stalled bodies", handshakeTimeout+hangBound)
}

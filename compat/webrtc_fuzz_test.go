package compat

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/pion/webrtc/v4"
)

// dropHandshakes gives up s's carrier handshakes in progress, as Shutdown
// does once its grace ends, and leaves s serving.
func dropHandshakes(s *Server) {
	s.handshakes.mu.Lock()
	all := make([]func() error, 0, len(s.handshakes.m))
	for c := range s.handshakes.m {
		all = append(all, c.Close)
	}
	s.handshakes.mu.Unlock()
	for _, c := range all {
		c()
	}
}

// wantSignalStatus is the status WebRTCHandler answers a POST of body
// with: 400 for a body that is not one JSON SDP offer within
// maxSignalBody (json.Unmarshal, which takes whitespace after the value
// and nothing else: errSignalTrailing), or an offer past
// maxOfferCandidates or maxOfferMedia; 0 for an offer pion decides on,
// which it answers 200, or refuses with 400.
func wantSignalStatus(body []byte) int {
	if len(body) > maxSignalBody {
		return http.StatusBadRequest
	}
	var offer webrtc.SessionDescription
	if err := json.Unmarshal(body, &offer); err != nil || offer.Type != webrtc.SDPTypeOffer {
		return http.StatusBadRequest
	}
	if candidates, media := offerLines(offer.SDP); candidates > maxOfferCandidates || media > maxOfferMedia {
		return http.StatusBadRequest
	}
	return 0
}

// FuzzSignalBody posts the fuzzer's bytes as the body of a WebRTC
// signalling request to a server's WebRTCHandler (in process, no network
// but pion's loopback ICE gathering for an offer it takes). The handler
// must not panic, must answer within 10 s, with the status
// wantSignalStatus gives (200 or 400 for an offer pion decides on, and
// then a JSON SDP answer with 200); and once the handshake it started is
// given up, as Shutdown would, no goroutine of it may be left after 10 s.
func FuzzSignalBody(f *testing.F) {
	pc, err := webrtc.NewPeerConnection(webrtc.Configuration{})
	if err != nil {
		f.Fatal(err)
	}
	if _, err := pc.CreateDataChannel(ControlChannel, nil); err != nil {
		f.Fatal(err)
	}
	offer, err := pc.CreateOffer(nil)
	pc.Close()
	if err != nil {
		f.Fatal(err)
	}
	valid, _ := json.Marshal(offer)
	f.Add(valid)
	f.Add([]byte(`{"type":"offer","sdp":"v=0"}`))
	f.Add([]byte(`{"type":"answer","sdp":"v=0"}`))
	f.Add([]byte(`{"type":"offer","sdp":"v=0"} trailing`))
	f.Add(append(append([]byte(nil), valid...), " trailing"...))
	f.Add(append(append([]byte(nil), valid...), "\r\n\t "...))
	f.Add([]byte(`{"type":"offer","sdp":"` + strings.Repeat(`a=candidate:1 1 udp 1 127.0.0.1 9 typ host\r\n`, maxOfferCandidates+1) + `"}`))
	f.Add([]byte(`{"type":"offer","sdp":` + strings.Repeat(" ", maxSignalBody) + `"v=0"}`))
	f.Add([]byte(`{"type":1}`))
	f.Add([]byte(`[]`))
	f.Add([]byte{})

	s, err := NewServer(Options{Router: NewRouter(), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		f.Fatal(err)
	}
	h := s.WebRTCHandler(WebRTCOptions{LoopbackOnly: true})
	post := func(body []byte) *httptest.ResponseRecorder {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest(http.MethodPost, "http://127.0.0.1/rtc", bytes.NewReader(body)))
		dropHandshakes(s)
		return w
	}
	// pion starts some goroutines of its own on first use, for good; the
	// handshake's own end within a second or so.
	post(valid)
	select {
	case <-s.conns.idle():
	case <-time.After(10 * time.Second):
	}

	f.Fuzz(func(t *testing.T, body []byte) {
		base := runtime.NumGoroutine()
		answered := make(chan *httptest.ResponseRecorder, 1)
		go func() { answered <- post(body) }()
		var w *httptest.ResponseRecorder
		select {
		case w = <-answered:
		case <-time.After(10 * time.Second):
			t.Fatalf("no answer 10 s after the request: %q", body)
		}
		switch want := wantSignalStatus(body); {
		case want != 0 && w.Code != want:
			t.Fatalf("status %d, want %d (%s): %q", w.Code, want, strings.TrimSpace(w.Body.String()), body)
		case want == 0 && w.Code != http.StatusOK && w.Code != http.StatusBadRequest:
			t.Fatalf("status %d for an offer, want 200 or 400 (%s): %q", w.Code, strings.TrimSpace(w.Body.String()), body)
		case w.Code == http.StatusOK:
			var answer webrtc.SessionDescription
			if err := json.Unmarshal(w.Body.Bytes(), &answer); err != nil || answer.Type != webrtc.SDPTypeAnswer || answer.SDP == "" {
				t.Fatalf("200 without an SDP answer (%v): %q", err, w.Body.String())
			}
		}
		settleWithin(t, s, base, fmt.Sprintf("after the request %q", body), 10*time.Second)
	})
}

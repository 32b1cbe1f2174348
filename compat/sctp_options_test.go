package compat

import (
	"context"
	"reflect"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/pion/sctp"
	"github.com/pion/webrtc/v4"
)

// rtcAssociation is the SCTP association under a WebRTC peer connection.
// pion exposes no getter: the test reads the unexported field, and fails
// (rather than passing unchecked) if a new pion version moved it.
func rtcAssociation(t *testing.T, pc *webrtc.PeerConnection) *sctp.Association {
	t.Helper()
	st := pc.SCTP()
	st.MaxChannels() // takes the transport's lock: the field's write happens before the read below
	f := reflect.ValueOf(st).Elem().FieldByName("sctpAssociation")
	if !f.IsValid() || f.Type() != reflect.TypeFor[*sctp.Association]() {
		t.Fatal("pion's SCTPTransport has no sctpAssociation any more: update rtcAssociation")
	}
	if f.IsNil() {
		t.Fatal("the peer connection has no SCTP association")
	}
	return (*sctp.Association)(unsafe.Pointer(f.Pointer()))
}

// linkAssociation is the SCTP association under a link of the SCTP or
// the WebRTC carrier.
func linkAssociation(t *testing.T, l link) *sctp.Association {
	t.Helper()
	switch tr := l.(*pktConn).t.(type) {
	case *sctpTransport:
		return tr.assoc
	case *rtcTransport:
		return rtcAssociation(t, tr.pc)
	}
	t.Fatalf("link over %s has no SCTP association", l.carrier())
	return nil
}

// Options.SCTPRTOMax and ClientOptions.SCTPRTOMax reach the associations
// of their end, native SCTP (with and without DTLS) and WebRTC's; unset,
// both are defaultSCTPRTOMax.
func TestSCTPRTOMaxOptionReachesAssociations(t *testing.T) {
	for _, tc := range []struct {
		name                 string
		server, client       time.Duration // the options
		wantServer, wantClnt time.Duration
	}{
		{"default", 0, 0, defaultSCTPRTOMax, defaultSCTPRTOMax},
		{"set", time.Second, 7 * time.Second, time.Second, 7 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newCarrierEnv(t, Options{SCTPRTOMax: tc.server})
			seen := map[*Peer]bool{}
			for _, carrier := range []Carrier{CarrierSCTP, carrierSCTPDTLS, CarrierWebRTC} {
				c := e.dial(t, carrier, ClientOptions{SCTPRTOMax: tc.client, Reconnect: Reconnect{Disabled: true}})
				if got := pionRTOMax(t, linkAssociation(t, c.conn.link)); got != tc.wantClnt {
					t.Errorf("%s: client's association: RTO max %v, want %v", carrierName(carrier), got, tc.wantClnt)
				}
				var peer *Peer
				waitFor(t, func() bool {
					for _, p := range e.srv.snapshotPeers() {
						if !seen[p] {
							peer = p
							return true
						}
					}
					return false
				})
				seen[peer] = true
				if got := pionRTOMax(t, linkAssociation(t, peer.link)); got != tc.wantServer {
					t.Errorf("%s: server's association: RTO max %v, want %v", carrierName(carrier), got, tc.wantServer)
				}
			}
		})
	}
}

// NewServer and Dial refuse a cap under SCTP's RTO.Min (RFC 9260 §6.3.1
// C6), where pion would take the cap as the timeout itself, and above its
// RTO.Max (§16); 1 s and 60 s pass.
func TestSCTPRTOMaxOutsideRTOMinMaxRefused(t *testing.T) {
	for _, d := range []time.Duration{-time.Second, time.Millisecond, 999 * time.Millisecond, maxSCTPRTOMax + time.Millisecond, 3000 * time.Second} {
		bound := "RTO.Min"
		if d > maxSCTPRTOMax {
			bound = "RTO.Max"
		}
		_, err := NewServer(Options{Router: testRouter(), SCTPRTOMax: d})
		if err == nil || !strings.Contains(err.Error(), "Options.SCTPRTOMax") || !strings.Contains(err.Error(), bound) {
			t.Errorf("NewServer with SCTPRTOMax %v: %v, want a refusal naming the option", d, err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		c, err := Dial(ctx, "sctp://127.0.0.1:9", ClientOptions{SCTPRTOMax: d, Reconnect: Reconnect{Disabled: true}})
		cancel()
		if err == nil {
			c.Close()
		}
		if err == nil || !strings.Contains(err.Error(), "ClientOptions.SCTPRTOMax") || !strings.Contains(err.Error(), bound) {
			t.Errorf("Dial with SCTPRTOMax %v: %v, want a refusal naming the option", d, err)
		}
	}
	for _, d := range []time.Duration{minSCTPRTOMax, maxSCTPRTOMax} {
		s, err := NewServer(Options{Router: testRouter(), SCTPRTOMax: d})
		if err != nil {
			t.Fatalf("NewServer with SCTPRTOMax %v: %v", d, err)
		}
		if s.opts.SCTPRTOMax != d {
			t.Errorf("SCTPRTOMax %v, want %v", s.opts.SCTPRTOMax, d)
		}
	}
}

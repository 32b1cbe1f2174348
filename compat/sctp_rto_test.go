package compat

import (
	"net"
	"reflect"
	"testing"
	"time"

	"github.com/pion/sctp"
)

// pionRTOMax reads the RTO.Max an association's retransmission timers use.
// pion exposes no getter: the test reads the unexported field, and fails
// (rather than passing unchecked) if a new pion version moved it.
func pionRTOMax(t *testing.T, a *sctp.Association) time.Duration {
	t.Helper()
	v := reflect.ValueOf(a).Elem().FieldByName("rtoMgr")
	if !v.IsValid() || v.Kind() != reflect.Pointer || v.IsNil() {
		t.Fatal("pion's Association has no rtoMgr any more: update pionRTOMax")
	}
	f := v.Elem().FieldByName("rtoMax")
	if !f.IsValid() || f.Kind() != reflect.Float64 {
		t.Fatal("pion's rtoManager has no float64 rtoMax any more: update pionRTOMax")
	}
	return time.Duration(f.Float() * float64(time.Millisecond))
}

// Each end of a native SCTP association runs with the cap it was handed,
// not pion's default 60 s.
func TestSCTPAssociationsGetRTOMax(t *testing.T) {
	ln, err := ListenSCTP("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	limits := Limits{}.withDefaults()
	const serverCap, clientCap = 2 * time.Second, 5 * time.Second
	type result struct {
		a   *sctp.Association
		err error
	}
	served := make(chan result, 1)
	go func() {
		nc, err := ln.Accept()
		if err != nil {
			served <- result{err: err}
			return
		}
		a, err := sctpServer(nc, limits, serverCap)
		served <- result{a, err}
	}()
	ua, _ := net.ResolveUDPAddr("udp", ln.Addr().String())
	nc, err := net.DialUDP("udp", nil, ua)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	client, err := sctpClient(nc, limits, clientCap)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Abort("")
	var server result
	select {
	case server = <-served:
	case <-time.After(handshakeTimeout):
		t.Fatal("no association accepted")
	}
	if server.err != nil {
		t.Fatal(server.err)
	}
	defer server.a.Abort("")
	if got := pionRTOMax(t, client); got != clientCap {
		t.Errorf("client association: RTO max %v, want %v", got, clientCap)
	}
	if got := pionRTOMax(t, server.a); got != serverCap {
		t.Errorf("server association: RTO max %v, want %v", got, serverCap)
	}
}

// The WebRTC carrier's setting engine, a server's and a client's (both
// come from WebRTCOptions.api), hands pion's SCTP transport its cap.
// pion exposes no getter: the test reads the unexported field.
func TestWebRTCSettingEngineGetsRTOMax(t *testing.T) {
	for _, opts := range []WebRTCOptions{{}, {LoopbackOnly: true}} {
		const rtoMax = 4 * time.Second
		api := reflect.ValueOf(opts.api(rtoMax)).Elem()
		se := api.FieldByName("settingEngine")
		if !se.IsValid() || se.Kind() != reflect.Pointer || se.IsNil() {
			t.Fatal("pion's API has no settingEngine any more: update this test")
		}
		f := se.Elem().FieldByName("sctp").FieldByName("rtoMax")
		if !f.IsValid() || f.Type() != reflect.TypeFor[time.Duration]() {
			t.Fatal("pion's SettingEngine has no sctp.rtoMax any more: update this test")
		}
		if got := time.Duration(f.Int()); got != rtoMax {
			t.Errorf("LoopbackOnly %v: SCTP RTO max %v, want %v", opts.LoopbackOnly, got, rtoMax)
		}
	}
}

// defaultSCTPRTOMax is below the default keepalive interval, with room
// for a few resends: a lost packet is sent again well before a silent
// connection is pinged, let alone given up.
func TestSCTPRTOMaxBelowKeepalive(t *testing.T) {
	keepalive := defaultKeepalive(0, Options{}.WithDefaults().IdleTimeout)
	if 4*defaultSCTPRTOMax > keepalive {
		t.Errorf("defaultSCTPRTOMax %v leaves under 4 resends within the default keepalive interval %v", defaultSCTPRTOMax, keepalive)
	}
}

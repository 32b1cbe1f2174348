package main

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"
)

// TestHotpathEchoServers checks that each hotpath server answers the
// message the echo and idle scenarios send it with an answer of the
// length they expect, over loopback.
func TestHotpathEchoServers(t *testing.T) {
	for _, srv := range echoServers {
		if !strings.HasPrefix(srv.Library, "hotpath") {
			continue
		}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		stop, err := srv.Serve(ln)
		if err != nil {
			t.Fatalf("%s: %v", srv.Library, err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		for _, size := range echoSizes {
			msg, answer := srv.message(make([]byte, size))
			c, err := dialAndEcho(ctx, ln.Addr().String(), nil, srv.Handshake, appendClientFrame(nil, 0x2, msg, newMaskKey()), answer)
			if err != nil {
				t.Errorf("%s, %d B: %v", srv.Library, size, err)
				continue
			}
			c.closeNow()
		}
		cancel()
		stop()
	}
}

// TestEchoCallerRows runs a short trial of every echo row that brings its
// own client (compat's Go client, gws's) with several calls in flight.
func TestEchoCallerRows(t *testing.T) {
	for _, ec := range echoCallers {
		inst, err := ec.Open(32, 4, 20*time.Millisecond)(context.Background())
		if err != nil {
			t.Fatalf("%s: %v", ec.Library, err)
		}
		out, err := inst.Trial(context.Background())
		if err != nil || out.Invalid != "" || out.Values["rate"] <= 0 {
			t.Errorf("%s: trial %+v, %v", ec.Library, out, err)
		}
		if err := inst.Close(); err != nil {
			t.Errorf("%s: close: %v", ec.Library, err)
		}
	}
}

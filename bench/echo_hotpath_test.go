package main

import (
	"bytes"
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

// checkCall must refuse what a call row's timed loop, which checks
// lengths only, lets through: an answer of the right length with other
// bytes, and a shorter one; and pass the request's own bytes.
func TestCheckCallCatchesWrongContent(t *testing.T) {
	for _, tc := range []struct {
		name   string
		answer func([]byte) []byte
		ok     bool
	}{
		{"the request", func(req []byte) []byte { return req }, true},
		{"other bytes", func(req []byte) []byte { return bytes.Repeat([]byte{'z'}, len(req)) }, false},
		{"masked", func(req []byte) []byte {
			out := bytes.Clone(req)
			for i := range out {
				out[i] ^= byte(i%4 + 1)
			}
			return out
		}, false},
		{"short", func(req []byte) []byte { return req[1:] }, false},
	} {
		err := checkCall(context.Background(), 32, func(_ context.Context, req []byte) ([]byte, error) {
			return tc.answer(bytes.Clone(req)), nil
		})
		if (err == nil) != tc.ok {
			t.Errorf("%s: checkCall = %v, want ok %v", tc.name, err, tc.ok)
		}
	}
}

// TestRPCRows opens every row of the rpc scenario, which checks one
// answer's bytes first, and runs a short trial with several calls in
// flight.
func TestRPCRows(t *testing.T) {
	for _, fw := range rpcFrameworks {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		call, closeFn, err := fw.Open(context.Background(), ln)
		if err != nil {
			ln.Close()
			t.Fatalf("%s: %v", fw.Library, err)
		}
		out, err := newCallRow(rpcSize, 4, 20*time.Millisecond, call, closeFn).Trial(context.Background())
		if err != nil || out.Invalid != "" || out.Values["rate"] <= 0 {
			t.Errorf("%s: trial %+v, %v", fw.Library, out, err)
		}
		if err := closeFn(); err != nil {
			t.Errorf("%s: close: %v", fw.Library, err)
		}
	}
}

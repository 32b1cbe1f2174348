package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"runtime"
	"time"
)

var (
	echoSizes   = []int{32, 10 << 10}
	echoWindows = []int{1, 64}
)

// maxEchoMsgs bounds one trial by count as well as by time.
const maxEchoMsgs = 5_000_000

func init() {
	register(&Scenario{
		Number:   4,
		Name:     "echo",
		Title:    "Echo over loopback",
		Loopback: true,
		About: "One client connection sends binary messages to each library's echo server over TCP " +
			"on 127.0.0.1 and reads every echo back, with 1 or 64 messages in flight, for a bounded " +
			"time. The same client drives every server: a minimal RFC 6455 client in bench/ that " +
			"sends a frame built once and skips the echoed payload without copying it, so the " +
			"differences are the servers', except in the rows named for their client (compat's Go " +
			"client, gws's client), which measure a whole stack. The floor is a raw TCP echo of the same bytes, with no " +
			"HTTP and no framing. p50/p99 are round-trip times; allocs/msg counts the whole " +
			"process, and the client allocates nothing per message. A row is invalid if an echo " +
			"comes back with the wrong length.",
		Metrics: []Metric{
			{Key: "rate", Unit: "msgs/s", Better: HigherIsBetter},
			{Key: "p50", Unit: "p50 µs", Better: LowerIsBetter},
			{Key: "p99", Unit: "p99 µs", Better: LowerIsBetter},
			{Key: "allocs", Unit: "allocs/msg", Better: LowerIsBetter},
		},
		Cases: echoCases,
	})
}

func echoCases(cfg Config) ([]Case, error) {
	d := 500 * time.Millisecond
	if cfg.Quick {
		d = 100 * time.Millisecond
	}
	var cases []Case
	for _, size := range echoSizes {
		for _, window := range echoWindows {
			c := Case{Label: fmt.Sprintf("%s, %d in flight", sizeLabel(size), window)}
			for _, srv := range echoServers {
				c.Rows = append(c.Rows, Row{
					Library: srv.Library,
					Role:    srv.Role,
					Open:    openEchoRow(srv, size, window, d),
				})
			}
			for _, ec := range echoCallers {
				c.Rows = append(c.Rows, Row{Library: ec.Library, Role: ec.Role, Open: ec.Open(size, window, d)})
			}
			cases = append(cases, c)
		}
	}
	return cases, nil
}

// An echoCaller is a row that brings its own client: an RPC stack whose
// client is part of what is measured (compat's Go client). Its trials
// report the echo scenario's metrics for calls that return their request.
type echoCaller struct {
	Library string
	Role    Role
	Open    func(size, window int, d time.Duration) func(context.Context) (Instance, error)
}

var echoCallers []echoCaller

// echoRow is one server with one client connected to it, kept across the
// trials of a case.
type echoRow struct {
	stop   func()
	client *wsClient
	frame  []byte
	size   int
	window int
	d      time.Duration
	hist   latencyHist
}

func openEchoRow(srv echoServer, size, window int, d time.Duration) func(context.Context) (Instance, error) {
	return func(ctx context.Context) (Instance, error) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		stop, err := srv.Serve(ln)
		if err != nil {
			ln.Close()
			return nil, err
		}
		dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		client, err := dialWS(dctx, ln.Addr().String(), dialOptions{Handshake: srv.Handshake})
		if err != nil {
			stop()
			return nil, err
		}
		payload := make([]byte, size)
		for i := range payload {
			payload[i] = 'a' + byte(i%26)
		}
		msg, answer := srv.message(payload)
		frame := appendClientFrame(nil, 0x2, msg, newMaskKey())
		if srv.Handshake {
			// The timed loop checks lengths only, so check one answer's
			// bytes here: a server that echoed the masked bytes, or
			// anything else of the right length, would pass it.
			if err := checkEcho(client, frame, payload, srv.Request == nil); err != nil {
				client.closeNow()
				stop()
				return nil, err
			}
		}
		return &echoRow{
			stop:   stop,
			client: client,
			frame:  frame,
			size:   answer,
			window: window,
			d:      d,
		}, nil
	}
}

// checkEcho sends frame once and reads the answer: an unmasked binary
// message (RFC 6455 §5.1: "A server MUST NOT mask any frames that it
// sends to the client") that is payload, or, for an RPC answer (exact
// false), a packet that carries it.
func checkEcho(c *wsClient, frame, payload []byte, exact bool) error {
	_ = c.conn.SetDeadline(time.Now().Add(10 * time.Second))
	defer c.conn.SetDeadline(time.Time{})
	if _, err := c.conn.Write(frame); err != nil {
		return err
	}
	op, masked, got, err := c.readMessageData()
	switch {
	case err != nil:
		return fmt.Errorf("reading the first echo: %w", err)
	case masked:
		return errors.New("the server masked its echo")
	case op != 0x2:
		return fmt.Errorf("the echo has opcode %d, want 2 (binary)", op)
	case exact && !bytes.Equal(got, payload):
		return errors.New("the echo differs from the message sent")
	case !exact && !bytes.Contains(got, payload):
		return errors.New("the answer does not carry the payload sent")
	}
	return nil
}

func (e *echoRow) Trial(context.Context) (Outcome, error) {
	e.hist.reset()
	runtime.GC() // the previous row's garbage is not this row's cost
	a0 := readAllocs()
	res, err := e.client.echoLoad(e.frame, e.size, e.window, e.d, maxEchoMsgs, &e.hist)
	a1 := readAllocs()
	if err != nil {
		return Outcome{}, err
	}
	if res.msgs == 0 || res.elapsed <= 0 {
		return Outcome{}, errors.New("no echo came back")
	}
	out := Outcome{Values: map[string]float64{
		"rate":   float64(res.msgs) / res.elapsed.Seconds(),
		"p50":    float64(e.hist.quantile(0.50)) / 1e3,
		"p99":    float64(e.hist.quantile(0.99)) / 1e3,
		"allocs": float64(a1.objects-a0.objects) / float64(res.total),
	}}
	if res.wrong > 0 {
		out.Invalid = fmt.Sprintf("%d of %d echoes had the wrong length", res.wrong, res.total)
	}
	return out, nil
}

func (e *echoRow) Close() error {
	err := e.client.closeNow()
	e.stop()
	return err
}

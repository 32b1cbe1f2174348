package compat

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"testing"
	"time"

	"github.com/hotpath-go/hotpath/compat/wire"
	"github.com/hotpath-go/hotpath/dispatch"
	"github.com/quic-go/quic-go"
)

// rawQUICServer is a native QUIC server written by hand, for what the
// reference server never does: it accepts one connection and its control
// stream, sends its capabilities, then runs serve on its own goroutine,
// and reads the control stream's packets into packets. It returns the
// client options to dial it with and its quic:// URL.
func rawQUICServer(t *testing.T, serve func(qc *quic.Conn)) (url string, opts ClientOptions) {
	t.Helper()
	cert := testCert()
	stls := cert.ServerTLSConfig()
	stls.NextProtos = []string{ALPN}
	ln, err := quic.ListenAddr("127.0.0.1:0", stls, QUICConfig(0))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		qc, err := ln.Accept(context.Background())
		if err != nil {
			return
		}
		defer qc.CloseWithError(0, "")
		str, err := qc.AcceptStream(context.Background())
		if err != nil {
			return
		}
		caps := wire.Append(nil, &wire.Packet{Kind: dispatch.KindCapabilities, Count: 1, Payload: wire.AppendPair(nil, "codec", "json")})
		str.Write(append(binary.AppendUvarint(nil, uint64(len(caps))), caps...))
		go serve(qc)
		br := bufio.NewReader(str)
		for {
			n, err := binary.ReadUvarint(br)
			if err != nil {
				return
			}
			if _, err := io.CopyN(io.Discard, br, int64(n)); err != nil {
				return
			}
		}
	}()
	return "quic://" + ln.Addr().String(), ClientOptions{TLSConfig: cert.ClientTLSConfig(), Reconnect: Reconnect{Disabled: true}}
}

// ClientOptions.CallTimeout bounds OpenStream with a ctx without
// deadline, as it bounds a call: against a server that accepts the
// stream, reads its call and never answers, OpenStream waited for as
// long as the connection lived (a client audit). It fails with
// ErrTimeout, and the stream's call carries no timeout, so that a long
// transfer is not cut at CallTimeout by the server.
func TestCallTimeoutBoundsOpenStream(t *testing.T) {
	calls := make(chan *wire.Packet, 1)
	url, opts := rawQUICServer(t, func(qc *quic.Conn) {
		for {
			st, err := qc.AcceptStream(context.Background())
			if err != nil {
				return
			}
			pkt, err := readStreamPacket(st, 1<<20)
			if err != nil {
				return
			}
			if p, err := wire.Decode(pkt); err == nil {
				p.Name = append([]byte(nil), p.Name...)
				calls <- &p
			}
			// Never answers; the stream stays open.
		}
	})
	const timeout = 100 * time.Millisecond
	opts.CallTimeout = timeout
	c, err := Dial(context.Background(), url, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	done := make(chan error, 1)
	go func() {
		s, err := c.OpenStream(context.Background(), "file/get", nil)
		if s != nil {
			s.Close()
		}
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, ErrTimeout) || !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("OpenStream unanswered past CallTimeout: %v, want ErrTimeout", err)
		}
	case <-time.After(hangBound):
		t.Fatalf("OpenStream unanswered still waits, CallTimeout %v", timeout)
	}
	select {
	case p := <-calls:
		if p.Timeout != 0 {
			t.Errorf("the stream's call carries a timeout of %d ms; CallTimeout must bound only the opening", p.Timeout)
		}
	case <-time.After(hangBound):
		t.Fatal("the server read no call")
	}
}

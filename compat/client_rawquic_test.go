package compat

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/hotpath-go/hotpath/compat/wire"
	"github.com/hotpath-go/hotpath/dispatch"
	"github.com/hotpath-go/hotpath/wsframe"
	"github.com/quic-go/quic-go"
	"github.com/quic-go/webtransport-go"
)

// rawQUICServer is a native QUIC server written by hand, for what the
// reference server never does: it accepts one connection and its control
// stream, sends its capabilities, then runs serve on its own goroutine,
// and reads the control stream's packets into packets. It returns the
// client options to dial it with and its quic:// URL.
func rawQUICServer(t *testing.T, serve func(qc *quic.Conn)) (url string, opts ClientOptions) {
	t.Helper()
	return rawQUICServerControl(t, func(qc *quic.Conn, _ *quic.Stream) { serve(qc) })
}

// rawQUICServerControl is rawQUICServer whose serve may write on the
// control stream too.
func rawQUICServerControl(t *testing.T, serve func(qc *quic.Conn, control *quic.Stream)) (url string, opts ClientOptions) {
	t.Helper()
	return rawQUICServerCaps(t, capsOf("codec", "json"), serve)
}

// rawQUICServerCaps is rawQUICServerControl sending caps as its
// capabilities.
func rawQUICServerCaps(t *testing.T, caps []byte, serve func(qc *quic.Conn, control *quic.Stream)) (url string, opts ClientOptions) {
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
		str.Write(append(binary.AppendUvarint(nil, uint64(len(caps))), caps...))
		go serve(qc, str)
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

// A close reason that a carrier brings from the server reaches the user
// as a WebSocket close frame's would: valid UTF-8 of at most 123 bytes
// (RFC 6455 §5.5), cut at a character. QUIC and WebTransport closes carry
// about 1 KiB of any bytes, and an SCTP ABORT's reason about as much; the
// client passed them on unchecked in the *CloseError that calls fail with
// (a client audit).
func TestCarrierCloseReasonsAreBounded(t *testing.T) {
	long := strings.Repeat("é", 400) + "\xff\xfe" // 802 bytes, invalid at the end
	e := newCarrierEnv(t, Options{})
	for _, tc := range []struct {
		carrier Carrier
		code    wsframe.CloseCode // 0: any
		close   func(pktTransport)
	}{
		{CarrierQUIC, wsframe.ClosePolicyViolation, func(tr pktTransport) {
			tr.(*quicTransport).conn.CloseWithError(quic.ApplicationErrorCode(wsframe.ClosePolicyViolation), long)
		}},
		{CarrierQUIC, wsframe.ClosePolicyViolation, func(tr pktTransport) {
			tr.(*quicTransport).conn.CloseWithError(quic.ApplicationErrorCode(wsframe.ClosePolicyViolation), "\xff"+long[:200])
		}},
		{CarrierWebTransport, wsframe.ClosePolicyViolation, func(tr pktTransport) {
			tr.(*wtTransport).sess.CloseWithError(webtransport.SessionErrorCode(wsframe.ClosePolicyViolation), long)
		}},
		{CarrierSCTP, wsframe.CloseAbnormal, func(tr pktTransport) { tr.(*sctpTransport).assoc.Abort(long) }},
		{carrierSCTPDTLS, wsframe.CloseAbnormal, func(tr pktTransport) { tr.(*sctpTransport).assoc.Abort(long) }},
	} {
		t.Run(carrierName(tc.carrier), func(t *testing.T) {
			waitFor(t, func() bool { return e.srv.Peers() == 0 })
			c := e.dial(t, tc.carrier, ClientOptions{Reconnect: Reconnect{Disabled: true}, Logger: slog.New(slog.DiscardHandler)})
			peers := e.srv.snapshotPeers()
			if len(peers) != 1 {
				t.Fatalf("%d peers", len(peers))
			}
			tc.close(peers[0].link.(*pktConn).t)
			var err error
			select {
			case <-c.done:
				err = c.Call(context.Background(), "echo/say", echoReq{Text: "x"}, nil)
			case <-time.After(hangBound):
				t.Fatal("the client did not see the close")
			}
			var ce *CloseError
			if !errors.Is(err, ErrDisconnected) || !errors.As(err, &ce) {
				t.Fatalf("call after the close: %v, want ErrDisconnected with a *CloseError", err)
			}
			if ce.Code != tc.code {
				t.Errorf("close code %d, want %d", ce.Code, tc.code)
			}
			if len(ce.Reason) > wsframe.MaxCloseReason || !utf8.ValidString(ce.Reason) {
				t.Errorf("reason of %d bytes (valid UTF-8: %v), want valid UTF-8 of at most %d: %q", len(ce.Reason), utf8.ValidString(ce.Reason), wsframe.MaxCloseReason, ce.Reason)
			}
			if !utf8.ValidString(err.Error()) || len(err.Error()) > 512 {
				t.Errorf("error text of %d bytes (valid UTF-8: %v): %q", len(err.Error()), utf8.ValidString(err.Error()), err.Error())
			}
		})
	}
}

// A stream reset's code is the protocol's 32-bit error code (PROTOCOL.md
// §8.5); QUIC's have 62 bits. One over 32 bits was cut to them: 2^32+7,
// which no hotpath end sends, read as 7, Overloaded, and a program
// retried a stream that had failed for another reason. It is now left as
// the carrier's error.
func TestStreamResetCodeOver32Bits(t *testing.T) {
	url, opts := rawQUICServer(t, func(qc *quic.Conn) {
		for {
			st, err := qc.AcceptStream(context.Background())
			if err != nil {
				return
			}
			if _, err := readStreamPacket(st, 1<<20); err != nil {
				return
			}
			st.CancelWrite(1<<32 + quic.StreamErrorCode(ErrOverloaded.Code))
			st.CancelRead(0)
		}
	})
	c, err := Dial(context.Background(), url, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), hangBound)
	defer cancel()
	s, err := c.OpenStream(ctx, "file/get", nil)
	if s != nil {
		s.Close()
	}
	var e *Error
	if err == nil || errors.As(err, &e) {
		t.Errorf("a stream reset with code 2^32+7: %v, want the carrier's error, not a protocol *Error", err)
	}
}

// A server's answer on a binary stream that breaks the protocol closes
// the whole connection, with the code such a packet on the control stream
// gets (PROTOCOL.md §8.5), as the server closes a client's for a bad
// first packet on a stream; OpenStream fails with ErrDisconnected joined
// with that close. OpenStream failed with a bare 1008 and left the
// connection open, or with a bad prefix or an answer over the limit
// wrapped as "open stream", and the connection open.
func TestOpenStreamBadAnswerClosesTheConnection(t *testing.T) {
	for _, tc := range []struct {
		name   string
		answer []byte // written on the stream as it is
		code   wsframe.CloseCode
		reason string
	}{
		{"a malformed result", framed([]byte{byte(dispatch.KindResult)}), wsframe.ClosePolicyViolation, errMalformed.Reason},
		{"a call", framed(wire.AppendCall(nil, dispatch.KindCall, 1, "x", 0, nil)), wsframe.ClosePolicyViolation, errMalformed.Reason},
		{"a compressed result", framed([]byte{byte(dispatch.KindResult) | wire.CompressedBit, 1}), wsframe.ClosePolicyViolation, errMalformed.Reason},
		{"a bad length prefix", []byte{0x80, 0x80, 0x80, 0x80, 0x80, 0x01}, wsframe.CloseProtocolError, errBadPrefix.Reason},
		{"a length over the limit", binary.AppendUvarint(nil, 2<<20), wsframe.CloseMessageTooBig, errMessageTooBig.Reason},
	} {
		t.Run(strings.ReplaceAll(tc.name, " ", "_"), func(t *testing.T) {
			closed := make(chan error, 1)
			url, opts := rawQUICServer(t, func(qc *quic.Conn) {
				st, err := qc.AcceptStream(context.Background())
				if err != nil {
					closed <- err
					return
				}
				if _, err := readStreamPacket(st, 1<<20); err == nil {
					st.Write(tc.answer)
				}
				select {
				case <-qc.Context().Done():
					closed <- context.Cause(qc.Context())
				case <-time.After(hangBound):
					closed <- errors.New("the client kept the connection open")
				}
			})
			opts.Limits.MaxMessageSize = 1 << 20
			c, err := Dial(context.Background(), url, opts)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			ctx, cancel := context.WithTimeout(context.Background(), hangBound)
			defer cancel()
			s, err := c.OpenStream(ctx, "file/get", nil)
			if s != nil {
				s.Close()
			}
			if !errors.Is(err, ErrDisconnected) || CloseStatus(err) != tc.code || !strings.Contains(err.Error(), tc.reason) {
				t.Errorf("OpenStream answered with %s: %v, want ErrDisconnected with close %d %s", tc.name, err, tc.code, tc.reason)
			}
			var ae *quic.ApplicationError
			if err := <-closed; !errors.As(err, &ae) || !ae.Remote || wsframe.CloseCode(ae.ErrorCode) != tc.code || ae.ErrorMessage != tc.reason {
				t.Errorf("the server's connection ended with %v, want the client's close %d %s", err, tc.code, tc.reason)
			}
		})
	}
}

// Emit, Event and EmitUnreliable on a connection whose closing handshake
// has begun fail with ErrDisconnected joined with why it is closing, as a
// call does, before the read loop has ended and recorded it: they
// returned a bare ErrDisconnected (CloseStatus 0) for as long as the
// handshake took, up to closeTimeout. Here this end began it (given up
// for silence: 1001 HP_IDLE_TIMEOUT, the server answering nothing), and
// on QUIC the server did (its close notice, the carrier left open: the
// client waits for the server to close it).
func TestEmitWhileClosingSaysWhy(t *testing.T) {
	sends := map[string]func(c *Client) error{
		"Emit":           func(c *Client) error { return c.Emit("r", "e", 1, false) },
		"Event":          func(c *Client) error { return c.Event("e", 1) },
		"EmitUnreliable": func(c *Client) error { return c.EmitUnreliable("r", "e", 1, false) },
	}
	check := func(t *testing.T, c *Client, code wsframe.CloseCode, reason string) {
		t.Helper()
		cc, err := c.current()
		if err != nil {
			t.Fatal(err)
		}
		waitFor(t, func() bool { return cc.link.closeCause() != nil })
		for name, send := range sends {
			err := send(c)
			if !errors.Is(err, ErrDisconnected) || CloseStatus(err) != code || !strings.Contains(err.Error(), reason) {
				t.Errorf("%s while the connection closes: %v, want ErrDisconnected with close %d %s", name, err, code, reason)
			}
		}
		select {
		case <-cc.ended:
			t.Log("the closing handshake ended before the sends: the test proved nothing")
		default:
		}
	}
	t.Run("idle", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		go func() {
			nc, err := acceptRaw(ln, "json")
			if err != nil {
				return
			}
			defer nc.Close()
			nc.SetReadDeadline(time.Now().Add(hangBound))
			io.Copy(io.Discard, nc) // answers nothing, not even the close
		}()
		c := dialClient(t, ln.Addr().String(), ClientOptions{Reconnect: Reconnect{Disabled: true},
			KeepaliveInterval: 50 * time.Millisecond, IdleTimeout: 300 * time.Millisecond})
		check(t, c, wsframe.CloseGoingAway, idleTimeoutReason)
	})
	t.Run("server close on QUIC", func(t *testing.T) {
		url, opts := rawQUICServerControl(t, func(qc *quic.Conn, control *quic.Stream) {
			control.Write(framed(appendCloseNotice(nil, wsframe.CloseTryAgainLater, "HP_TEST_BYE")))
			// The carrier is left open: the client waits for it to close.
			select {
			case <-qc.Context().Done():
			case <-time.After(hangBound):
			}
		})
		opts.Logger = slog.New(slog.DiscardHandler)
		ctx, cancel := context.WithTimeout(context.Background(), hangBound)
		defer cancel()
		c, err := Dial(ctx, url, opts)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		check(t, c, wsframe.CloseTryAgainLater, "HP_TEST_BYE")
	})
}

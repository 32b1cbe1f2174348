package compat

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/hotpath-go/hotpath/compat/wire"
	"github.com/hotpath-go/hotpath/dispatch"
	"github.com/hotpath-go/hotpath/wsframe"
	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"
	"github.com/quic-go/webtransport-go"
)

// rawWebTransportServer is a WebTransport server written by hand, for
// what the reference server never does: it upgrades each CONNECT to a
// session, accepts its control stream, sends its capabilities, and runs
// serve with the session, its QUIC connection and its control stream on
// a goroutine of its own. It returns the https URL and the client
// options to dial it with (no reconnecting).
func rawWebTransportServer(t *testing.T, serve func(sess *webtransport.Session, qc *quic.Conn, control *webtransport.Stream)) (url string, opts ClientOptions) {
	t.Helper()
	cert := testCert()
	tlsConf := cert.ServerTLSConfig()
	tlsConf.NextProtos = []string{http3.NextProtoH3}
	ln, err := quic.ListenAddrEarly("127.0.0.1:0", tlsConf, QUICConfig(0))
	if err != nil {
		t.Fatal(err)
	}
	type connKey struct{}
	wt := &webtransport.Server{CheckOrigin: func(*http.Request) bool { return true }}
	wt.H3 = &http3.Server{
		ConnContext: func(ctx context.Context, qc *quic.Conn) context.Context { return context.WithValue(ctx, connKey{}, qc) },
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			qc, _ := r.Context().Value(connKey{}).(*quic.Conn)
			sess, err := wt.Upgrade(w, r)
			if err != nil {
				return
			}
			go func() {
				ctx, cancel := context.WithTimeout(sess.Context(), hangBound)
				defer cancel()
				str, err := sess.AcceptStream(ctx)
				if err != nil {
					return
				}
				if _, err := str.Write(framed(capsOf("codec", "json"))); err != nil {
					return
				}
				serve(sess, qc, str)
			}()
		}),
	}
	go func() {
		for {
			qc, err := ln.Accept(context.Background())
			if err != nil {
				return
			}
			go wt.ServeQUICConn(qc)
		}
	}()
	t.Cleanup(func() {
		wt.Close()
		ln.Close()
	})
	return "https://" + ln.Addr().String() + "/wt", ClientOptions{TLSConfig: cert.ClientTLSConfig(), Reconnect: Reconnect{Disabled: true}}
}

// wtCloseSeen returns the code and reason with which the other end
// closed sess, from its CLOSE_WEBTRANSPORT_SESSION or else from the
// close of qc, the QUIC connection under it, once sess has ended (or
// hangBound has passed): code 0 when neither carried one.
func wtCloseSeen(sess *webtransport.Session, qc *quic.Conn) (wsframe.CloseCode, string) {
	select {
	case <-sess.Context().Done():
	case <-time.After(hangBound):
		return 0, "the session did not end"
	}
	if se, ok := errors.AsType[*webtransport.SessionError](context.Cause(sess.Context())); ok && se.Remote {
		return wsframe.CloseCode(se.ErrorCode), se.Message
	}
	select {
	case <-qc.Context().Done():
	case <-time.After(closeTimeout):
		return 0, "the session ended without a close code, and its connection is open"
	}
	if ae, ok := errors.AsType[*quic.ApplicationError](context.Cause(qc.Context())); ok && ae.Remote {
		return wsframe.CloseCode(ae.ErrorCode), ae.ErrorMessage
	}
	return 0, context.Cause(qc.Context()).Error()
}

// The Go client that finds the server breaking the protocol on
// WebTransport closes at once, as on QUIC (PROTOCOL.md §8.3): its close
// notice, then the session's close and its own QUIC connection's, both
// carrying the code, so the server learns it without answering the
// notice. It waited for the answer first, as on SCTP, and a server that
// never gave one held the client's calls for closeTimeout: here the
// server answers a call with a malformed Result and then reads on,
// discarding the notice. The call fails with the client's close, 1008,
// within half of closeTimeout (a wait for the answer takes all of it),
// and the server's session ends with that code.
func TestWebTransportClientViolationClosesAtOnce(t *testing.T) {
	type seen struct {
		code   wsframe.CloseCode
		reason string
	}
	closed := make(chan seen, 1)
	url, opts := rawWebTransportServer(t, func(sess *webtransport.Session, qc *quic.Conn, control *webtransport.Stream) {
		answered := false
		for {
			pkt, err := readStreamPacket(control, 1<<20)
			if err != nil {
				break
			}
			p, err := wire.Decode(pkt)
			if err != nil || answered || p.Kind != dispatch.KindCall {
				continue // the client's close notice among them: never answered
			}
			answered = true
			control.Write(framed([]byte{byte(dispatch.KindResult)})) // no id: malformed
		}
		code, reason := wtCloseSeen(sess, qc)
		closed <- seen{code, reason}
	})
	ctx, cancel := context.WithTimeout(context.Background(), hangBound)
	defer cancel()
	c, err := Dial(ctx, url, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	called := make(chan error, 1)
	start := time.Now()
	go func() { called <- c.Call(ctx, "echo/say", echoReq{Text: "x"}, nil) }()
	select {
	case err = <-called:
		t.Logf("the call failed after %v", time.Since(start))
	case <-time.After(closeTimeout / 2):
		t.Errorf("the call still waiting after %v for a server that does not answer the client's close: the client waits for the answer", closeTimeout/2)
		err = <-called
	}
	if !errors.Is(err, ErrDisconnected) || CloseStatus(err) != wsframe.ClosePolicyViolation || !strings.Contains(err.Error(), errMalformed.Reason) {
		t.Errorf("the call answered with a malformed Result: %v, want ErrDisconnected with the client's close 1008 %s", err, errMalformed.Reason)
	}
	got := <-closed
	if got.code != wsframe.ClosePolicyViolation || got.reason != errMalformed.Reason {
		t.Errorf("the server's session ended with %d %q, want the client's close 1008 %s", got.code, got.reason, errMalformed.Reason)
	}
}

package compat

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/hotpath-go/hotpath/wsframe"
)

// An SCTP association that ends under the server's write, with no close
// notice before or after, ends the connection with 1006, as every other
// carrier's end without a close does: OnDisconnect's error is a
// *CloseError 1006 that names why, and Metrics counts it under 1006.
// The server's read loop answered a call (a synchronous handler, held
// until the association was gone), the answer's write failed, and the
// connection ended with that write's error, pion's own ("sending payload
// data in non-established state"), which is no *CloseError: the ABORT's
// 1006 that the next read brought was set aside for it.
func TestSCTPFailedWriteWithoutNoticeIs1006(t *testing.T) {
	for _, tc := range []struct {
		name    string
		carrier Carrier
		vanish  func(tr *sctpTransport)
		reason  string // the start of the 1006's reason
	}{
		// The peer's association aborted (its process ended, its SCTP
		// stack gave up): an ABORT, whose causes the reason carries.
		{"sctp-abort", CarrierSCTP, func(tr *sctpTransport) { tr.assoc.Abort("gone") }, "SCTP ABORT: "},
		{"sctp+dtls-abort", carrierSCTPDTLS, func(tr *sctpTransport) { tr.assoc.Abort("gone") }, "SCTP ABORT: "},
		// The peer's DTLS connection closed under its association (a
		// close_notify, no SCTP shutdown nor ABORT).
		{"sctp+dtls-closed", carrierSCTPDTLS, func(tr *sctpTransport) { tr.nc.Close() }, "SCTP write failed without a close notice: "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			entered, release := make(chan struct{}, 1), make(chan struct{})
			r := testRouter()
			Handle(r, "test/hold", func(ctx context.Context, req echoReq) (echoReq, error) {
				entered <- struct{}{}
				select {
				case <-release:
				case <-time.After(hangBound):
				}
				return req, nil
			})
			peers := make(chan *Peer, 1)
			ended := make(chan error, 1)
			e := newCarrierEnv(t, Options{
				Router:       r,
				OnConnect:    func(p *Peer) { peers <- p },
				OnDisconnect: func(_ *Peer, err error) { ended <- err },
			})
			c := e.dial(t, tc.carrier, ClientOptions{Reconnect: Reconnect{Disabled: true}})
			var p *Peer
			select {
			case p = <-peers:
			case <-time.After(hangBound):
				t.Fatal("no peer")
			}
			cc, err := c.current()
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), hangBound)
			defer cancel()
			go c.Call(ctx, "test/hold", echoReq{Text: "x"}, nil)
			select {
			case <-entered:
			case <-time.After(hangBound):
				t.Fatal("the handler was not called")
			}
			// The server's read loop is in the handler's turn: the peer
			// vanishes, and the server's association ends under it.
			tc.vanish(cc.link.(*pktConn).t.(*sctpTransport))
			select {
			case <-p.link.(*pktConn).t.(*sctpTransport).gone:
			case <-time.After(hangBound):
				t.Fatal("the server's association did not end")
			}
			close(release) // the answer's write fails
			select {
			case err = <-ended:
			case <-time.After(hangBound):
				t.Fatal("the server did not end the connection")
			}
			var ce *CloseError
			if !errors.As(err, &ce) || ce.Code != wsframe.CloseAbnormal {
				t.Fatalf("OnDisconnect's error: %v (%T), want a *CloseError 1006", err, err)
			}
			if ce.Reason == "" || !strings.HasPrefix(ce.Reason, tc.reason) {
				t.Errorf("1006's reason %q, want one that says why, starting %q", ce.Reason, tc.reason)
			}
			if n := e.srv.Metrics().Closes[wsframe.CloseAbnormal]; n != 1 {
				t.Errorf("Metrics counts %d closes under 1006, want 1 (closes: %v)", n, e.srv.Metrics().Closes)
			}
		})
	}
}

// The same on the Go client: an association the server aborted while the
// client's read loop was in a listener, which queued an emit, ended the
// connection with the emit's write error, the ABORT's causes set aside;
// the client's end was 1006 already (abnormalEnd), but its reason was
// pion's "sending payload data in non-established state", not why the
// association ended.
func TestSCTPClientFailedWriteKeepsTheAbort(t *testing.T) {
	for _, carrier := range []Carrier{CarrierSCTP, carrierSCTPDTLS} {
		t.Run(carrierName(carrier), func(t *testing.T) {
			peers := make(chan *Peer, 1)
			e := newCarrierEnv(t, Options{OnConnect: func(p *Peer) { peers <- p }})
			c := e.dial(t, carrier, ClientOptions{Reconnect: Reconnect{Disabled: true}})
			var p *Peer
			select {
			case p = <-peers:
			case <-time.After(hangBound):
				t.Fatal("no peer")
			}
			cc, err := c.current()
			if err != nil {
				t.Fatal(err)
			}
			entered, release := make(chan struct{}, 1), make(chan struct{})
			c.On("ev", func(Message) {
				entered <- struct{}{}
				select {
				case <-release:
				case <-time.After(hangBound):
				}
				c.Emit("r", "x", 1, false) // queued in the turn: its write fails
			})
			if err := p.Event("ev", 1); err != nil {
				t.Fatal(err)
			}
			select {
			case <-entered:
			case <-time.After(hangBound):
				t.Fatal("the listener was not called")
			}
			p.link.(*pktConn).t.(*sctpTransport).assoc.Abort("gone")
			select {
			case <-cc.link.(*pktConn).t.(*sctpTransport).gone:
			case <-time.After(hangBound):
				t.Fatal("the client's association did not end")
			}
			close(release)
			select {
			case <-c.done:
			case <-time.After(hangBound):
				t.Fatal("the client did not end the connection")
			}
			_, err = c.current()
			var ce *CloseError
			if !errors.Is(err, ErrDisconnected) || !errors.As(err, &ce) || ce.Code != wsframe.CloseAbnormal {
				t.Fatalf("the client's end: %v, want ErrDisconnected with a *CloseError 1006", err)
			}
			if !strings.HasPrefix(ce.Reason, "SCTP ABORT: ") || !strings.Contains(ce.Reason, "gone") {
				t.Errorf("1006's reason %q, want the server's ABORT (SCTP ABORT: ... gone)", ce.Reason)
			}
		})
	}
}

package compat

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hotpath-go/hotpath/compat/wire"
	"github.com/hotpath-go/hotpath/dispatch"
	"github.com/hotpath-go/hotpath/wsframe"
	"github.com/pion/datachannel"
	"github.com/pion/sctp"
	"github.com/pion/webrtc/v4"
	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"
	"github.com/quic-go/webtransport-go"
)

// The benchmarks of this file put compat's call path next to a raw echo
// over the same stack with no RPC layer: the carrier library alone, with
// the least framing a message needs (a WebSocket frame, a length prefix on
// a stream, one data channel message). The ratio raw ns/op ÷ compat ns/op
// says how much of the stack's ceiling compat reaches.

var benchCarriers = []Carrier{CarrierWebSocket, CarrierQUIC, CarrierWebTransport, CarrierSCTP, CarrierWebRTC}

// rawEcho is a message echo over one carrier, without compat.
type rawEcho interface {
	send(msg []byte) error
	recv() error
	close()
}

// --- WebSocket: compat's Echo mode (no packet parsing) and a client of
// wsframe frames on a buffered TCP connection.

type wsEcho struct {
	nc  net.Conn
	br  *bufio.Reader
	out []byte
	in  []byte
}

func dialWSEcho(b *testing.B) rawEcho {
	s, err := NewServer(Options{Router: NewRouter(), Echo: true, NoDictionary: true, Compression: Compression{Disabled: true}})
	if err != nil {
		b.Fatal(err)
	}
	addr := startServer(b, s, false)
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		b.Fatal(err)
	}
	req := "GET /ws HTTP/1.1\r\nHost: " + addr + "\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n" +
		"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
	if _, err := io.WriteString(nc, req); err != nil {
		b.Fatal(err)
	}
	br := bufio.NewReaderSize(nc, 64<<10)
	rsp, err := http.ReadResponse(br, nil)
	if err != nil || rsp.StatusCode != http.StatusSwitchingProtocols {
		b.Fatalf("upgrade: %v %v", rsp, err)
	}
	return &wsEcho{nc: nc, br: br}
}

func (e *wsEcho) send(msg []byte) error {
	e.out = wsframe.AppendMaskedFrame(e.out[:0], wsframe.OpBinary, msg, wsframe.Fin, wsframe.NewMaskKey())
	_, err := e.nc.Write(e.out)
	return err
}

func (e *wsEcho) recv() error {
	head, err := e.br.Peek(2)
	if err != nil {
		return err
	}
	n := wsframe.HeaderSize(0, false)
	switch head[1] & 0x7f {
	case 126:
		n += 2
	case 127:
		n += 8
	}
	if head, err = e.br.Peek(n); err != nil {
		return err
	}
	h, _, err := wsframe.ParseHeader(head)
	if err != nil {
		return err
	}
	e.br.Discard(n)
	e.in = slices.Grow(e.in[:0], int(h.Length))[:h.Length]
	_, err = io.ReadFull(e.br, e.in)
	return err
}

func (e *wsEcho) close() { e.nc.Close() }

// --- Streams (QUIC, WebTransport, SCTP): length-prefixed messages, echoed
// byte for byte by a server that copies the stream back.

type streamEcho struct {
	w   io.Writer
	br  *bufio.Reader
	c   io.Closer
	out []byte
	in  []byte
}

func newStreamEcho(rw io.ReadWriter, c io.Closer) *streamEcho {
	return &streamEcho{w: rw, br: bufio.NewReaderSize(rw, 64<<10), c: c}
}

func (e *streamEcho) send(msg []byte) error {
	e.out = append(binary.AppendUvarint(e.out[:0], uint64(len(msg))), msg...)
	_, err := e.w.Write(e.out)
	return err
}

func (e *streamEcho) recv() error {
	n, err := binary.ReadUvarint(e.br)
	if err != nil {
		return err
	}
	e.in = slices.Grow(e.in[:0], int(n))[:n]
	_, err = io.ReadFull(e.br, e.in)
	return err
}

func (e *streamEcho) close() { e.c.Close() }

func benchTLS(b *testing.B, proto string) (server, client *tls.Config) {
	cert := testCert()
	server = cert.ServerTLSConfig()
	server.NextProtos = []string{proto}
	client = cert.ClientTLSConfig()
	client.NextProtos = []string{proto}
	return server, client
}

func dialQUICEcho(b *testing.B) rawEcho {
	return dialRawQUIC(b, func(str *quic.Stream) { io.Copy(str, str) })
}

// dialRawQUIC starts a raw QUIC server whose connections' first stream
// serve answers, and returns a connection to it on one stream.
func dialRawQUIC(b *testing.B, serve func(*quic.Stream)) *streamEcho {
	stls, ctls := benchTLS(b, "raw-echo")
	ln, err := quic.ListenAddr("127.0.0.1:0", stls, QUICConfig(0))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { ln.Close() })
	go func() {
		for {
			qc, err := ln.Accept(context.Background())
			if err != nil {
				return
			}
			go func() {
				str, err := qc.AcceptStream(context.Background())
				if err == nil {
					serve(str)
				}
			}()
		}
	}()
	qc, err := quic.DialAddr(context.Background(), ln.Addr().String(), ctls, QUICConfig(0))
	if err != nil {
		b.Fatal(err)
	}
	str, err := qc.OpenStreamSync(context.Background())
	if err != nil {
		b.Fatal(err)
	}
	return newStreamEcho(str, closerFunc(func() error { return qc.CloseWithError(0, "") }))
}

type closerFunc func() error

func (f closerFunc) Close() error { return f() }

func dialWebTransportEcho(b *testing.B) rawEcho {
	stls, ctls := benchTLS(b, http3.NextProtoH3)
	ln, err := quic.ListenAddr("127.0.0.1:0", stls, QUICConfig(0))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { ln.Close() })
	wts := &webtransport.Server{CheckOrigin: func(*http.Request) bool { return true }}
	wts.H3 = &http3.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sess, err := wts.Upgrade(w, r)
		if err != nil {
			return
		}
		go func() {
			str, err := sess.AcceptStream(context.Background())
			if err == nil {
				io.Copy(str, str)
			}
		}()
	})}
	b.Cleanup(func() { wts.Close() })
	go func() {
		for {
			qc, err := ln.Accept(context.Background())
			if err != nil {
				return
			}
			go wts.ServeQUICConn(qc)
		}
	}()
	d := &webtransport.Transport{TLSClientConfig: ctls, QUICConfig: QUICConfig(0)}
	_, sess, err := d.Dial(context.Background(), "https://"+ln.Addr().String()+"/echo", nil)
	if err != nil {
		b.Fatal(err)
	}
	str, err := sess.OpenStreamSync(context.Background())
	if err != nil {
		b.Fatal(err)
	}
	return newStreamEcho(str, closerFunc(func() error { d.Close(); return sess.CloseWithError(0, "") }))
}

func dialSCTPEcho(b *testing.B) rawEcho {
	ln, err := ListenSCTP("127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { ln.Close() })
	limits := Limits{MaxMessageSize: 32 << 20}.withDefaults()
	go func() {
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				a, err := sctpServer(nc, limits, defaultSCTPRTOMax)
				if err != nil {
					return
				}
				defer a.Close()
				st, err := a.AcceptStream()
				if err != nil {
					return
				}
				buf := make([]byte, maxChannelMessage)
				for {
					n, err := st.Read(buf)
					if err != nil {
						return
					}
					if _, err := st.Write(buf[:n]); err != nil {
						return
					}
				}
			}()
		}
	}()
	ua, _ := net.ResolveUDPAddr("udp", ln.Addr().String())
	nc, err := net.DialUDP("udp", nil, ua)
	if err != nil {
		b.Fatal(err)
	}
	a, err := sctpClient(nc, limits, defaultSCTPRTOMax)
	if err != nil {
		b.Fatal(err)
	}
	st, err := a.OpenStream(0, sctp.PayloadTypeWebRTCBinary)
	if err != nil {
		b.Fatal(err)
	}
	return newStreamEcho(&sctpStream{Stream: st}, closerFunc(func() error { a.Close(); return nc.Close() }))
}

// --- WebRTC: two pion peer connections on loopback, one message per
// packet, the answering one echoing.

type dcEcho struct {
	raw datachannel.ReadWriteCloser
	pcs []*webrtc.PeerConnection
	buf []byte
}

func (e *dcEcho) send(msg []byte) error { _, err := e.raw.Write(msg); return err }
func (e *dcEcho) recv() error {
	_, err := e.raw.Read(e.buf)
	return err
}
func (e *dcEcho) close() {
	for _, pc := range e.pcs {
		pc.Close()
	}
}

func dialWebRTCEcho(b *testing.B) rawEcho {
	api := WebRTCOptions{LoopbackOnly: true}.api(defaultSCTPRTOMax)
	client, err := api.NewPeerConnection(webrtc.Configuration{})
	if err != nil {
		b.Fatal(err)
	}
	server, err := api.NewPeerConnection(webrtc.Configuration{})
	if err != nil {
		b.Fatal(err)
	}
	server.OnDataChannel(func(dc *webrtc.DataChannel) {
		dc.OnOpen(func() {
			raw, err := dc.Detach()
			if err != nil {
				return
			}
			go func() {
				buf := make([]byte, maxChannelMessage)
				for {
					n, err := raw.Read(buf)
					if err != nil {
						return
					}
					if _, err := raw.Write(buf[:n]); err != nil {
						return
					}
				}
			}()
		})
	})
	dc, err := client.CreateDataChannel("echo", nil)
	if err != nil {
		b.Fatal(err)
	}
	opened := make(chan datachannel.ReadWriteCloser, 1)
	dc.OnOpen(func() {
		raw, _ := dc.Detach()
		opened <- raw
	})
	offer, _ := client.CreateOffer(nil)
	gathered := webrtc.GatheringCompletePromise(client)
	client.SetLocalDescription(offer)
	<-gathered
	answer, err := answerOffer(context.Background(), server, *client.LocalDescription())
	if err != nil {
		b.Fatal(err)
	}
	if err := client.SetRemoteDescription(*answer); err != nil {
		b.Fatal(err)
	}
	select {
	case raw := <-opened:
		return &dcEcho{raw: raw, pcs: []*webrtc.PeerConnection{client, server}, buf: make([]byte, maxChannelMessage)}
	case <-time.After(10 * time.Second):
		b.Fatal("data channel did not open")
	}
	return nil
}

func dialRawEcho(b *testing.B, c Carrier) rawEcho {
	b.Helper()
	var e rawEcho
	switch c {
	case CarrierWebSocket:
		e = dialWSEcho(b)
	case CarrierQUIC:
		e = dialQUICEcho(b)
	case CarrierWebTransport:
		e = dialWebTransportEcho(b)
	case CarrierSCTP:
		e = dialSCTPEcho(b)
	case CarrierWebRTC:
		e = dialWebRTCEcho(b)
	}
	b.Cleanup(e.close)
	return e
}

// benchEnv is one server on every carrier for the benchmarks of a run,
// with a message limit for the transfer benchmarks.
var benchEnv struct {
	once sync.Once
	e    *carrierEnv
}

func sharedCarrierEnv(b *testing.B) *carrierEnv {
	benchEnv.once.Do(func() {
		// The server outlives the benchmark that made it: it serves every
		// benchmark of the run, and the process ends with it.
		benchEnv.e = newCarrierEnv(&noCleanup{B: b}, Options{
			Router: streamRouter(),
			Limits: Limits{MaxMessageSize: 32 << 20, MaxOutboxBytes: 64 << 20},
		})
	})
	return benchEnv.e
}

// noCleanup runs a helper's setup under b without its cleanups.
type noCleanup struct{ *testing.B }

func (noCleanup) Cleanup(func()) {}

func dialBench(b *testing.B, c Carrier) *Client {
	e := sharedCarrierEnv(b)
	return e.dial(b, c, ClientOptions{Limits: Limits{MaxMessageSize: 32 << 20, MaxOutboxBytes: 64 << 20}})
}

// carrierEchoCases are the messages of BenchmarkCarrierEcho and
// BenchmarkCarrierRatio: issue 14's small, 10 KiB, and small with 64 in
// flight.
var carrierEchoCases = []struct {
	name     string
	size     int
	inFlight int
}{{"small", 32, 1}, {"10KiB", 10 << 10, 1}, {"small-64", 32, 64}}

// BenchmarkCarrierEcho is a round trip of a small (32 B) and a 10 KiB
// payload, one at a time, and of a small one with 64 in flight, through
// compat's call path (rpc: client encode, carrier, server dispatch, the
// echo/raw handler, answer, client decode) and through the same carrier
// with no RPC layer (raw). With 64 in flight, rpc is 64 goroutines each
// blocked in Call; rpc-go and rpc-goall keep the 64 out from one
// goroutine, as raw's writer does, with Client.Go and Client.GoAll.
func BenchmarkCarrierEcho(b *testing.B) {
	for _, carrier := range benchCarriers {
		for _, sc := range carrierEchoCases {
			msg := make([]byte, sc.size)
			b.Run(fmt.Sprintf("%s/%s/rpc", carrier, sc.name), func(b *testing.B) {
				c := dialBench(b, carrier)
				b.SetBytes(int64(sc.size))
				benchCalls(b, c, msg, sc.inFlight)
			})
			if sc.inFlight > 1 {
				b.Run(fmt.Sprintf("%s/%s/rpc-go", carrier, sc.name), func(b *testing.B) {
					c := dialBench(b, carrier)
					b.SetBytes(int64(sc.size))
					benchGo(b, c, msg, sc.inFlight)
				})
				b.Run(fmt.Sprintf("%s/%s/rpc-goall", carrier, sc.name), func(b *testing.B) {
					c := dialBench(b, carrier)
					b.SetBytes(int64(sc.size))
					benchGoAll(b, c, msg, sc.inFlight)
				})
			}
			b.Run(fmt.Sprintf("%s/%s/raw", carrier, sc.name), func(b *testing.B) {
				e := dialRawEcho(b, carrier)
				b.SetBytes(int64(sc.size))
				benchRaw(b, e, msg, sc.inFlight)
			})
		}
	}
}

// An echoRun makes n round trips of one message through a carrier and
// returns the first failure. BenchmarkCarrierEcho times one run of b.N;
// BenchmarkCarrierRatio times many short ones on the same connections.
// What a run needs that lasts (channels, calls, buffers) is made with the
// echoRun, outside the timing.
type echoRun func(n int) error

// benchEcho times run over b.N round trips, after one untimed.
func benchEcho(b *testing.B, run echoRun) {
	if err := run(1); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	defer reportCPU(b)()
	if err := run(b.N); err != nil {
		b.Fatal(err)
	}
}

func benchCalls(b *testing.B, c *Client, msg []byte, inFlight int) {
	benchEcho(b, callsRun(c, msg, inFlight))
}

func benchGo(b *testing.B, c *Client, msg []byte, inFlight int) {
	benchEcho(b, goRun(c, msg, inFlight))
}

func benchGoAll(b *testing.B, c *Client, msg []byte, inFlight int) {
	benchEcho(b, goAllRun(c, msg, inFlight))
}

func benchRaw(b *testing.B, e rawEcho, msg []byte, inFlight int) {
	benchEcho(b, rawRun(e, msg, inFlight))
}

// callsRun makes its calls with Client.Call: one after another, or from
// inFlight goroutines each blocked in Call.
func callsRun(c *Client, msg []byte, inFlight int) echoRun {
	ctx := context.Background()
	if inFlight == 1 {
		var resp []byte
		return func(n int) error {
			for range n {
				if err := c.Call(ctx, "echo/raw", msg, &resp); err != nil {
					return err
				}
			}
			return nil
		}
	}
	return func(n int) error {
		var next atomic.Int64
		var wg sync.WaitGroup
		errs := make(chan error, inFlight)
		for range inFlight {
			wg.Go(func() {
				var resp []byte
				for next.Add(1) <= int64(n) {
					if err := c.Call(ctx, "echo/raw", msg, &resp); err != nil {
						errs <- err
						return
					}
				}
			})
		}
		wg.Wait()
		select {
		case err := <-errs:
			return err
		default:
			return nil
		}
	}
}

// goRun keeps inFlight calls out from one goroutine with Client.Go,
// starting the next call as each answer arrives: the shape of rawRun's
// pipelined echo, where callsRun has a goroutine per call in flight.
func goRun(c *Client, msg []byte, inFlight int) echoRun {
	ctx := context.Background()
	done := make(chan *AsyncCall, inFlight)
	resps := make([][]byte, inFlight)
	return func(n int) error {
		sent := 0
		for ; sent < min(inFlight, n); sent++ {
			c.Go(ctx, "echo/raw", msg, &resps[sent], done)
		}
		for range n {
			call := <-done
			if call.Err != nil {
				return call.Err
			}
			if sent < n {
				c.Go(ctx, "echo/raw", msg, call.Resp, done)
				sent++
			}
		}
		return nil
	}
}

// goAllRun is goRun starting the calls whose answers arrived together
// in one GoAll: the calls that one read of the client's answered leave in
// one write, as the raw echo server's copies do.
func goAllRun(c *Client, msg []byte, inFlight int) echoRun {
	ctx := context.Background()
	done := make(chan *AsyncCall, inFlight)
	resps := make([][]byte, inFlight)
	calls := make([]*AsyncCall, inFlight)
	for i := range calls {
		calls[i] = &AsyncCall{Method: "echo/raw", Req: msg, Resp: &resps[i], Done: done}
	}
	next := make([]*AsyncCall, 0, inFlight)
	// Every call a run starts has ended when it returns (but on an
	// error), so the next run starts from calls again.
	return func(n int) error {
		sent := min(inFlight, n)
		c.GoAll(ctx, calls[:sent]...)
		for got := 0; got < n; {
			next = next[:0]
			for call := <-done; call != nil; {
				got++
				if call.Err != nil {
					return call.Err
				}
				if sent < n {
					next = append(next, call)
					sent++
				}
				select {
				case call = <-done:
				default:
					call = nil
				}
			}
			c.GoAll(ctx, next...)
		}
		return nil
	}
}

// rawRun is the raw echo: one message at a time, or with inFlight out.
func rawRun(e rawEcho, msg []byte, inFlight int) echoRun {
	if inFlight == 1 {
		return func(n int) error {
			for range n {
				if err := e.send(msg); err != nil {
					return err
				}
				if err := e.recv(); err != nil {
					return err
				}
			}
			return nil
		}
	}
	// One writer keeps inFlight messages out, the reader frees a slot per
	// echo: the raw equivalent of inFlight callers.
	return func(n int) error {
		slots := make(chan struct{}, inFlight)
		werr := make(chan error, 1)
		go func() {
			for range n {
				slots <- struct{}{}
				if err := e.send(msg); err != nil {
					werr <- err
					return
				}
			}
			werr <- nil
		}()
		for range n {
			if err := e.recv(); err != nil {
				return err
			}
			<-slots
		}
		return <-werr
	}
}

// reportCPU reports the process's CPU time (user and system, every
// goroutine: the client's, the server's, the carrier's) per operation
// from now until the returned function runs: on a shared machine it
// varies less than the wall time, which waits for the other tenants.
func reportCPU(b *testing.B) (stop func()) {
	start := processCPU()
	return func() {
		b.ReportMetric(float64(processCPU()-start)/float64(b.N), "cpu-ns/op")
	}
}

// BenchmarkQUICServerPipelined splits the gap between compat's QUIC call
// path and a raw QUIC echo with 64 in flight (BenchmarkCarrierEcho
// quic/small-64): the same calls to compat's server, sent by benchRaw's
// pipelined writer and read by its reader instead of by 64 goroutines
// calling through the Go client. Its distance from the raw echo is the
// server's share of the gap; the rest is the client's.
func BenchmarkQUICServerPipelined(b *testing.B) {
	e := sharedCarrierEnv(b)
	tlsConf := e.cert.ClientTLSConfig()
	tlsConf.NextProtos = []string{ALPN}
	qc, err := quic.DialAddr(context.Background(), strings.TrimPrefix(e.urls[CarrierQUIC], "quic://"), tlsConf, QUICConfig(0))
	if err != nil {
		b.Fatal(err)
	}
	defer qc.CloseWithError(0, "")
	str, err := qc.OpenStreamSync(context.Background())
	if err != nil {
		b.Fatal(err)
	}
	// Every call has id 1: the server answers each, and the reader only
	// counts answers.
	call := wire.AppendCall(nil, dispatch.KindCall, 1, "echo/raw", 0, make([]byte, 32))
	benchRaw(b, newStreamEcho(str, str), call, 64)
}

// BenchmarkCarrierOpen is the opening of a connection and its first call,
// then its close, each reported on its own (open-µs, close-µs):
// the carrier's handshakes (TCP and the upgrade; QUIC's; QUIC's, HTTP/3's
// and the CONNECT; SCTP's four-way; WebRTC's signalling POST, ICE, DTLS
// and SCTP), the capabilities, one call.
func BenchmarkCarrierOpen(b *testing.B) {
	for _, carrier := range benchCarriers {
		b.Run(carrier.String(), func(b *testing.B) {
			e := sharedCarrierEnv(b)
			opts := ClientOptions{Reconnect: Reconnect{Disabled: true}, TLSConfig: e.cert.ClientTLSConfig()}
			opts.WebRTC.LoopbackOnly = true
			ctx := context.Background()
			var open, closing time.Duration
			n := 0
			for b.Loop() {
				start := time.Now()
				c, err := Dial(ctx, e.urls[carrier], opts)
				if err != nil {
					b.Fatal(err)
				}
				if err := c.Call(ctx, "echo/raw", []byte("x"), nil); err != nil {
					b.Fatal(err)
				}
				opened := time.Now()
				c.Close()
				open += opened.Sub(start)
				closing += time.Since(opened)
				n++
			}
			// ns/op is the whole cycle; open-µs is what a user waits for
			// before the first answer, close-µs the closing handshake.
			b.ReportMetric(float64(open.Microseconds())/float64(n), "open-µs")
			b.ReportMetric(float64(closing.Microseconds())/float64(n), "close-µs")
		})
	}
}

// BenchmarkCarrierServerClose is a connection the server closes (Peer.Close
// on the client's conn/close event), from the event's sending until the
// client has seen the close: close-µs is that wait, the closing handshake
// as the server begins it.
func BenchmarkCarrierServerClose(b *testing.B) {
	for _, carrier := range benchCarriers {
		b.Run(carrier.String(), func(b *testing.B) {
			e := sharedCarrierEnv(b)
			closed := make(chan struct{}, 1)
			opts := ClientOptions{
				Reconnect: Reconnect{Disabled: true},
				TLSConfig: e.cert.ClientTLSConfig(),
				OnState: func(s State) {
					if s == Closed {
						closed <- struct{}{}
					}
				},
			}
			opts.WebRTC.LoopbackOnly = true
			ctx := context.Background()
			var closing time.Duration
			n := 0
			for b.Loop() {
				c, err := Dial(ctx, e.urls[carrier], opts)
				if err != nil {
					b.Fatal(err)
				}
				start := time.Now()
				if err := c.Event("conn/close", nil); err != nil {
					b.Fatal(err)
				}
				select {
				case <-closed:
				case <-time.After(10 * time.Second):
					b.Fatal("the client did not see the server's close")
				}
				closing += time.Since(start)
				n++
				c.Close()
			}
			b.ReportMetric(float64(closing.Microseconds())/float64(n), "close-µs")
		})
	}
}

// BenchmarkCarrierTransfer sends 16 MiB up and gets it back: in 128 calls
// of 128 KiB, 8 in flight, on every carrier, and on the carriers with
// binary streams also through one stream (OpenStream), written and read
// at once.
func BenchmarkCarrierTransfer(b *testing.B) {
	const total, chunk = 16 << 20, 128 << 10
	for _, carrier := range benchCarriers {
		b.Run(carrier.String()+"/calls", func(b *testing.B) {
			c := dialBench(b, carrier)
			msg := make([]byte, chunk)
			b.SetBytes(2 * total)
			for b.Loop() {
				var next atomic.Int64
				var wg sync.WaitGroup
				for range 8 {
					wg.Go(func() {
						var resp []byte
						for next.Add(1) <= total/chunk {
							if err := c.Call(context.Background(), "echo/raw", msg, &resp); err != nil || len(resp) != chunk {
								b.Error(len(resp), err)
								return
							}
						}
					})
				}
				wg.Wait()
			}
		})
		if carrier != CarrierQUIC && carrier != CarrierWebTransport {
			continue
		}
		b.Run(carrier.String()+"/stream", func(b *testing.B) {
			c := dialBench(b, carrier)
			buf := make([]byte, 256<<10)
			b.SetBytes(2 * total)
			for b.Loop() {
				s, err := c.OpenStream(context.Background(), "file/echo", "")
				if err != nil {
					b.Fatal(err)
				}
				go func() {
					for sent := 0; sent < total; sent += len(buf) {
						if _, err := s.Write(buf); err != nil {
							return
						}
					}
					s.CloseWrite()
				}()
				n, err := io.CopyBuffer(io.Discard, s, make([]byte, 256<<10))
				if err != nil || n != total {
					b.Fatalf("read back %d bytes, %v", n, err)
				}
			}
		})
	}
}

// BenchmarkCarrierCallUnderUpload measures a small call's latency while
// an upload saturates the same connection: 1 MiB calls, four in flight, on
// WebSocket and SCTP (their only way), and on QUIC both that way and as a
// binary stream beside the control stream. It reports the p50 and p99 of
// the small calls.
func BenchmarkCarrierCallUnderUpload(b *testing.B) {
	cases := []struct {
		carrier Carrier
		stream  bool
	}{
		{CarrierWebSocket, false}, {CarrierSCTP, false}, {CarrierQUIC, false}, {CarrierQUIC, true}, {CarrierWebTransport, true},
	}
	for _, tc := range cases {
		name := tc.carrier.String() + "/upload-as-calls"
		if tc.stream {
			name = tc.carrier.String() + "/upload-as-stream"
		}
		b.Run(name, func(b *testing.B) {
			c := dialBench(b, tc.carrier)
			ctx, cancel := context.WithCancel(context.Background())
			var wg sync.WaitGroup
			wg.Go(func() { upload(ctx, b, c, tc.stream) })
			time.Sleep(100 * time.Millisecond) // the upload fills the pipe
			lat := make([]time.Duration, 0, b.N)
			small := []byte("ping")
			for b.Loop() {
				start := time.Now()
				if err := c.Call(context.Background(), "echo/raw", small, nil); err != nil {
					b.Fatal(err)
				}
				lat = append(lat, time.Since(start))
			}
			b.StopTimer()
			cancel()
			wg.Wait()
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
			b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
		})
	}
}

// upload keeps the connection busy until ctx ends: four 1 MiB calls in
// flight at all times, so that the pipe never drains between two, or one
// binary stream written without pause.
func upload(ctx context.Context, b *testing.B, c *Client, stream bool) {
	big := make([]byte, 1<<20)
	if !stream {
		var wg sync.WaitGroup
		for range 4 {
			wg.Go(func() {
				for ctx.Err() == nil {
					if err := c.Call(ctx, "echo/sink", big, nil); err != nil && ctx.Err() == nil {
						b.Error(err)
						return
					}
				}
			})
		}
		wg.Wait()
		return
	}
	s, err := c.OpenStream(ctx, "file/sink", "")
	if err != nil {
		b.Error(err)
		return
	}
	defer s.Close()
	for ctx.Err() == nil {
		if _, err := s.Write(big); err != nil {
			if ctx.Err() == nil && !errors.Is(err, context.Canceled) {
				b.Error(err)
			}
			return
		}
	}
}

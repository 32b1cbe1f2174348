package compat_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"strings"
	"time"

	"github.com/hotpath-go/hotpath/compat"
)

// The same server over QUIC: a development certificate, a UDP listener
// that serves native QUIC and WebTransport, and a Go client that pins the
// certificate by hash, as a browser's serverCertificateHashes does.
func Example_quic() {
	r := compat.NewRouter()
	compat.Handle(r, "echo/upper", func(ctx context.Context, s string) (string, error) {
		return fmt.Sprintf("%s over %s", s, compat.PeerFrom(ctx).Carrier()), nil
	})
	srv, err := compat.NewServer(compat.Options{Router: r})
	if err != nil {
		log.Fatal(err)
	}
	cert, err := compat.NewDevCertificate(13*24*time.Hour, "127.0.0.1")
	if err != nil {
		log.Fatal(err)
	}
	ln, err := srv.ListenQUIC("127.0.0.1:0", cert.ServerTLSConfig())
	if err != nil {
		log.Fatal(err)
	}
	go srv.ServeQUIC(ln)
	defer srv.Shutdown(context.Background())

	ctx := context.Background()
	c, err := compat.Dial(ctx, "quic://"+ln.Addr().String(), compat.ClientOptions{TLSConfig: cert.ClientTLSConfig()})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	var out string
	if err := c.Call(ctx, "echo/upper", "hello", &out); err != nil {
		log.Fatal(err)
	}
	fmt.Println(out)
	// Output: hello over quic
}

// An upload on a binary stream of its own (QUIC and WebTransport): the
// client writes, CloseWrite says the upload is whole, and the handler's
// answer comes back on the same stream. A client that gives up part way
// calls Abort, and the handler reads ErrCanceled instead of io.EOF, so it
// does not keep half a file.
func ExampleClient_OpenStream() {
	r := compat.NewRouter()
	refused := make(chan string, 1)
	compat.HandleStream(r, "file/put", func(ctx context.Context, name string, s *compat.Stream) error {
		b, err := io.ReadAll(s)
		if err != nil {
			refused <- fmt.Sprintf("%s: not stored, canceled: %v", name, errors.Is(err, compat.ErrCanceled))
			return err
		}
		_, err = fmt.Fprintf(s, "%s: stored %d bytes", name, len(b))
		return err
	})
	srv, err := compat.NewServer(compat.Options{Router: r})
	if err != nil {
		log.Fatal(err)
	}
	cert, err := compat.NewDevCertificate(13*24*time.Hour, "127.0.0.1")
	if err != nil {
		log.Fatal(err)
	}
	ln, err := srv.ListenQUIC("127.0.0.1:0", cert.ServerTLSConfig())
	if err != nil {
		log.Fatal(err)
	}
	go srv.ServeQUIC(ln)
	defer srv.Shutdown(context.Background())

	ctx := context.Background()
	c, err := compat.Dial(ctx, "quic://"+ln.Addr().String(), compat.ClientOptions{TLSConfig: cert.ClientTLSConfig()})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	s, err := c.OpenStream(ctx, "file/put", "a.txt")
	if err != nil {
		log.Fatal(err)
	}
	if _, err := io.Copy(s, strings.NewReader(strings.Repeat("x", 100_000))); err != nil {
		log.Fatal(err)
	}
	if err := s.CloseWrite(); err != nil {
		log.Fatal(err)
	}
	answer, err := io.ReadAll(s)
	if err != nil {
		log.Fatal(err)
	}
	s.Close()
	fmt.Println(string(answer))

	s, err = c.OpenStream(ctx, "file/put", "b.txt")
	if err != nil {
		log.Fatal(err)
	}
	if _, err := s.Write([]byte("the first half")); err != nil {
		log.Fatal(err)
	}
	s.Abort() // the source of the second half failed
	if _, err := io.ReadAll(s); !errors.Is(err, compat.ErrClosed) {
		log.Fatal(err)
	}
	fmt.Println(<-refused)
	// Output:
	// a.txt: stored 100000 bytes
	// b.txt: not stored, canceled: true
}

// One goroutine keeps many calls in flight: GoAll starts a burst, which
// leaves in as few writes as the protocol's batches allow, and each call
// comes back on its Done channel with its answer decoded into its Resp.
// A call that came back can be started again, here with the next word.
func ExampleClient_GoAll() {
	r := compat.NewRouter()
	compat.Handle(r, "text/len", func(ctx context.Context, s string) (int, error) { return len(s), nil })
	srv, err := compat.NewServer(compat.Options{Router: r})
	if err != nil {
		log.Fatal(err)
	}
	cert, err := compat.NewDevCertificate(13*24*time.Hour, "127.0.0.1")
	if err != nil {
		log.Fatal(err)
	}
	ln, err := srv.ListenQUIC("127.0.0.1:0", cert.ServerTLSConfig())
	if err != nil {
		log.Fatal(err)
	}
	go srv.ServeQUIC(ln)
	defer srv.Shutdown(context.Background())

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := compat.Dial(ctx, "quic://"+ln.Addr().String(), compat.ClientOptions{TLSConfig: cert.ClientTLSConfig()})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	words := []string{"a", "bb", "ccc", "dddd", "eeeee", "ffffff"}
	const inFlight = 3
	done := make(chan *compat.AsyncCall, inFlight) // room for every call out
	lens := make([]int, inFlight)
	calls := make([]*compat.AsyncCall, inFlight)
	for i := range calls {
		calls[i] = &compat.AsyncCall{Method: "text/len", Req: words[i], Resp: &lens[i], Done: done}
	}
	c.GoAll(ctx, calls...)
	total, next := 0, inFlight
	for range words {
		call := <-done
		if call.Err != nil {
			log.Fatal(call.Err)
		}
		total += *call.Resp.(*int)
		if next < len(words) {
			call.Req = words[next]
			next++
			c.GoAll(ctx, call)
		}
	}
	fmt.Println(total)
	// Output: 21
}

// One server on every carrier: the README's "Serving" excerpt, compiled by
// go test but not run (it binds fixed ports). QUIC and WebTransport share
// one UDP port; SCTP listens over plain UDP and over DTLS; WebRTC is
// signalled over HTTP beside the WebSocket endpoint.
func Example_carriers() {
	r := compat.NewRouter()
	srv, _ := compat.NewServer(compat.Options{Router: r})

	// QUIC and WebTransport share one UDP port (ALPN "hotpath.v1" and "h3").
	cert, _ := compat.NewDevCertificate(13*24*time.Hour, "127.0.0.1") // development only, ≤ 14 days
	fmt.Println("sha-256", cert.HashBase64())                         // for serverCertificateHashes
	qln, _ := srv.ListenQUIC("127.0.0.1:4433", cert.ServerTLSConfig())
	go srv.ServeQUIC(qln)

	// SCTP over UDP (trusted networks), or over DTLS.
	sln, _ := compat.ListenSCTP("127.0.0.1:5000")
	go srv.ServeSCTP(sln)
	dln, _ := compat.ListenSCTPDTLS("127.0.0.1:5001", cert.ServerDTLSConfig())
	go srv.ServeSCTP(dln)

	// WebRTC: an HTTP signalling endpoint (one POST of the offer, the answer back).
	mux := http.NewServeMux()
	mux.Handle("/ws", srv)
	mux.Handle("/rtc", srv.WebRTCHandler(compat.WebRTCOptions{})) // LoopbackOnly: true for tests
	// Serve mux with an http.Server that sets timeouts (Example_webSocket).
	_ = mux
}

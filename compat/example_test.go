package compat_test

import (
	"context"
	"fmt"
	"log"
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

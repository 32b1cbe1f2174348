package conformance_test

import (
	"context"
	"fmt"
	"net"

	"github.com/hotpath-go/hotpath/compat"
	"github.com/hotpath-go/hotpath/compat/conformance"
)

// Run the close cases against an echo server. RunAll runs every case the
// same way.
func Example() {
	srv, err := compat.NewServer(compat.Options{Router: compat.NewRouter(), Echo: true, NoDictionary: true})
	if err != nil {
		panic(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	go srv.Serve(ln)
	defer srv.Shutdown(context.Background())

	target := conformance.Target{Addr: ln.Addr().String(), Path: "/ws", MaxMessage: 1 << 20}
	var passed, skipped int
	for _, c := range conformance.Cases() {
		if c.Group != "close" {
			continue
		}
		switch r := c.Run(context.Background(), target); {
		case r.Skipped != "":
			skipped++ // the server-initiated close needs Target.Shutdown
		case r.Err != nil:
			fmt.Printf("%s [%s] expect %s: %v\n", r.Name, r.Section, r.Expect, r.Err)
		default:
			passed++
		}
	}
	fmt.Println("passed:", passed, "skipped:", skipped)
	// Output: passed: 37 skipped: 1
}

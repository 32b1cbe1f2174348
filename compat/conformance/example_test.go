package conformance_test

import (
	"context"
	"fmt"
	"net"

	"github.com/hotpath-go/hotpath/compat"
	"github.com/hotpath-go/hotpath/compat/conformance"
)

// Run the suite against an echo server and count what failed.
func Example() {
	srv, err := compat.NewServer(compat.Options{
		Router:       compat.NewRouter(),
		Echo:         true,
		NoDictionary: true,
	})
	if err != nil {
		panic(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	go srv.Serve(ln)
	defer srv.Shutdown(context.Background())

	results := conformance.RunAll(context.Background(), conformance.Target{
		Addr:         ln.Addr().String(),
		Path:         "/ws",
		MaxMessage:   1 << 20, // compat's default
		MaxFragments: 1024,
	})
	failed := 0
	for _, r := range results {
		if r.Err != nil {
			failed++
			fmt.Println(r.Group, r.Name, r.Err)
		}
	}
	fmt.Println("failed:", failed)
	// Output: failed: 0
}

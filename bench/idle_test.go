package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"testing"
	"time"
)

// TestServeChildProtocol speaks to -serve mode as the idle scenario does,
// over pipes instead of a process's stdin and stdout, then connects a few
// clients from several source addresses.
func TestServeChildProtocol(t *testing.T) {
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	done := make(chan error, 1)
	go func() { done <- serveChild("gorilla/websocket", inR, outW); outW.Close() }()
	out := bufio.NewScanner(outR)
	next := func(keyword string) string {
		t.Helper()
		if !out.Scan() {
			t.Fatalf("child said nothing, want %s", keyword)
		}
		rest, ok := strings.CutPrefix(out.Text(), keyword+" ")
		if !ok {
			t.Fatalf("child said %q, want %s", out.Text(), keyword)
		}
		return rest
	}
	addr := next("listening")

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	srv, _ := findEchoServer("gorilla/websocket")
	clients, ok, err := dialMany(ctx, addr, 20, srv)
	if ok != 20 || err != nil {
		t.Fatalf("dialMany: %d of 20 echoed, first error %v", ok, err)
	}
	for _, c := range clients {
		c.closeNow()
	}

	io.WriteString(inW, "gc\n")
	var gomem, goroutines float64
	if _, err := fmt.Sscan(next("stats"), &gomem, &goroutines); err != nil || gomem <= 0 || goroutines < 1 {
		t.Errorf("stats: %v %v %v", gomem, goroutines, err)
	}
	io.WriteString(inW, "quit\n")
	if err := <-done; err != nil {
		t.Errorf("serveChild: %v", err)
	}
}

func TestServeChildUnknownLibrary(t *testing.T) {
	if err := serveChild("no/such", strings.NewReader(""), io.Discard); err == nil {
		t.Error("an unknown library was served")
	}
}

func TestResidentBytes(t *testing.T) {
	if _, err := os.Stat("/proc/self/status"); err != nil {
		t.Skip("no /proc")
	}
	rss, err := residentBytes(os.Getpid())
	if err != nil || rss < 1<<20 {
		t.Errorf("residentBytes = %v, %v; want at least 1 MiB", rss, err)
	}
}

package compat

import (
	"context"
	"errors"
	"fmt"
	"net"
	"syscall"
	"testing"
	"time"
)

// A Dial whose TCP connect never completes says so when ConnectTimeout
// ends it (TestDialTimeoutNamesTheStep has the later steps). The
// listener is made with a backlog of 0 and never accepts: once a
// connection waits in its queue, Linux drops the next SYNs, and a
// connect retries them until it gives up.
func TestDialTimeoutInTCPConnect(t *testing.T) {
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(fd)
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Listen(fd, 0); err != nil {
		t.Fatal(err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", sa.(*syscall.SockaddrInet4).Port)
	// Fill the queue until a connect hangs: then the Dial's will too.
	for full := false; !full; {
		nc, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err != nil {
			if ne, ok := err.(net.Error); !ok || !ne.Timeout() {
				t.Fatal(err)
			}
			full = true
			continue
		}
		defer nc.Close()
	}
	url := "ws://" + addr + "/ws"
	c, err := Dial(context.Background(), url, ClientOptions{ConnectTimeout: 300 * time.Millisecond})
	if err == nil {
		c.Close()
		t.Fatal("Dial succeeded")
	}
	want := "hotpath: " + url + ": ConnectTimeout (300ms) ran out during the TCP connect"
	if !errors.Is(err, context.DeadlineExceeded) || !errors.As(err, new(*connectTimeoutError)) || err.Error() != want {
		t.Errorf("%v, want %q, matching context.DeadlineExceeded", err, want)
	}
}

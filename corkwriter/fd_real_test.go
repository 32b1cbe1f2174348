//go:build linux

package corkwriter

import (
	"bytes"
	"testing"

	"golang.org/x/sys/unix"
)

// TestNewFDRealSocket: on a real non-blocking socket that nobody reads, a
// Writer from NewFD fills the send buffer, returns ErrWouldBlock with the
// rest kept, and finishes the stream exactly once the peer reads.
func TestNewFDRealSocket(t *testing.T) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Skipf("socketpair: %v", err)
	}
	defer unix.Close(fds[0])
	defer unix.Close(fds[1])

	w := NewFD(fds[0], nil)
	want := bytes.Repeat(pattern[:patternPeriod], 64) // 4 MiB, more than any send buffer
	w.Cork()
	for p := want; len(p) > 0; p = p[min(len(p), 100<<10):] {
		mustWrite(t, w.WriteShared, p[:min(len(p), 100<<10)])
	}
	if err := w.Uncork(); err != ErrWouldBlock {
		t.Fatalf("Uncork on a full socket: %v, want ErrWouldBlock", err)
	}
	if w.Buffered() == 0 || w.Buffered() == len(want) {
		t.Fatalf("%d of %d bytes buffered after the socket filled", w.Buffered(), len(want))
	}
	var got []byte
	buf := make([]byte, 256<<10)
	for len(got) < len(want) {
		n, err := unix.Read(fds[1], buf)
		if err == unix.EAGAIN {
			if err := w.Flush(); err != nil && err != ErrWouldBlock {
				t.Fatal(err)
			}
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, buf[:n]...)
	}
	if !bytes.Equal(got, want) || w.Buffered() != 0 {
		t.Fatalf("stream differs at %d; %d still buffered", mismatch(want, got), w.Buffered())
	}
}

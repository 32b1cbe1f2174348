package compat

import "syscall"

// peekByte receives the byte that socketReadable peeks at. The kernel
// writes it and nobody reads it, so connections may share it.
var peekByte [1]byte

// socketReadable reports whether fd has a byte to read, an end of stream
// or an error pending, without consuming anything: a non-blocking
// MSG_PEEK of one byte. false means "would block": the poller then waits.
func socketReadable(fd uintptr) bool {
	_, _, err := syscall.Recvfrom(int(fd), peekByte[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
	return err != syscall.EAGAIN && err != syscall.EINTR
}

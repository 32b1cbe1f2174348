//go:build !linux

package compat

// socketReadable reports true at once where a non-blocking peek is not
// available: the read loop then blocks in Read with its buffer, as a plain
// goroutine-per-connection server does.
func socketReadable(uintptr) bool { return true }

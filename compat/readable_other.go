//go:build !unix

package compat

// readReady is never called where read(2) is not available: the read loop
// blocks in Read with its buffer, as a plain goroutine-per-connection
// server does.
func (c *wsConn) readReady(uintptr) bool { return true }

const canReadRaw = false

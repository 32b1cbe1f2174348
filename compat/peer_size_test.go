package compat

import (
	"testing"
	"unsafe"
)

// A Peer per connection: a field that takes it past 256 bytes moves every
// connection to the next size class (288 B) and brings the idle goal of 6
// KiB per connection (5,950 B measured) closer; regroup the fields.
func TestPeerStructSize(t *testing.T) {
	if n := unsafe.Sizeof(Peer{}); n > 256 {
		t.Errorf("Peer is %d bytes, past its 256-byte size class", n)
	}
}

// TestLinkStructSizes holds each link to the size class it is in: a
// field added to one moves every connection of its carriers up a class
// (a pktConn past 448 bytes takes 480).
func TestLinkStructSizes(t *testing.T) {
	if n := unsafe.Sizeof(pktConn{}); n > 448 {
		t.Errorf("pktConn is %d bytes, past its 448-byte size class", n)
	}
	if n := unsafe.Sizeof(wsConn{}); n > 896 {
		t.Errorf("wsConn is %d bytes, past its 896-byte size class", n)
	}
}

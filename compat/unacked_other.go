//go:build !linux

package compat

import "syscall"

// unacked cannot tell here: a closing handshake that ran out ends with a
// FIN, whatever the kernel still holds for the peer.
func unacked(syscall.RawConn) int { return -1 }

//go:build !unix

package main

import "net"

// rawEcho writes back whatever conn receives. Without unix raw reads it
// holds a 4 KiB buffer per connection, so on these systems the floor of
// the idle scenario includes it.
func rawEcho(conn net.Conn) {
	defer conn.Close()
	buf := make([]byte, 4<<10)
	for {
		n, err := conn.Read(buf)
		if n > 0 {
			if _, werr := conn.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// openFileLimit is unknown here; the idle scenario keeps its default.
func openFileLimit() uint64 { return 0 }

//go:build !linux

package compat

import "net"

// hangUpWatch is not kept where poll(2) has no POLLRDHUP: a peer's FIN
// then looks as its bytes do, and only a read tells it (the BSDs and
// macOS report POLLHUP only once both directions are shut). An inflate
// pause over TCP runs its time when the other end goes, and the next
// read ends the connection.
type hangUpWatch struct{}

func watchHangUp(net.Conn) *hangUpWatch { return nil }

func (w *hangUpWatch) ended() <-chan struct{} { return nil }

func (w *hangUpWatch) stop() error { return nil }

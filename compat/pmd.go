package compat

import (
	"sync"

	"github.com/hotpath-go/hotpath/deflatecache"
	"github.com/hotpath-go/hotpath/wsframe"
)

// pmdParams are the permessage-deflate parameters a connection agreed on.
type pmdParams = deflatecache.Params

// negotiatePMD answers a client's permessage-deflate offers under the
// server's Compression settings: the parameters and response header when
// an offer is accepted, nil when none is (the connection runs without the
// extension), an error for a header that breaks the grammar.
func negotiatePMD(offers string, c Compression) (*pmdParams, string, error) {
	params, response, ok, err := deflatecache.Negotiate(offers, deflatecache.ServerPolicy{
		ServerContextTakeover: c.ContextTakeover,
		ClientContextTakeover: c.ContextTakeover,
	})
	if err != nil || !ok {
		return nil, "", err
	}
	return &params, response, nil
}

// pmdConn is one connection's permessage-deflate state (deflatecache.Conn)
// with what the engine needs around it: the lock that keeps compressed
// frames in the order they joined the compression history, and the pooled
// buffer a message is inflated into.
type pmdConn struct {
	dc        *deflatecache.Conn
	threshold int

	// sendMu is held from compressing a frame to queueing it: with context
	// takeover a compressed message must be sent before any later one.
	sendMu sync.Mutex
	// sendTakeover: this end's messages are compressed against the ones
	// before, so one compressed and then dropped would break the peer's
	// window: a message is compressed only when the outbox has room for it
	// (wsConn.takeoverRoom).
	sendTakeover bool

	inflated *[]byte // the scratch buffer of the message being handled
}

func newPMDConn(p pmdParams, c Compression, client bool) (*pmdConn, error) {
	role := wsframe.Server
	if client {
		role = wsframe.Client
	}
	dc, err := deflatecache.NewConn(p, role, deflatecache.Options{Level: c.Level, MinSize: c.Threshold})
	if err != nil {
		return nil, err
	}
	takeover := !p.ServerNoContextTakeover
	if client {
		takeover = !p.ClientNoContextTakeover
	}
	return &pmdConn{dc: dc, threshold: c.Threshold, sendTakeover: takeover}, nil
}

// worthCompressing reports whether a payload of n bytes is long enough to
// try; deflatecache decides finally (a payload that would not shrink is
// sent plain).
func (c *pmdConn) worthCompressing(n int) bool { return n >= c.threshold }

// inflate inflates a compressed message into a pooled buffer, capped at
// max bytes; release returns the buffer once the message is handled.
func (c *pmdConn) inflate(payload []byte, max int64) ([]byte, error) {
	bp := scratchBufs.Get().(*[]byte)
	out, err := c.dc.Inflate((*bp)[:0], payload, max)
	*bp = out[:0]
	if err != nil {
		scratchBufs.Put(bp)
		return nil, err
	}
	c.inflated = bp
	return out, nil
}

func (c *pmdConn) release() {
	if c.inflated != nil {
		scratchBufs.Put(c.inflated)
		c.inflated = nil
	}
}

// close drops the compression state; it runs when the read loop has ended,
// but a broadcaster may still be sending, hence the lock.
func (c *pmdConn) close() {
	c.sendMu.Lock()
	defer c.sendMu.Unlock()
	c.dc.Close()
}

package main

import (
	"bytes"
	"context"
	"errors"
	"net"
	"sync"
	"time"

	"github.com/lxzan/gws"
)

// The gws row with gws's own client: gws's echo server driven by a
// gws.Conn dialled with gws.NewClient, each call a message whose echo is
// its answer. It is the stack a gws user runs on both ends, as
// "hotpath RPC (Go client)" is hotpath's, so the two compare whole
// stacks; "lxzan/gws" (the bench's minimal client, which does no work per
// message) compares servers.
func init() {
	echoCallers = append(echoCallers, echoCaller{Library: "lxzan/gws (gws client)", Role: Peer, Open: openGwsClientRow})
}

// errGwsClosed fails the calls a closed gws connection will not answer.
var errGwsClosed = errors.New("gws connection closed")

// gwsCaller matches echoes to calls in order, the least a client needs
// when answers carry no id: a call queues a waiter and writes its message
// under one lock, so the queue's order is the wire's, and the read loop
// hands each echo to the oldest waiter.
type gwsCaller struct {
	gws.BuiltinEventHandler
	mu      sync.Mutex
	conn    *gws.Conn
	waiters []chan int // oldest first; a waiter gets the echo's length, -1 at close
	closed  bool
	chans   sync.Pool // of chan int with room for one: a call allocates none
}

func (g *gwsCaller) OnMessage(_ *gws.Conn, m *gws.Message) {
	n := m.Data.Len()
	_ = m.Close()
	g.mu.Lock()
	if len(g.waiters) == 0 {
		g.mu.Unlock()
		return // an echo nobody waits for: the length check fails the row
	}
	w := g.waiters[0]
	g.waiters = g.waiters[1:]
	g.mu.Unlock()
	w <- n
}

func (g *gwsCaller) OnClose(*gws.Conn, error) {
	g.mu.Lock()
	waiters := g.waiters
	g.waiters, g.closed = nil, true
	g.mu.Unlock()
	for _, w := range waiters {
		w <- -1
	}
}

func (g *gwsCaller) call(ctx context.Context, req []byte) (int, error) {
	w, _ := g.chans.Get().(chan int)
	if w == nil {
		w = make(chan int, 1)
	}
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		return 0, errGwsClosed
	}
	g.waiters = append(g.waiters, w)
	err := g.conn.WriteMessage(gws.OpcodeBinary, req)
	g.mu.Unlock()
	if err != nil {
		return 0, err // the connection is broken; OnClose answers w
	}
	select {
	case n := <-w:
		g.chans.Put(w)
		if n < 0 {
			return 0, errGwsClosed
		}
		return n, nil
	case <-ctx.Done():
		return 0, ctx.Err() // w may still be answered: not reused
	}
}

func openGwsClientRow(size, window int, d time.Duration) func(context.Context) (Instance, error) {
	return func(ctx context.Context) (Instance, error) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		stop, err := serveGws(ln)
		if err != nil {
			ln.Close()
			return nil, err
		}
		opt := &gws.ClientOption{
			Addr:               "ws://" + ln.Addr().String() + "/",
			ReadMaxPayloadSize: maxEchoMessage,
			HandshakeTimeout:   10 * time.Second,
		}
		if err := checkGwsEcho(ctx, opt, size); err != nil {
			stop()
			return nil, err
		}
		g := new(gwsCaller)
		conn, _, err := gws.NewClient(g, opt)
		if err != nil {
			stop()
			return nil, err
		}
		g.conn = conn
		go conn.ReadLoop()
		closeAll := func() error {
			_ = conn.WriteClose(1000, nil) // closes the socket too
			stop()
			return nil
		}
		return newCallRow(size, window, d, g.call, closeAll), nil
	}
}

// gwsEchoCheck is the handler of checkGwsEcho's connection: it hands on
// a copy of each echo's bytes, nil when the connection closes.
type gwsEchoCheck struct {
	gws.BuiltinEventHandler
	echoes chan []byte
}

func (g *gwsEchoCheck) OnMessage(_ *gws.Conn, m *gws.Message) {
	b := bytes.Clone(m.Data.Bytes())
	_ = m.Close()
	select {
	case g.echoes <- b:
	default: // an echo not asked for: the check has its answer already
	}
}

func (g *gwsEchoCheck) OnClose(*gws.Conn, error) {
	select {
	case g.echoes <- nil:
	default:
	}
}

// checkGwsEcho checks one echo's bytes through gws's client and server
// before a gws row's trials (checkCall). The row's own connection hands
// its callers the echo's length only, so as to add nothing to the timed
// loop; the check uses a connection of its own, from the same client to
// the same server, with a handler that keeps the bytes.
func checkGwsEcho(ctx context.Context, opt *gws.ClientOption, size int) error {
	h := &gwsEchoCheck{echoes: make(chan []byte, 1)}
	conn, _, err := gws.NewClient(h, opt)
	if err != nil {
		return err
	}
	defer conn.WriteClose(1000, nil) // closes the socket, ending ReadLoop
	go conn.ReadLoop()
	return checkCall(ctx, size, func(ctx context.Context, req []byte) ([]byte, error) {
		if err := conn.WriteMessage(gws.OpcodeBinary, req); err != nil {
			return nil, err
		}
		select {
		case b := <-h.echoes:
			if b == nil {
				return nil, errGwsClosed
			}
			return b, nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	})
}

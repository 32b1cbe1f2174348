package main

import (
	"bufio"
	"context"
	"net"
	"net/http"
	"sync"

	coder "github.com/coder/websocket"
	"github.com/gobwas/ws"
	gorilla "github.com/gorilla/websocket"
	"github.com/lesismal/nbio/nbhttp"
	nbws "github.com/lesismal/nbio/nbhttp/websocket"
	"github.com/lxzan/gws"
)

// The peers' room broadcasts. Each keeps its members in a memberList and
// sends a broadcast on the path its documentation or examples give.
func init() {
	all := []fanoutMode{fanoutPlain, fanoutDeflate, fanoutWindows}
	fanoutServers = append(fanoutServers,
		fanoutServer{Library: "gorilla/websocket", Role: Peer, Modes: all, Serve: serveGorillaRoom},
		fanoutServer{Library: "lxzan/gws", Role: Peer, Modes: all, Serve: serveGwsRoom},
		fanoutServer{Library: "gobwas/ws", Role: Peer, Modes: []fanoutMode{fanoutPlain}, Serve: serveGobwasRoom},
		// coder/websocket sends a compressed message as several frames, which
		// the members' frame counting does not follow: plain only.
		fanoutServer{Library: "coder/websocket", Role: Peer, Modes: []fanoutMode{fanoutPlain}, Serve: serveCoderRoom},
		fanoutServer{Library: "lesismal/nbio (epoll)", Role: Peer, Modes: []fanoutMode{fanoutPlain, fanoutDeflate}, Serve: serveNbioRoom},
	)
}

// fanoutThreshold is the smallest message a library compresses, set where
// a library has the knob so that all compress the 512-byte message alike
// (hotpath's default; gws's and coder's are 512).
const fanoutThreshold = 256

// memberList is a room's members, read by Broadcast under a shared lock.
type memberList[T any] struct {
	mu   sync.RWMutex
	list []T
}

func (l *memberList[T]) add(x T) {
	l.mu.Lock()
	l.list = append(l.list, x)
	l.mu.Unlock()
}

func (l *memberList[T]) Members() int {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return len(l.list)
}

func (l *memberList[T]) each(fn func(T) error) error {
	l.mu.RLock()
	defer l.mu.RUnlock()
	for _, x := range l.list {
		if err := fn(x); err != nil {
			return err
		}
	}
	return nil
}

// hubMember is a member with a writer goroutine fed by a channel, the hub
// of gorilla's and coder's chat examples. The channel holds 256 messages,
// as in gorilla's example; a full channel blocks the broadcaster rather
// than dropping the member (the examples drop it), so no message is lost.
type hubMember[M any] struct {
	send chan M
	done chan struct{}
}

func newHubMember[M any](write func(M) error) *hubMember[M] {
	h := &hubMember[M]{send: make(chan M, 256), done: make(chan struct{})}
	go func() {
		for {
			select {
			case m := <-h.send:
				if write(m) != nil {
					<-h.done
					return
				}
			case <-h.done:
				return
			}
		}
	}()
	return h
}

func (h *hubMember[M]) deliver(m M) error {
	select {
	case h.send <- m:
	case <-h.done:
	}
	return nil
}

// gorillaRoom: a PreparedMessage per broadcast, compressed at most once
// (gorilla caches its frames per compression setting), handed to each
// member's writer goroutine, which calls WritePreparedMessage.
type gorillaRoom struct {
	memberList[*hubMember[*gorilla.PreparedMessage]]
	stop  func()
	conns memberList[*gorilla.Conn]
}

func serveGorillaRoom(ln net.Listener, mode fanoutMode) (fanoutRoom, error) {
	room := &gorillaRoom{}
	up := gorilla.Upgrader{EnableCompression: mode != fanoutPlain}
	room.stop = serveHTTP(ln, func(w http.ResponseWriter, r *http.Request) {
		c, err := up.Upgrade(w, r, nil)
		if err != nil {
			return
		}
		room.conns.add(c)
		room.add(newHubMember(c.WritePreparedMessage))
		for { // read (and so answer control frames) until the member leaves
			if _, _, err := c.NextReader(); err != nil {
				return
			}
		}
	})
	return room, nil
}

func (r *gorillaRoom) Broadcast(p []byte) error {
	pm, err := gorilla.NewPreparedMessage(gorilla.BinaryMessage, p)
	if err != nil {
		return err
	}
	return r.each(func(m *hubMember[*gorilla.PreparedMessage]) error { return m.deliver(pm) })
}

func (r *gorillaRoom) Close() {
	r.stop()
	_ = r.each(func(m *hubMember[*gorilla.PreparedMessage]) error { close(m.done); return nil })
	_ = r.conns.each(func(c *gorilla.Conn) error { return c.Close() })
}

// gwsRoom: a gws.Broadcaster per broadcast, which frames (and compresses)
// the message once and queues it on each member's write queue.
type gwsRoom struct {
	memberList[*gws.Conn]
	ln net.Listener
}

func serveGwsRoom(ln net.Listener, mode fanoutMode) (fanoutRoom, error) {
	room := &gwsRoom{ln: ln}
	up := gws.NewUpgrader(&gws.BuiltinEventHandler{}, &gws.ServerOption{
		PermessageDeflate: gws.PermessageDeflate{Enabled: mode != fanoutPlain, Level: 1, Threshold: fanoutThreshold},
	})
	go acceptLoop(ln, func(conn net.Conn) {
		br := bufio.NewReaderSize(conn, 4<<10)
		r, err := http.ReadRequest(br)
		if err != nil {
			conn.Close()
			return
		}
		c, err := up.UpgradeFromConn(conn, br, r)
		if err != nil {
			return
		}
		room.add(c)
		c.ReadLoop()
	})
	return room, nil
}

func (r *gwsRoom) Broadcast(p []byte) error {
	b := gws.NewBroadcaster(gws.OpcodeBinary, p)
	defer b.Close()
	return r.each(func(c *gws.Conn) error { return b.Broadcast(c) })
}

func (r *gwsRoom) Close() {
	_ = r.ln.Close()
	_ = r.each(func(c *gws.Conn) error { return c.NetConn().Close() })
}

// gobwasRoom: one frame compiled per broadcast and written to every
// member's socket by the broadcaster itself: gobwas/ws leaves I/O to its
// caller, and this is the least any server can do per member.
type gobwasRoom struct {
	memberList[net.Conn]
	ln net.Listener
}

func serveGobwasRoom(ln net.Listener, _ fanoutMode) (fanoutRoom, error) {
	room := &gobwasRoom{ln: ln}
	go acceptLoop(ln, func(conn net.Conn) {
		if _, err := ws.Upgrade(conn); err != nil {
			conn.Close()
			return
		}
		room.add(conn)
	})
	return room, nil
}

func (r *gobwasRoom) Broadcast(p []byte) error {
	frame, err := ws.CompileFrame(ws.NewBinaryFrame(p))
	if err != nil {
		return err
	}
	return r.each(func(c net.Conn) error {
		_, err := c.Write(frame)
		return err
	})
}

func (r *gobwasRoom) Close() {
	_ = r.ln.Close()
	_ = r.each(func(c net.Conn) error { return c.Close() })
}

// coderRoom: coder/websocket has no prepared message; each member's writer
// goroutine calls Write, which frames (and compresses) the message for
// that member, as coder's chat example does.
type coderRoom struct {
	memberList[*hubMember[[]byte]]
	stop  func()
	conns memberList[*coder.Conn]
}

func serveCoderRoom(ln net.Listener, _ fanoutMode) (fanoutRoom, error) {
	room := &coderRoom{}
	opts := &coder.AcceptOptions{CompressionMode: coder.CompressionDisabled}
	room.stop = serveHTTP(ln, func(w http.ResponseWriter, r *http.Request) {
		c, err := coder.Accept(w, r, opts)
		if err != nil {
			return
		}
		ctx := c.CloseRead(context.Background())
		room.conns.add(c)
		room.add(newHubMember(func(p []byte) error { return c.Write(ctx, coder.MessageBinary, p) }))
		<-ctx.Done()
	})
	return room, nil
}

func (r *coderRoom) Broadcast(p []byte) error {
	return r.each(func(m *hubMember[[]byte]) error { return m.deliver(p) })
}

func (r *coderRoom) Close() {
	r.stop()
	_ = r.each(func(m *hubMember[[]byte]) error { close(m.done); return nil })
	_ = r.conns.each(func(c *coder.Conn) error { return c.CloseNow() })
}

// nbioRoom: nbio's own engine; WriteMessage frames (and compresses) the
// message for each member and queues it without blocking.
type nbioRoom struct {
	memberList[*nbws.Conn]
	engine *nbhttp.Engine
}

func serveNbioRoom(ln net.Listener, mode fanoutMode) (fanoutRoom, error) {
	room := &nbioRoom{}
	up := nbioUpgrader()
	if mode != fanoutPlain {
		up.EnableCompression(true)
		if err := up.SetCompressionLevel(1); err != nil {
			return nil, err
		}
	}
	up.OnOpen(func(c *nbws.Conn) { room.add(c) })
	room.engine = nbhttp.NewEngine(nbhttp.Config{
		Network: "tcp",
		Addrs:   []string{ln.Addr().String()},
		Listen:  func(string, string) (net.Listener, error) { return ln, nil },
		MaxLoad: 1 << 20,
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = up.Upgrade(w, r, nil)
		}),
	})
	if err := room.engine.Start(); err != nil {
		return nil, err
	}
	return room, nil
}

func (r *nbioRoom) Broadcast(p []byte) error {
	return r.each(func(c *nbws.Conn) error { return c.WriteMessage(nbws.BinaryMessage, p) })
}

func (r *nbioRoom) Close() { r.engine.Stop() }

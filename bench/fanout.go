package main

import (
	"bytes"
	"compress/flate"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// A fanoutServer is one library's room broadcast: it accepts members on a
// listener and sends one message to all of them on its fastest idiomatic
// path (a prepared or shared frame where the library has one). hotpath's
// row is an entry with Role Ours declared from its own file.
type fanoutServer struct {
	Library string
	Role    Role
	// Modes lists the compression modes the row runs in.
	Modes []fanoutMode
	// Serve accepts members on ln, compressing as mode asks.
	Serve func(ln net.Listener, mode fanoutMode) (fanoutRoom, error)
	// MessageSize is the payload length of the frame a member receives for
	// a broadcast of payload (an envelope may wrap it); nil: len(payload).
	MessageSize func(payload []byte) int
}

// A fanoutRoom is a running server and its members.
type fanoutRoom interface {
	// Members returns how many members have joined.
	Members() int
	// Broadcast sends payload to every member. It may return before the
	// message is written, as a library that queues does.
	Broadcast(payload []byte) error
	// Close stops the server and drops its connections.
	Close()
}

// fanoutMode is the compression of one case.
type fanoutMode int

const (
	fanoutPlain   fanoutMode = iota // no extension offered
	fanoutDeflate                   // every member offers permessage-deflate
	fanoutWindows                   // half offer server_max_window_bits=10, half 15
)

var fanoutModeNames = [...]string{fanoutPlain: "plain", fanoutDeflate: "permessage-deflate", fanoutWindows: "deflate, windows 10 and 15"}

func (m fanoutMode) String() string { return fanoutModeNames[m] }

// offer is the Sec-WebSocket-Extensions a member sends in this mode.
func (m fanoutMode) offer(member int) string {
	switch {
	case m == fanoutPlain:
		return ""
	case m == fanoutWindows && member%2 == 1:
		return "permessage-deflate; server_max_window_bits=10; client_max_window_bits"
	}
	return "permessage-deflate; client_max_window_bits"
}

var (
	fanoutServers []fanoutServer
	fanoutMembers = []int{50, 200, 1000}
	fanoutModes   = []fanoutMode{fanoutPlain, fanoutDeflate, fanoutWindows}
)

// fanoutSize is the size of the broadcast payload.
const fanoutSize = 512

// fanoutPayload is a 512-byte chat event in JSON: text that compresses
// the way real room traffic does (about 2× one-shot).
var fanoutPayload = func() []byte {
	b := []byte(`{"type":"message","room":"lobby","user":{"id":81723,"name":"ada.lovelace","avatar":"https://cdn.example.com/a/81723.png"},"sent":"2026-12-02T14:05:09.123Z","text":"`)
	words := strings.Fields("the analytical engine weaves algebraic patterns just as the jacquard loom weaves flowers and leaves we may say most aptly")
	for i := 0; len(b) < fanoutSize-40; i++ {
		b = append(b, words[(i*7)%len(words)]...)
		b = append(b, ' ')
	}
	b = append(b, `","reactions":{"+1":3,"heart":1},"seq":1}`...)
	for len(b) < fanoutSize {
		b = append(b, ' ')
	}
	return b[:fanoutSize]
}()

func init() {
	register(&Scenario{
		Number:   3,
		Name:     "fanout",
		Title:    "Room fan-out over loopback",
		Loopback: true,
		About: "A server holds a room of 50, 200 or 1,000 members, each a client connection over TCP on " +
			"127.0.0.1, and broadcasts a 512-byte JSON chat event to all of them, back to back, a fixed " +
			"number of times per trial (20,000 deliveries: 400, 100 or 20 broadcasts); msgs/s is broadcasts per second, timed " +
			"until the last member has read the last message. Each library uses its own broadcast " +
			"path: hotpath a room Emit (one wsframe.Prepared, compressed once per window by " +
			"deflatecache, referenced by every member's corkwriter outbox); gws its Broadcaster; " +
			"gorilla a PreparedMessage handed to a writer goroutine per member (its chat example's " +
			"hub); gobwas one compiled frame written to every socket; coder and nbio a write per " +
			"member (coder from a writer goroutine per member, as in its chat example; gobwas and " +
			"coder run plain only). Members " +
			"run the bench's own client, one reading goroutine each, and count every message: a " +
			"row is invalid unless every member received every message, and, with compression, " +
			"every one compressed. *permessage-deflate*: every member offers it as a browser " +
			"does; *windows 10 and 15*: half the members ask for server_max_window_bits=10, so a " +
			"server that honours it compresses each message twice (gorilla and gws do not " +
			"negotiate windows and compress once with their own; a 512-byte message fits either " +
			"window). One compressed message per case is inflated and checked. wire B/msg is what " +
			"a member receives per message, header included: hotpath's frame also carries its " +
			"envelope (room and event name, 13 bytes).",
		Metrics: []Metric{
			{Key: "rate", Unit: "msgs/s", Better: HigherIsBetter},
			{Key: "wire", Unit: "wire B/msg", Better: LowerIsBetter},
			{Key: "allocs", Unit: "allocs/msg", Better: LowerIsBetter},
		},
		Cases: fanoutCases,
	})
}

func fanoutCases(cfg Config) ([]Case, error) {
	deliveries := 20_000
	members := fanoutMembers
	if cfg.Quick {
		deliveries, members = 10_000, []int{50, 200}
	}
	var cases []Case
	for _, mode := range fanoutModes {
		for _, n := range members {
			c := Case{Label: fanoutLabel(n, mode)}
			for _, srv := range fanoutServers {
				if !hasMode(srv.Modes, mode) {
					continue
				}
				c.Rows = append(c.Rows, Row{Library: srv.Library, Role: srv.Role, Open: openFanoutRow(srv, mode, n, max(deliveries/n, 10))})
			}
			cases = append(cases, c)
		}
	}
	return cases, nil
}

func fanoutLabel(members int, mode fanoutMode) string {
	return fmt.Sprintf("%s members, %s", groupThousands(int64(members)), mode)
}

func hasMode(modes []fanoutMode, m fanoutMode) bool {
	for _, x := range modes {
		if x == m {
			return true
		}
	}
	return false
}

// fanoutMember is one member: a client connection and the goroutine that
// reads and counts what it receives.
type fanoutMember struct {
	c *wsClient
	// counted is the number of broadcast messages received: frames of the
	// broadcast's size, or, with compression, compressed frames.
	counted atomic.Int64
	// plain counts broadcast-sized frames that arrived uncompressed on a
	// compressed row: the library did not compress them.
	plain atomic.Int64
	// capture, when set, receives a copy of the next counted payload.
	capture atomic.Pointer[chan []byte]
}

// fanoutRow is a running room with its members, kept across the trials of
// a case.
type fanoutRow struct {
	room     fanoutRoom
	members  []*fanoutMember
	msgs     int // broadcasts per trial
	compress bool

	delivered atomic.Int64 // counted messages, all members
	wireBytes atomic.Int64 // bytes of counted frames, all members
	others    atomic.Int64 // bytes of frames not counted (presence events)
	want      atomic.Int64 // delivered count that ends the trial
	reached   chan struct{}
	wg        sync.WaitGroup
}

func openFanoutRow(srv fanoutServer, mode fanoutMode, n, msgs int) func(context.Context) (Instance, error) {
	return func(ctx context.Context) (Instance, error) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		room, err := srv.Serve(ln, mode)
		if err != nil {
			ln.Close()
			return nil, err
		}
		size := fanoutSize
		if srv.MessageSize != nil {
			size = srv.MessageSize(fanoutPayload)
		}
		r := &fanoutRow{room: room, msgs: msgs, compress: mode != fanoutPlain, reached: make(chan struct{}, 1)}
		if err := r.join(ctx, ln.Addr().String(), n, mode, size); err != nil {
			r.Close()
			return nil, err
		}
		if err := r.check(mode); err != nil {
			r.Close()
			return nil, err
		}
		return r, nil
	}
}

// join connects n members, offering mode's extension, starts their
// readers, and waits until the server counts them all and the traffic of
// joining (presence events) has stopped.
func (r *fanoutRow) join(ctx context.Context, addr string, n int, mode fanoutMode, size int) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	r.members = make([]*fanoutMember, n)
	var (
		next     atomic.Int64
		firstErr error
		errOnce  sync.Once
		wg       sync.WaitGroup
	)
	for range idleDialers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= n || ctx.Err() != nil {
					return
				}
				c, err := dialWS(ctx, addr, dialOptions{
					Local:      net.IPv4(127, 0, 0, byte(2+i%idleSources)),
					Handshake:  true,
					ReadBuffer: 16 << 10,
					Extensions: mode.offer(i),
				})
				if err == nil && mode != fanoutPlain && !strings.HasPrefix(c.extensions, "permessage-deflate") {
					c.closeNow()
					err = fmt.Errorf("server declined permessage-deflate (answer %q)", c.extensions)
				}
				if err != nil {
					errOnce.Do(func() { firstErr = err })
					return
				}
				r.members[i] = &fanoutMember{c: c}
			}
		}()
	}
	wg.Wait()
	if firstErr != nil {
		return firstErr
	}
	for _, m := range r.members {
		r.wg.Add(1)
		go r.read(m, size)
	}
	for r.room.Members() < n {
		if ctx.Err() != nil {
			return fmt.Errorf("%d of %d members joined", r.room.Members(), n)
		}
		time.Sleep(5 * time.Millisecond)
	}
	return r.settle(ctx)
}

// settle waits until no member has read anything for 100 ms: a server
// that tells its members about every join has finished doing so.
func (r *fanoutRow) settle(ctx context.Context) error {
	last, quiet := r.readBytes(), 0
	for quiet < 4 {
		select {
		case <-ctx.Done():
			return errors.New("members kept receiving after joining")
		case <-time.After(25 * time.Millisecond):
		}
		now := r.readBytes()
		if now == last {
			quiet++
		} else {
			last, quiet = now, 0
		}
	}
	return nil
}

// readBytes is how far the members' readers have got, all together.
func (r *fanoutRow) readBytes() int64 { return r.wireBytes.Load() + r.others.Load() }

// read counts the member's messages until its connection ends. Every
// server here sends each broadcast as one frame; a frame of another size
// (a presence event), or uncompressed on a compressed row, is not
// counted.
func (r *fanoutRow) read(m *fanoutMember, size int) {
	defer r.wg.Done()
	for {
		f, err := m.c.readFrame()
		if err != nil {
			return
		}
		if f.opcode == 0x9 {
			// RFC 6455 §5.5.2: "Upon receipt of a Ping frame, an endpoint
			// MUST send a Pong frame in response". A server with a
			// keepalive (compat pings after 25 s of silence and drops
			// the connection after 60) would otherwise drop a member
			// that only listens.
			if _, err := m.c.conn.Write(appendClientFrame(nil, 0xA, f.data, newMaskKey())); err != nil {
				return
			}
			continue
		}
		switch {
		case r.compress && f.rsv1:
		case f.payload == size:
			if r.compress {
				m.plain.Add(1)
				continue
			}
		default:
			r.others.Add(int64(f.wire))
			continue
		}
		if ch := m.capture.Swap(nil); ch != nil {
			*ch <- append([]byte(nil), f.data...)
		}
		m.counted.Add(1)
		r.wireBytes.Add(int64(f.wire))
		if r.delivered.Add(1) == r.want.Load() {
			select {
			case r.reached <- struct{}{}:
			default:
			}
		}
	}
}

// check broadcasts one message and inflates what two members received
// (one per window when there are two): it must hold the payload.
func (r *fanoutRow) check(mode fanoutMode) error {
	watch := []int{0}
	if mode == fanoutWindows {
		watch = append(watch, 1)
	}
	chans := make([]chan []byte, len(watch))
	for i, w := range watch {
		chans[i] = make(chan []byte, 1)
		r.members[w].capture.Store(&chans[i])
	}
	out, err := r.run(1)
	if err != nil {
		return err
	}
	if out.Invalid != "" {
		return errors.New(out.Invalid)
	}
	for i, ch := range chans {
		var got []byte
		select {
		case got = <-ch:
		case <-time.After(5 * time.Second):
			return fmt.Errorf("member %d captured nothing", watch[i])
		}
		if r.compress {
			if got, err = inflateMessage(got); err != nil {
				return fmt.Errorf("member %d: %w", watch[i], err)
			}
		}
		if !bytes.Contains(got, fanoutPayload) {
			return fmt.Errorf("member %d received a message without the payload", watch[i])
		}
	}
	return nil
}

// inflateMessage inflates a permessage-deflate payload: RFC 7692 §7.2.2,
// "Append 4 octets of 0x00 0x00 0xff 0xff to the tail end of the payload of
// the message" and inflate.
func inflateMessage(p []byte) ([]byte, error) {
	zr := flate.NewReader(io.MultiReader(bytes.NewReader(p), bytes.NewReader([]byte{0, 0, 0xff, 0xff})))
	out, err := io.ReadAll(zr)
	if errors.Is(err, io.ErrUnexpectedEOF) {
		err = nil // no final block: the stream ends where the message does
	}
	if err != nil {
		return nil, fmt.Errorf("inflating: %w", err)
	}
	return out, nil
}

func (r *fanoutRow) Trial(context.Context) (Outcome, error) { return r.run(r.msgs) }

// run broadcasts msgs messages back to back and waits until every member
// has counted them all, or until deliveries stop arriving for two seconds.
func (r *fanoutRow) run(msgs int) (Outcome, error) {
	n := len(r.members)
	base := make([]int64, n)
	for i, m := range r.members {
		base[i] = m.counted.Load()
	}
	plain0, wire0 := r.plainCount(), r.wireBytes.Load()
	d0 := r.delivered.Load()
	r.want.Store(d0 + int64(msgs*n))
	select { // a stale signal from a trial that timed out
	case <-r.reached:
	default:
	}
	runtime.GC()
	a0 := readAllocs()
	start := time.Now()
	for range msgs {
		if err := r.room.Broadcast(fanoutPayload); err != nil {
			return Outcome{}, err
		}
	}
	complete := r.delivered.Load() >= r.want.Load()
	for last := r.delivered.Load(); !complete; {
		select {
		case <-r.reached:
			complete = true
		case <-time.After(2 * time.Second):
			now := r.delivered.Load()
			complete = now >= r.want.Load()
			if now == last && !complete {
				return r.incomplete(base, msgs), nil
			}
			last = now
		}
	}
	elapsed := time.Since(start)
	a1 := readAllocs()
	total := float64(msgs * n)
	out := Outcome{Values: map[string]float64{
		"rate":   float64(msgs) / elapsed.Seconds(),
		"wire":   float64(r.wireBytes.Load()-wire0) / total,
		"allocs": float64(a1.objects-a0.objects) / float64(msgs),
	}}
	for i, m := range r.members {
		if got := m.counted.Load() - base[i]; got != int64(msgs) {
			out.Invalid = fmt.Sprintf("member %d received %d of %d messages", i, got, msgs)
			break
		}
	}
	if p := r.plainCount() - plain0; p > 0 {
		out.Invalid = fmt.Sprintf("%d messages arrived uncompressed", p)
	}
	return out, nil
}

// incomplete is the outcome of a trial whose deliveries stopped short.
func (r *fanoutRow) incomplete(base []int64, msgs int) Outcome {
	missing, short := int64(0), 0
	for i, m := range r.members {
		if got := m.counted.Load() - base[i]; got < int64(msgs) {
			missing += int64(msgs) - got
			short++
		}
	}
	return Outcome{
		Values:  map[string]float64{"rate": 0, "wire": 0, "allocs": 0},
		Invalid: fmt.Sprintf("%d messages never reached %d of %d members", missing, short, len(r.members)),
	}
}

func (r *fanoutRow) plainCount() int64 {
	var p int64
	for _, m := range r.members {
		p += m.plain.Load()
	}
	return p
}

func (r *fanoutRow) Close() error {
	for _, m := range r.members {
		if m != nil {
			m.c.closeNow()
		}
	}
	r.room.Close()
	r.wg.Wait()
	return nil
}

// frameInfo describes one frame a member read.
type frameInfo struct {
	opcode  byte
	rsv1    bool
	payload int    // payload length
	wire    int    // header and payload
	data    []byte // the payload, valid until the next read
}

// readFrame reads one frame and skips its payload, returning a view of it
// when it fits the read buffer. Every fan-out server sends a broadcast as
// one frame, so a member reads frames, not messages.
func (c *wsClient) readFrame() (frameInfo, error) {
	hdr, err := c.br.Peek(2)
	if err != nil {
		return frameInfo{}, err
	}
	f := frameInfo{opcode: hdr[0] & 0x0f, rsv1: hdr[0]&0x40 != 0}
	size, hlen := uint64(hdr[1]&0x7f), 2
	switch size {
	case 126:
		hlen = 4
	case 127:
		hlen = 10
	}
	if hdr[1]&0x80 != 0 {
		hlen += 4
	}
	if hdr, err = c.br.Peek(hlen); err != nil {
		return frameInfo{}, err
	}
	switch size {
	case 126:
		size = uint64(binary.BigEndian.Uint16(hdr[2:4]))
	case 127:
		size = binary.BigEndian.Uint64(hdr[2:10])
	}
	if size > maxClientMessage {
		return frameInfo{}, errMessageTooLarge
	}
	if hdr[0]&0x0f == 0x8 {
		return frameInfo{}, closeError{code: 1005}
	}
	f.payload, f.wire = int(size), hlen+int(size)
	if f.wire <= c.br.Size() {
		if b, err := c.br.Peek(f.wire); err == nil {
			f.data = b[hlen:]
		}
	}
	if _, err := c.br.Discard(f.wire); err != nil {
		return frameInfo{}, err
	}
	return f, nil
}

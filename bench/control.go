package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hotpath-go/hotpath/corkwriter"
	"github.com/hotpath-go/hotpath/dispatch"
	"github.com/hotpath-go/hotpath/emitter"
	"github.com/hotpath-go/hotpath/scheduler"
)

// controlOp is one row of the control path: setup returns the operation
// timed (n times per call) and what to release afterwards.
type controlOp struct {
	Library string
	Role    Role
	Setup   func() (op func(n int) error, release func(), err error)
}

type controlCase struct {
	label string
	rows  []controlOp
}

func init() {
	register(&Scenario{
		Number: 7,
		Name:   "control",
		Title:  "Control path",
		About: "The small operations every message or connection pays for, each against what a server " +
			"would write without hotpath, in process. Deadlines (with 1,024 others pending): arming " +
			"and cancelling a 15 s call timeout " +
			"with hotpath's scheduler (one runtime timer per scheduler, 1 ms buckets) against " +
			"time.AfterFunc and Stop; pushing an idle deadline out on every read (scheduler " +
			"ResetAfter with 1 s buckets, the granularity its README gives for idle deadlines, " +
			"against time.Timer.Reset). Events: emitting to 1 and to 8 listeners with " +
			"hotpath's emitter against a slice of listeners behind a sync.RWMutex. Dispatch: the " +
			"packet-kind branch (dispatch.Dispatcher against a switch and a map of handlers) and " +
			"routing one of 64 method names read from the wire (dispatch.Router against a map " +
			"and a sorted table), each with a real handler call. Syscalls: a turn that answers 64 " +
			"calls of 40 bytes on a TCP socket over loopback, written with a corkwriter turn " +
			"(one writev), a conn.Write per answer, a bufio.Writer flushed once, and net.Buffers; " +
			"syscalls/op is counted by the kernel (write calls in /proc/self/io), so every row is " +
			"counted the same way.",
		Metrics: []Metric{
			{Key: "time", Unit: "ns/op", Better: LowerIsBetter},
			{Key: "allocs", Unit: "allocs/op", Better: LowerIsBetter},
			{Key: "syscalls", Unit: "syscalls/op", Better: LowerIsBetter},
		},
		Cases: controlCases,
	})
}

func controlCases(cfg Config) ([]Case, error) {
	target := 100 * time.Millisecond
	if cfg.Quick {
		target = 10 * time.Millisecond
	}
	specs := []controlCase{
		{"deadline: arm + cancel", []controlOp{
			{"hotpath scheduler", Ours, setupSchedulerArm},
			{"time.AfterFunc + Stop", Peer, setupAfterFunc},
		}},
		{"deadline: push out on a read", []controlOp{
			{"hotpath scheduler (ResetAfter)", Ours, setupSchedulerReset},
			{"time.Timer.Reset", Peer, setupTimerReset},
		}},
		{"emit to 1 listener", []controlOp{
			{"hotpath emitter", Ours, setupEmitter(1)},
			{"RWMutex + slice", Peer, setupMutexEmitter(1)},
		}},
		{"emit to 8 listeners", []controlOp{
			{"hotpath emitter", Ours, setupEmitter(8)},
			{"RWMutex + slice", Peer, setupMutexEmitter(8)},
		}},
		{"dispatch a packet kind", []controlOp{
			{"hotpath dispatch.Dispatcher", Ours, setupDispatcher},
			{"switch", Peer, setupKindSwitch},
			{"map of handlers", Peer, setupKindMap},
		}},
		{"route 1 of 64 methods", []controlOp{
			{"hotpath dispatch.Router", Ours, setupRouter},
			{"map[string]", Peer, setupRouteMap},
			{"sorted table", Peer, setupRouteSorted},
		}},
		{"64 answers of 40 B in one turn", []controlOp{
			{"hotpath corkwriter", Ours, setupTurn(turnCork)},
			{"conn.Write per answer", Peer, setupTurn(turnWrites)},
			{"bufio.Writer", Peer, setupTurn(turnBufio)},
			{"net.Buffers", Peer, setupTurn(turnBuffers)},
		}},
	}
	var cases []Case
	for _, cc := range specs {
		c := Case{Label: cc.label}
		for _, row := range cc.rows {
			c.Rows = append(c.Rows, Row{Library: row.Library, Role: row.Role, Open: openControlRow(row, target)})
		}
		cases = append(cases, c)
	}
	return cases, nil
}

func openControlRow(row controlOp, target time.Duration) func(context.Context) (Instance, error) {
	return func(context.Context) (Instance, error) {
		op, release, err := row.Setup()
		if err != nil {
			return nil, err
		}
		inst := &controlRow{op: op, release: release, target: target}
		return inst, nil
	}
}

type controlRow struct {
	op      func(n int) error
	release func()
	target  time.Duration
}

func (c *controlRow) Trial(context.Context) (Outcome, error) {
	var syscalls float64
	res, err := measureLoop(c.target, 100_000_000, func(n int) error {
		w0 := writeSyscalls()
		err := c.op(n)
		syscalls = float64(writeSyscalls()-w0) / float64(n)
		return err
	})
	if err != nil {
		return Outcome{}, err
	}
	return Outcome{Values: map[string]float64{"time": res.NsPerOp, "allocs": res.AllocsPerOp, "syscalls": syscalls}}, nil
}

func (c *controlRow) Close() error {
	if c.release != nil {
		c.release()
	}
	return nil
}

// writeSyscalls returns the process's count of write system calls
// (write, writev, ...) from /proc/self/io, or 0 where there is none.
func writeSyscalls() int64 {
	b, err := os.ReadFile("/proc/self/io")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "syscw: "); ok {
			n, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			return n
		}
	}
	return 0
}

// The deadline rows run with 1,024 other deadlines pending 10 to 20 s
// ahead, as on a server with calls in flight, and arm timeouts 15 s ahead,
// spread over a second as timeouts armed at different moments are: nothing
// fires during a trial.
const (
	pendingDeadlines = 1024
	callTimeout      = 15 * time.Second
)

func pendingIn(k int) time.Duration {
	return 10*time.Second + time.Duration(k)*(10*time.Second/pendingDeadlines)
}

func spread(i int) time.Duration { return time.Duration(i&1023) * time.Millisecond }

func setupSchedulerArm() (func(int) error, func(), error) {
	s := scheduler.New(func([]int) {})
	for k := range pendingDeadlines {
		s.ArmAfter(pendingIn(k), k)
	}
	return func(n int) error {
		for i := range n {
			s.Cancel(s.ArmAfter(callTimeout+spread(i), i))
		}
		return nil
	}, s.Stop, nil
}

func setupAfterFunc() (func(int) error, func(), error) {
	f := func() {}
	pending := make([]*time.Timer, pendingDeadlines)
	for k := range pending {
		pending[k] = time.AfterFunc(pendingIn(k), f)
	}
	release := func() {
		for _, t := range pending {
			t.Stop()
		}
	}
	return func(n int) error {
		for i := range n {
			time.AfterFunc(callTimeout+spread(i), f).Stop()
		}
		return nil
	}, release, nil
}

// setupSchedulerReset uses 1 s buckets, as an idle deadline is armed (the
// scheduler's README): a reset within the deadline's bucket is cheap, and
// that coarseness is what the row measures against Timer.Reset.
func setupSchedulerReset() (func(int) error, func(), error) {
	s := scheduler.New(func([]int) {}, scheduler.WithGranularity(time.Second))
	for k := range pendingDeadlines {
		s.ArmAfter(pendingIn(k), k)
	}
	h := s.ArmAfter(callTimeout, -1)
	return func(n int) error {
		for range n {
			s.ResetAfter(h, callTimeout)
		}
		return nil
	}, s.Stop, nil
}

func setupTimerReset() (func(int) error, func(), error) {
	f := func() {}
	pending := make([]*time.Timer, pendingDeadlines)
	for k := range pending {
		pending[k] = time.AfterFunc(pendingIn(k), f)
	}
	t := time.AfterFunc(callTimeout, f)
	release := func() {
		t.Stop()
		for _, p := range pending {
			p.Stop()
		}
	}
	return func(n int) error {
		for range n {
			t.Reset(callTimeout)
		}
		return nil
	}, release, nil
}

// roomEvent is what the emit rows raise: a value, as a join or leave is.
type roomEvent struct {
	room    string
	members int
}

var emitSink int // written by listeners so their work is not optimized away

func setupEmitter(listeners int) func() (func(int) error, func(), error) {
	return func() (func(int) error, func(), error) {
		var e emitter.Emitter[roomEvent]
		for range listeners {
			e.On(func(ev roomEvent) { emitSink += ev.members })
		}
		ev := roomEvent{room: "lobby", members: 3}
		return func(n int) error {
			for range n {
				e.Emit(ev)
			}
			return nil
		}, nil, nil
	}
}

// mutexEmitter is the emitter a server writes by hand: listeners in a
// slice, read under an RWMutex on every emit.
type mutexEmitter struct {
	mu        sync.RWMutex
	listeners []func(roomEvent)
}

func (m *mutexEmitter) on(fn func(roomEvent)) {
	m.mu.Lock()
	m.listeners = append(m.listeners, fn)
	m.mu.Unlock()
}

func (m *mutexEmitter) emit(ev roomEvent) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	for _, fn := range m.listeners {
		fn(ev)
	}
}

func setupMutexEmitter(listeners int) func() (func(int) error, func(), error) {
	return func() (func(int) error, func(), error) {
		var e mutexEmitter
		for range listeners {
			e.on(func(ev roomEvent) { emitSink += ev.members })
		}
		ev := roomEvent{room: "lobby", members: 3}
		return func(n int) error {
			for range n {
				e.emit(ev)
			}
			return nil
		}, nil, nil
	}
}

// kindConn is the per-connection value the dispatch rows hand their
// handlers; each handler does a little real work with the body.
type kindConn struct{ bytes int }

func handleBody(c *kindConn, body []byte) error { c.bytes += len(body); return nil }

// dispatchPackets is a fixed mix of packet kinds as a server receives
// them: mostly calls, some events, joins, pings and answers.
var dispatchPackets = func() [][]byte {
	kinds := []dispatch.Kind{dispatch.KindCall, dispatch.KindCall, dispatch.KindCall, dispatch.KindEvent, dispatch.KindCall,
		dispatch.KindJoin, dispatch.KindCall, dispatch.KindPing, dispatch.KindCall, dispatch.KindAnswer, dispatch.KindEmit, dispatch.KindCall}
	out := make([][]byte, len(kinds))
	for i, k := range kinds {
		out[i] = append([]byte{byte(k)}, "body of a packet"...)
	}
	return out
}()

func setupDispatcher() (func(int) error, func(), error) {
	h := handleBody
	d := dispatch.NewDispatcher(dispatch.Handlers[*kindConn]{Call: h, Event: h, Answer: h, Batch: h, Ping: h, Pong: h, Join: h, Leave: h, Emit: h, Capabilities: h})
	c := &kindConn{}
	return func(n int) error {
		for i := range n {
			if err := d.Dispatch(c, dispatchPackets[i%len(dispatchPackets)]); err != nil {
				return err
			}
		}
		return nil
	}, nil, nil
}

func setupKindSwitch() (func(int) error, func(), error) {
	c := &kindConn{}
	dispatchOne := func(p []byte) error {
		if len(p) == 0 {
			return dispatch.ErrEmptyPacket
		}
		body := p[1:]
		switch dispatch.Kind(p[0]) {
		case dispatch.KindCall, dispatch.KindEvent, dispatch.KindAnswer, dispatch.KindBatch, dispatch.KindPing,
			dispatch.KindPong, dispatch.KindJoin, dispatch.KindLeave, dispatch.KindEmit, dispatch.KindCapabilities:
			return handleBody(c, body)
		}
		return fmt.Errorf("unknown kind %d", p[0])
	}
	return func(n int) error {
		for i := range n {
			if err := dispatchOne(dispatchPackets[i%len(dispatchPackets)]); err != nil {
				return err
			}
		}
		return nil
	}, nil, nil
}

func setupKindMap() (func(int) error, func(), error) {
	c := &kindConn{}
	handlers := map[dispatch.Kind]func(*kindConn, []byte) error{}
	for k := dispatch.KindCall; k <= dispatch.KindCapabilities; k++ {
		if k != dispatch.KindResult && k != dispatch.KindError && k != dispatch.KindAsk {
			handlers[k] = handleBody
		}
	}
	return func(n int) error {
		for i := range n {
			p := dispatchPackets[i%len(dispatchPackets)]
			h, ok := handlers[dispatch.Kind(p[0])]
			if !ok {
				return fmt.Errorf("unknown kind %d", p[0])
			}
			if err := h(c, p[1:]); err != nil {
				return err
			}
		}
		return nil
	}, nil, nil
}

// methodNames are 64 method names of a realistic API; lookups take them
// in a fixed shuffled order, as bytes read from the wire.
var methodNames, methodLookups = func() ([]string, [][]byte) {
	units := []string{"chat", "room", "user", "auth", "presence", "ticker", "order", "billing"}
	verbs := []string{"get", "list", "create", "update", "delete", "subscribe", "unsubscribe", "search"}
	var names []string
	for _, u := range units {
		for _, v := range verbs {
			names = append(names, u+"/"+v)
		}
	}
	lookups := make([][]byte, 0, 256)
	for i := range 256 {
		lookups = append(lookups, []byte(names[(i*37+11)%len(names)]))
	}
	return names, lookups
}()

type methodHandler func(c *kindConn, body []byte) error

func setupRouter() (func(int) error, func(), error) {
	routes := make([]dispatch.Route[methodHandler], len(methodNames))
	for i, name := range methodNames {
		routes[i] = dispatch.Route[methodHandler]{Name: name, Handler: handleBody}
	}
	r, err := dispatch.NewRouter(routes)
	if err != nil {
		return nil, nil, err
	}
	c := &kindConn{}
	return func(n int) error {
		for i := range n {
			name := methodLookups[i%len(methodLookups)]
			h, err := r.Lookup(name)
			if err != nil {
				return err
			}
			if err := h(c, name); err != nil {
				return err
			}
		}
		return nil
	}, nil, nil
}

func setupRouteMap() (func(int) error, func(), error) {
	m := map[string]methodHandler{}
	for _, name := range methodNames {
		m[name] = handleBody
	}
	c := &kindConn{}
	return func(n int) error {
		for i := range n {
			name := methodLookups[i%len(methodLookups)]
			h, ok := m[string(name)] // the compiler does not allocate for this conversion
			if !ok {
				return fmt.Errorf("no method %q", name)
			}
			if err := h(c, name); err != nil {
				return err
			}
		}
		return nil
	}, nil, nil
}

func setupRouteSorted() (func(int) error, func(), error) {
	names := append([]string(nil), methodNames...)
	sort.Strings(names)
	handlers := make([]methodHandler, len(names))
	for i := range handlers {
		handlers[i] = handleBody
	}
	c := &kindConn{}
	return func(n int) error {
		for i := range n {
			name := methodLookups[i%len(methodLookups)]
			j := sort.Search(len(names), func(j int) bool { return names[j] >= string(name) })
			if j == len(names) || names[j] != string(name) {
				return fmt.Errorf("no method %q", name)
			}
			if err := handlers[j](c, name); err != nil {
				return err
			}
		}
		return nil
	}, nil, nil
}

const (
	turnAnswers    = 64
	turnAnswerSize = 40
)

// turnWriter sends one turn's answers on conn; it is made once per row.
type turnWriter func(conn net.Conn) (writeTurn func(answers [][]byte) error, err error)

func turnCork(conn net.Conn) (func([][]byte) error, error) {
	w := corkwriter.NewWriter(conn, nil)
	return func(answers [][]byte) error {
		w.Cork()
		for _, a := range answers {
			if _, err := w.Write(a); err != nil {
				return err
			}
		}
		return w.Uncork()
	}, nil
}

func turnWrites(conn net.Conn) (func([][]byte) error, error) {
	return func(answers [][]byte) error {
		for _, a := range answers {
			if _, err := conn.Write(a); err != nil {
				return err
			}
		}
		return nil
	}, nil
}

func turnBufio(conn net.Conn) (func([][]byte) error, error) {
	bw := bufio.NewWriter(conn)
	return func(answers [][]byte) error {
		for _, a := range answers {
			if _, err := bw.Write(a); err != nil {
				return err
			}
		}
		return bw.Flush()
	}, nil
}

func turnBuffers(conn net.Conn) (func([][]byte) error, error) {
	return func(answers [][]byte) error {
		bufs := net.Buffers(answers)
		_, err := bufs.WriteTo(conn)
		return err
	}, nil
}

// setupTurn connects a TCP pair over loopback whose far end drains
// everything, and times one turn of 64 answers per operation.
func setupTurn(tw turnWriter) func() (func(int) error, func(), error) {
	return func() (func(int) error, func(), error) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, nil, err
		}
		defer ln.Close()
		conn, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			return nil, nil, err
		}
		far, err := ln.Accept()
		if err != nil {
			conn.Close()
			return nil, nil, err
		}
		go func() { _, _ = io.Copy(io.Discard, far) }()
		write, err := tw(conn)
		if err != nil {
			conn.Close()
			far.Close()
			return nil, nil, err
		}
		answers := make([][]byte, turnAnswers)
		for i := range answers {
			answers[i] = make([]byte, turnAnswerSize)
		}
		scratch := make([][]byte, turnAnswers)
		release := func() { conn.Close(); far.Close() }
		return func(n int) error {
			for range n {
				copy(scratch, answers) // net.Buffers consumes its slice
				if err := write(scratch); err != nil {
					return err
				}
			}
			return nil
		}, release, nil
	}
}

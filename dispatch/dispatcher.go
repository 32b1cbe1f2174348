package dispatch

import "strconv"

// Handler handles the body of one packet (the bytes after the kind) for a
// connection-scoped value c, such as the connection itself. The body aliases
// the packet: a handler that keeps it past its return must copy it.
type Handler[C any] func(c C, body []byte) error

// Handlers names a handler per packet kind. A nil field leaves that kind
// unhandled: Dispatch returns an *UnhandledKindError for it, which is how a
// server refuses kinds only a client may receive (Result, Ask) and the other
// way round.
type Handlers[C any] struct {
	Call         Handler[C]
	Result       Handler[C]
	Error        Handler[C]
	Event        Handler[C]
	Ask          Handler[C]
	Answer       Handler[C]
	Batch        Handler[C]
	Ping         Handler[C]
	Pong         Handler[C]
	Join         Handler[C]
	Leave        Handler[C]
	Emit         Handler[C]
	Capabilities Handler[C]
}

// Dispatcher calls the handler for a packet's kind. It is a table of
// handlers indexed by the kind byte: BenchmarkKindShapes measured it against
// a switch, an if/else chain and an interface method per kind. With a
// predictable kind the table was the fastest (tied once with the if/else
// chain) and its cost does not depend on the kind; under an unpredictable
// mix of kinds the if/else chain was 7% faster. The README has the figures.
//
// A Dispatcher is immutable once built and safe for concurrent use. Build
// it with NewDispatcher: the zero value is not usable.
type Dispatcher[C any] struct {
	// table holds a handler for every value below numKinds; kinds without
	// a handler, and kind 0, hold one that returns the matching error, so
	// Dispatch needs no nil check.
	table [numKinds]Handler[C]
}

// NewDispatcher returns a Dispatcher that calls the handlers in h.
func NewDispatcher[C any](h Handlers[C]) *Dispatcher[C] {
	d := new(Dispatcher[C])
	for k, fn := range [numKinds]Handler[C]{
		KindCall:         h.Call,
		KindResult:       h.Result,
		KindError:        h.Error,
		KindEvent:        h.Event,
		KindAsk:          h.Ask,
		KindAnswer:       h.Answer,
		KindBatch:        h.Batch,
		KindPing:         h.Ping,
		KindPong:         h.Pong,
		KindJoin:         h.Join,
		KindLeave:        h.Leave,
		KindEmit:         h.Emit,
		KindCapabilities: h.Capabilities,
	} {
		kind := Kind(k)
		switch {
		case fn != nil:
			d.table[k] = fn
		case !kind.Valid():
			d.table[k] = func(C, []byte) error { return &UnknownKindError{Kind: kind} }
		default:
			d.table[k] = func(C, []byte) error { return &UnhandledKindError{Kind: kind} }
		}
	}
	return d
}

// Dispatch calls the handler for the kind of packet with c and the body
// after the kind byte, and returns what the handler returns. It returns
// ErrEmptyPacket for an empty packet, an *UnknownKindError for a first byte
// that is not a kind, and an *UnhandledKindError for a kind with no handler.
func (d *Dispatcher[C]) Dispatch(c C, packet []byte) error {
	if len(packet) == 0 {
		return ErrEmptyPacket
	}
	return d.DispatchKind(c, Kind(packet[0]), packet[1:])
}

// DispatchKind calls the handler for kind k with c and body, for a caller
// that has already split the kind from the body (to clear a flag bit it
// keeps beside the kind, or to inflate the body first). Its errors are
// those of Dispatch.
func (d *Dispatcher[C]) DispatchKind(c C, k Kind, body []byte) error {
	if int(k) < len(d.table) {
		return d.table[k](c, body)
	}
	return &UnknownKindError{Kind: k}
}

// UnhandledKindError reports a packet of a valid kind that the Dispatcher
// was built without a handler for.
type UnhandledKindError struct {
	Kind Kind
}

// Error names the kind by number and name.
func (e *UnhandledKindError) Error() string {
	return "dispatch: no handler for packet kind " + strconv.Itoa(int(e.Kind)) + " (" + e.Kind.String() + ")"
}

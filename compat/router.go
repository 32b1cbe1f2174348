package compat

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"

	"github.com/hotpath-go/hotpath/dispatch"
)

// A Router holds the methods and client events a server serves. Register
// everything before passing the Router to NewServer; after that the Router
// is frozen and registering panics, since a running server's routes are
// immutable (a lookup takes no lock).
type Router struct {
	mu      sync.Mutex
	frozen  bool
	methods []*method
	events  []*eventHandler
	streams []*streamMethod

	methodTable *dispatch.Router[*method]
	eventTable  *dispatch.Router[*eventHandler]
	streamTable *dispatch.Router[*streamMethod]
}

// NewRouter returns an empty Router.
func NewRouter() *Router { return &Router{} }

// method is one registered RPC method, its types erased behind call.
type method struct {
	name  string
	async bool
	req   reflect.Type
	resp  reflect.Type
	// call decodes payload with codec, runs the handler and appends the
	// encoded response to dst. A decoding failure is ErrInvalidParams.
	call func(ctx context.Context, codec Codec, payload, dst []byte) ([]byte, error)
}

type eventHandler struct {
	name string
	typ  reflect.Type
	call func(ctx context.Context, codec Codec, payload []byte) error
}

// MethodOption configures one method.
type MethodOption func(*method)

// Async runs the method's handler on a goroutine of its own instead of on
// the connection's read loop. Choose it for a handler that blocks: one that
// waits on I/O, sleeps, or asks the client something (an Ask's answer is
// read by the loop a synchronous handler would be holding). Async calls
// count against the connection's MaxInFlight; their answers still leave
// through the connection's outbox, coalesced with whatever else is queued.
//
// Without Async, handlers run in order on the read loop, and the answers
// to every call of one read leave in one writev: the fast path for short,
// CPU-bound handlers.
func Async() MethodOption { return func(m *method) { m.async = true } }

// Handle registers fn as the handler of method name ("unit/method" by
// convention). The request is decoded with the connection's codec into a
// Req (a raw []byte or json.RawMessage request receives the payload as is);
// the Resp is encoded the same way. A raw request of a method without
// Async aliases the connection's read buffer: it is valid only until fn
// returns, and fn copies it to keep it (an Async method's raw request is a
// copy of its own).
//
// ctx is canceled when the caller's timeout passes or the connection
// closes; PeerFrom(ctx) returns the calling connection. A returned *Error
// reaches the caller as is, except that a Code of 0 or in 10-999 is sent
// as ErrInternal's code (with the message and data; see Error); any other
// error is logged and answered as ErrInternal, and so is a panic, after
// which the connection lives on.
func Handle[Req, Resp any](r *Router, name string, fn func(ctx context.Context, req Req) (Resp, error), opts ...MethodOption) {
	m := &method{
		name: name,
		req:  reflect.TypeFor[Req](),
		resp: reflect.TypeFor[Resp](),
		call: methodCall(fn),
	}
	for _, o := range opts {
		o(m)
	}
	r.add(func() { r.methods = append(r.methods, m) })
}

// methodCall adapts fn to method.call. A raw request ([]byte,
// json.RawMessage) gets a closure of its own, in which the request never
// reaches the codec's interface and so stays off the heap, and a raw
// result is appended without being boxed into an interface: a method of
// raw bytes allocates nothing per call.
func methodCall[Req, Resp any](fn func(context.Context, Req) (Resp, error)) func(ctx context.Context, codec Codec, payload, dst []byte) ([]byte, error) {
	var probe Req
	switch any(&probe).(type) {
	case *[]byte, *json.RawMessage:
		return func(ctx context.Context, codec Codec, payload, dst []byte) ([]byte, error) {
			var req Req
			setRaw(&req, payload)
			resp, err := fn(ctx, req)
			if err != nil {
				return dst, err
			}
			return appendResult(codec, dst, &resp)
		}
	}
	return func(ctx context.Context, codec Codec, payload, dst []byte) ([]byte, error) {
		var req Req
		if err := unmarshal(codec, payload, &req); err != nil {
			return dst, &Error{Code: ErrInvalidParams.Code, Message: "invalid params: " + err.Error()}
		}
		resp, err := fn(ctx, req)
		if err != nil {
			return dst, err
		}
		return appendResult(codec, dst, &resp)
	}
}

// setRaw stores payload in *req, a *[]byte or *json.RawMessage.
func setRaw[Req any](req *Req, payload []byte) {
	switch p := any(req).(type) {
	case *[]byte:
		*p = payload
	case *json.RawMessage:
		*p = payload
	}
}

// appendResult appends *resp encoded with codec, a raw result as it is
// (as marshal does) but without boxing it into an interface first.
func appendResult[Resp any](codec Codec, dst []byte, resp *Resp) ([]byte, error) {
	switch r := any(resp).(type) {
	case *[]byte:
		return append(dst, *r...), nil
	case *json.RawMessage:
		return append(dst, *r...), nil
	}
	return codec.AppendMarshal(dst, *resp)
}

// HandleEvent registers fn for the events named name that clients send
// (PROTOCOL.md §4.3). An event that does not decode into a T is dropped and
// counted; a panic in fn is logged and counted, and the connection lives on.
// A raw T ([]byte, json.RawMessage) aliases the connection's read buffer,
// as a synchronous method's raw request does (see Handle): it is valid
// only until fn returns.
func HandleEvent[T any](r *Router, name string, fn func(ctx context.Context, v T)) {
	e := &eventHandler{
		name: name,
		typ:  reflect.TypeFor[T](),
		call: func(ctx context.Context, codec Codec, payload []byte) error {
			var v T
			if err := unmarshal(codec, payload, &v); err != nil {
				return err
			}
			fn(ctx, v)
			return nil
		},
	}
	r.add(func() { r.events = append(r.events, e) })
}

func (r *Router) add(f func()) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.frozen {
		panic("compat: route registered after the Router was given to NewServer")
	}
	f()
}

// freeze builds the lookup tables. It is called by NewServer and by Dial
// (for ClientOptions.Handlers), which return its error as an *OptionError
// for "Router" or "Handlers"; it reports a name no packet can carry
// (routeName) or one registered twice.
func (r *Router) freeze() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.frozen {
		return nil
	}
	mt := make([]dispatch.Route[*method], len(r.methods))
	for i, m := range r.methods {
		if err := routeName("method", m.name); err != nil {
			return err
		}
		mt[i] = dispatch.Route[*method]{Name: m.name, Handler: m}
	}
	methods, err := dispatch.NewRouter(mt)
	if err != nil {
		return fmt.Errorf("compat: methods: %w", err)
	}
	et := make([]dispatch.Route[*eventHandler], len(r.events))
	for i, e := range r.events {
		if err := routeName("event", e.name); err != nil {
			return err
		}
		et[i] = dispatch.Route[*eventHandler]{Name: e.name, Handler: e}
	}
	events, err := dispatch.NewRouter(et)
	if err != nil {
		return fmt.Errorf("compat: events: %w", err)
	}
	st := make([]dispatch.Route[*streamMethod], len(r.streams))
	for i, m := range r.streams {
		if err := routeName("method", m.name); err != nil {
			return err
		}
		st[i] = dispatch.Route[*streamMethod]{Name: m.name, Handler: m}
	}
	streams, err := dispatch.NewRouter(st)
	if err != nil {
		return fmt.Errorf("compat: streams: %w", err)
	}
	r.methodTable, r.eventTable, r.streamTable, r.frozen = methods, events, streams, true
	return nil
}

// routeName refuses a route whose name nameFault faults: its handler
// could never be reached.
func routeName(what, name string) error {
	if fault := nameFault(what, name); fault != "" {
		return fmt.Errorf("compat: route: %s", fault)
	}
	return nil
}

// Introspection lists what a Router knows, for documentation and for the
// preset compression dictionary both ends build from it.
type Introspection struct {
	Methods []string // in registration order
	Events  []string // client events, in registration order
	// Fields are the JSON field names of every request, response and event
	// type, with how many of those types use each, sorted by name.
	Fields []FieldUse
}

// FieldUse is one JSON field name and the number of types that have it.
type FieldUse struct {
	Name  string
	Count int
}

// Introspect returns what r knows.
func (r *Router) Introspect() Introspection {
	r.mu.Lock()
	defer r.mu.Unlock()
	var in Introspection
	counts := map[string]int{}
	seen := map[reflect.Type]bool{}
	for _, m := range r.methods {
		in.Methods = append(in.Methods, m.name)
		collectFields(m.req, counts, seen)
		collectFields(m.resp, counts, seen)
	}
	for _, e := range r.events {
		in.Events = append(in.Events, e.name)
		collectFields(e.typ, counts, seen)
	}
	for name, n := range counts {
		in.Fields = append(in.Fields, FieldUse{Name: name, Count: n})
	}
	slices.SortFunc(in.Fields, func(a, b FieldUse) int { return strings.Compare(a.Name, b.Name) })
	return in
}

// collectFields counts the JSON names of t's fields, following nested
// structs, pointers, slices, arrays and maps, each type once.
func collectFields(t reflect.Type, counts map[string]int, seen map[reflect.Type]bool) {
	for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice || t.Kind() == reflect.Array || t.Kind() == reflect.Map {
		if isRaw(t) {
			return
		}
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct || seen[t] {
		return
	}
	seen[t] = true
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		name := f.Name
		if tag, ok := f.Tag.Lookup("json"); ok {
			tagName, _, _ := strings.Cut(tag, ",")
			if tagName == "-" {
				continue
			}
			if tagName != "" {
				name = tagName
			}
		}
		if f.Anonymous && f.Type.Kind() == reflect.Struct {
			collectFields(f.Type, counts, seen)
			continue
		}
		counts[name]++
		collectFields(f.Type, counts, seen)
	}
}

// Package dispatch is the branch every incoming packet takes: it decodes the
// packet's kind and calls the handler for that kind, and it routes an RPC
// method name, read from the wire as bytes, to its handler.
//
// # Packet kinds
//
// A hotpath.v1 packet starts with one byte, its Kind (KindCall = 1 through
// KindCapabilities = 13). DecodeKind splits a packet into kind and body; a
// Dispatcher built from Handlers calls the handler for the kind with a
// per-connection value of the caller's type and the body. Kind 0 and every
// value above 13 is an *UnknownKindError, a kind the Dispatcher has no
// handler for is an *UnhandledKindError; neither panics.
//
// # Method routing
//
// A Router is built once from a list of Routes (a name and a handler of any
// type H) and maps a name given as []byte to its handler. The Router is a
// perfect hash of the registered names: a lookup allocates nothing (only
// the error for an unknown name does) and does the same work for every name
// of a given length, registered or not. Names returns the names in
// registration order, for introspection and for a preset compression
// dictionary built from them.
//
// # Costs
//
// Both branches were chosen by the benchmarks kept in this package, with a
// real handler call in the loop: BenchmarkKindShapes (switch, if/else chain,
// function table, interface method per kind) and BenchmarkRouteShapes (map,
// switch on the name, sorted table, perfect hash). The README has the
// figures. A dispatch costs a bounds check and an indirect call: 3 to 5 ns
// with the handler's call, for a predictable kind, on the machine the
// README's figures come from. A lookup costs one hash of the name, a pilot
// load, a multiply, a slot load and one comparison: 10 to 17 ns there with
// the handler's call, against 13 to 27 ns for a map. A Router of 1000
// methods holds 8.5 KiB of tables beside its routes and builds in about
// half a millisecond.
//
// Pick dispatch for the control path of a protocol server. It has no
// dependency beyond the standard library. Dispatchers and Routers are
// immutable once built and safe for concurrent use.
package dispatch

// Package dispatch routes incoming packets: it decodes a packet's kind and
// calls the typed handler for it, and it maps an RPC method name, read from
// the wire as bytes, to its handler without allocating.
//
// The shape of both branches (switch, table, map, sorted index) was chosen
// by the benchmarks kept in this package, with a real handler call in the
// loop; the README shows the figures.
//
// Pick dispatch for the control path of a protocol server. It has no
// dependency beyond the standard library.
package dispatch

// Package compat is the hotpath server: RPC calls, server-to-client asks,
// events and rooms over WebSocket, composed from the hotpath modules, and
// the Go client that speaks its protocol.
//
// Every hot path comes from a module: frames from wsframe read over a
// segmentqueue, packets routed by dispatch, answers and room events written
// through a corkwriter so that what one read produces leaves in one writev,
// room broadcasts framed once and compressed once per window by
// deflatecache, timeouts and keepalives on one scheduler per server. The wire
// protocol is specified in PROTOCOL.md.
//
// Run it with go run ./compat/cmd/hotpath, or mount its http.Handler on your
// own mux.
package compat

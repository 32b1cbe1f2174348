// Package interop checks hotpath's server against WebSocket clients it did
// not write: gorilla/websocket and coder/websocket, with and without
// permessage-deflate (each in the modes it offers), against compat's echo
// mode and its RPC endpoint. A tap on each client connection parses the
// frames crossing it, so the tests assert on the wire that compression was
// used both ways when negotiated and never when not.
//
// The package holds only tests; it lives in the fuzz module because peer
// libraries may be imported only from bench and fuzz (see deps_test.go).
// The clients of other languages (Node ws, Python websockets, Chromium)
// are driven by compat/interop/run.sh.
package interop

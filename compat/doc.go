// Package compat is the hotpath server: RPC calls, server-to-client asks,
// events and rooms over WebSocket, composed from the hotpath modules, and
// the Go client that speaks its protocol.
//
// Every hot path comes from a module: frames from wsframe read over a
// segmentqueue, packets routed by dispatch, answers and room events written
// through a corkwriter so that what one read produces leaves in one writev,
// room broadcasts framed once and compressed once per window by
// deflatecache, and keepalives and call and ask timeouts on two schedulers
// per server (one runtime timer each, whatever the number of connections).
// The wire protocol is specified in PROTOCOL.md.
//
// # Carriers
//
// The same Server, Router, rooms and Client run over five carriers; a
// room's members may be on any mix of them, and a Client picks one by its
// URL's scheme:
//
//   - WebSocket (ws://, wss://): ServeHTTP or Serve. Every browser, every
//     proxy; one byte stream, so a large message holds up every call
//     behind it.
//   - QUIC (quic://): ListenQUIC and ServeQUIC. Calls on a control stream
//     of the highest priority, binary streams of their own (HandleStream,
//     Client.OpenStream) so an upload never holds up a call, and datagrams
//     for emits a member may miss (EmitUnreliable). The same UDP port
//     serves WebTransport (https://) for browsers; NewDevCertificate makes
//     the certificate they pin by hash during development.
//   - SCTP (sctp://, sctp+dtls://): ListenSCTP or ListenSCTPDTLS, and
//     ServeSCTP. A native Go carrier between hosts, over UDP or DTLS, with
//     an unordered stream for unreliable emits.
//   - WebRTC data channels (webrtc+http://, webrtc+https://):
//     WebRTCHandler serves the HTTP signalling. Peer-to-peer capable, for
//     browsers; one packet per message, so packets are bounded by 256 KiB.
//
// The router, rooms, limits, keepalive, batching and dictionary compression
// do not know the carrier: every carrier honours the same message, inflated
// size and in-flight limits, and a malformed packet closes that connection,
// and no other, with the close code a WebSocket gets. PROTOCOL.md §8 says
// how each carrier frames and closes.
//
// Run it with go run ./compat/cmd/hotpath, or mount its http.Handler on your
// own mux.
package compat

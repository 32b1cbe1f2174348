// Package deflatecache implements RFC 7692 permessage-deflate for servers
// that broadcast.
//
// It parses and negotiates extension offers, compresses with exactly the
// window each peer allowed, and keeps, per message, one compressed frame per
// distinct window: a room of 200 members that negotiated the same window
// costs one deflate per message, not 200. Inflation stops at a caller's cap
// before allocating past it, so a compression bomb costs at most the cap.
// Context takeover is available per connection, opt-in, with its memory cost
// documented.
//
// Pick deflatecache when you send the same message to many WebSocket peers
// with compression on. It depends on github.com/klauspost/compress and wsframe.
package deflatecache

// Package dictionary builds a preset compression dictionary from the names
// a router already knows (methods, events, fields, packet skeletons) and
// offers deflate and zstd codecs that use it.
//
// Small RPC messages barely compress on their own because every name in
// them appears for the first time. With a dictionary those names are in the
// window before the first byte. The dictionary bytes are deterministic and
// carry a short id, so two ends can compare dictionaries and fall back to
// none when they differ. Decoding is capped before it allocates past a limit.
//
// Pick dictionary for small, structured messages between two ends that share
// a router. It depends only on github.com/klauspost/compress.
package dictionary

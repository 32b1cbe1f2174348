// Package dictionary builds a preset compression dictionary from what a
// router already knows (method and event names, field names, the fixed
// leading bytes of each packet kind, example messages) and compresses single
// messages with it, in raw deflate or zstd.
//
// Small RPC messages barely compress on their own: every name in a 108-byte
// event is seen for the first time, and one-shot deflate saves about a
// tenth. A preset dictionary puts those names in the window before the first
// byte; on the test router of this package the 108-byte event compresses to
// 43 bytes instead of 93 (27 with a dictionary that also learned from sample
// messages).
//
// # Building
//
// Build takes a Source and returns a Dictionary. The bytes depend on the
// Source alone, never on map order, the machine or the Go version: every
// entry is rendered (field names as JSON object keys, `"name":`), identical
// renderings are merged, and the entries are sorted by weight, kind and bytes,
// least frequent first, because both codecs reach the end of a dictionary,
// nearest the message, with the shortest distances. Past the cap (at most
// MaxSize, 32 KiB, the deflate window) the front is cut. BuildOptions.Samples
// optionally adds byte strings common to real messages.
//
// # Negotiation
//
// Dictionary.ID is 16 hex digits of the SHA-256 of the bytes. Two ends
// exchange ids and use a dictionary only when the ids are equal; otherwise
// they use a codec without one (NewDeflate(nil, …)), which any peer decodes.
// Raw deflate cannot tell a wrong dictionary from the right one, so this
// comparison is what keeps output from being garbled; zstd frames carry
// the dictionary id and fail with ErrOtherDictionary.
//
// # Codecs
//
// Deflate and Zstd implement Codec. AppendCompress returns false, leaving
// dst unchanged, for messages under the threshold (default 64 bytes) and
// for messages that would not shrink: the caller sends those as they are
// and marks in its own envelope which messages are compressed. Both codecs
// are safe for concurrent use and allocate nothing per message when dst has
// room.
//
// Deflate's encoder is this package's own: the dictionary is hashed once
// into a read-only 72 KiB index shared by all goroutines, and a message
// hashes only its own bytes. klauspost/compress's Writer.ResetDict would
// hash the whole dictionary for every message, which costs more than
// compressing a small message. Its decoder is the standard library's
// compress/flate.
// Zstd is klauspost/compress/zstd with the dictionary as raw content; it
// is larger and slower than Deflate on messages of a few hundred bytes and
// smaller on large ones (see README.md for the figures).
//
// # Limits and costs
//
// AppendDecompress stops at CodecOptions.MaxDecoded (default 1 MiB) with
// ErrTooLarge, having allocated no more than the cap for the output. Memory:
// a Deflate codec holds its 72 KiB index; each encoder in its pool about
// 144 KiB and each decoder about 38 KiB (TestCodecMemory logs them), while in use or until the garbage
// collector empties the pools. A Zstd codec keeps GOMAXPROCS encoders and
// decoders with their own tables; Close releases them.
package dictionary

//go:build race

package deflatecache

// raceEnabled scales long tests down under the race detector, which slows
// DEFLATE about 250 times and makes sync.Pool drop a quarter of what is put
// back, so pooled 1 MiB compressors are rebuilt again and again.
const raceEnabled = true

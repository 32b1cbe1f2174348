//go:build !race

package deflatecache

const raceEnabled = false

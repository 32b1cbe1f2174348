//go:build race

package dictionary

// raceEnabled: the race detector makes sync.Pool drop items on purpose, so
// allocation counts mean nothing under it.
const raceEnabled = true

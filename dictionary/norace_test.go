//go:build !race

package dictionary

const raceEnabled = false

//go:build !race

package corkwriter

const raceEnabled = false

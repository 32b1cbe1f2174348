// Command fuzz runs every Fuzz target in the hotpath workspace for a given
// time and prints a table of executions, new corpus entries and crashes.
// The package's own tests hold the differential targets that need other
// libraries (peer WebSocket readers, compress/flate, utf8.Valid).
//
//	go run ./fuzz [-time 30s] [-only PATTERN]
package main

// Package client holds the fuzz target of compat's Go client: each input is
// what a server sends on one connection, after a valid upgrade. A client
// that reads a hostile or broken server must answer with a close code or
// an error, never panic, hang a call or leak a goroutine.
package client

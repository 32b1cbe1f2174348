// Package client holds the fuzz targets of compat's Go client. For
// FuzzClient each input is what a server sends on one connection, after a
// valid upgrade; for FuzzUpgradeAnswer it is the server's answer to the
// upgrade itself. A client that reads a hostile or broken server must
// answer with a close code or an error, never panic, hang a call or leak a
// goroutine, and take only an upgrade answer RFC 6455 §4.1 allows.
package client

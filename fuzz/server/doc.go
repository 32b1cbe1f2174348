// Package server holds the whole-server fuzz targets: one compat server per
// fuzz process, served on an in-memory listener, and each input one
// connection, opened with a valid handshake and fed the fuzzer's bytes.
// Its tests need the compat module; the frame, packet and offer
// differentials of the parent directory do not.
package server

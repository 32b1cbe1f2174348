// Package jsclient holds hotpath.js, the browser client of the hotpath.v1
// protocol (compat/PROTOCOL.md), so that a Go server can serve it to the
// pages that talk to it without a separate asset pipeline:
//
//	mux.HandleFunc("GET /hotpath.js", func(w http.ResponseWriter, r *http.Request) {
//		w.Header().Set("Content-Type", "text/javascript; charset=utf-8")
//		w.Write(jsclient.Source)
//	})
//
// The module has no dependencies and needs no build step; README.md beside
// this file describes its API.
package jsclient

import _ "embed"

// Source is the text of hotpath.js, an ES module. It is shared: do not
// modify it.
//
//go:embed hotpath.js
var Source []byte

package main

import "net/http"

// serveDemoPage mounts the demo page; the page and its script are added
// with the browser client.
func serveDemoPage(mux *http.ServeMux) {
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Write([]byte("hotpath demo: WebSocket endpoint at /ws\n"))
	})
}

package main

import (
	"embed"
	"io/fs"
	"net/http"

	jsclient "github.com/hotpath-go/hotpath/compat/js"
)

//go:embed web
var web embed.FS

// serveDemoPage mounts the demo page (web/) at / and the browser client at
// /hotpath.js.
func serveDemoPage(mux *http.ServeMux) {
	page, err := fs.Sub(web, "web")
	if err != nil {
		panic(err) // the embedded tree always has web/
	}
	// No method in the pattern: "GET /" would conflict with "/ws".
	mux.Handle("/", http.FileServerFS(page))
	mux.HandleFunc("GET /hotpath.js", func(w http.ResponseWriter, r *http.Request) {
		// Module scripts load only with a JavaScript content type.
		w.Header().Set("Content-Type", "text/javascript; charset=utf-8")
		w.Write(jsclient.Source)
	})
}

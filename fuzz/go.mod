module github.com/hotpath-go/hotpath/fuzz

go 1.26

require (
	github.com/coder/websocket v1.8.14
	github.com/gobwas/ws v1.4.0
	github.com/gorilla/websocket v1.5.3
)

require (
	github.com/gobwas/httphead v0.1.0 // indirect
	github.com/gobwas/pool v0.2.1 // indirect
)

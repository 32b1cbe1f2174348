module github.com/hotpath-go/hotpath/bench

go 1.26.0

require (
	github.com/coder/websocket v1.8.14
	github.com/gobwas/ws v1.4.0
	github.com/gorilla/websocket v1.5.3
	github.com/lesismal/nbio v1.6.8
	github.com/lxzan/gws v1.8.9
)

require (
	github.com/dolthub/maphash v0.1.0 // indirect
	github.com/dunglas/httpsfv v1.1.1 // indirect
	github.com/gobwas/httphead v0.1.0 // indirect
	github.com/gobwas/pool v0.2.1 // indirect
	github.com/lesismal/llib v1.2.2 // indirect
	github.com/quic-go/qpack v0.6.0 // indirect
	github.com/quic-go/quic-go v0.64.1 // indirect
	github.com/quic-go/webtransport-go v0.13.0 // indirect
	golang.org/x/crypto v0.57.0 // indirect
	golang.org/x/net v0.60.0 // indirect
	golang.org/x/sys v0.50.0 // indirect
	golang.org/x/text v0.42.0 // indirect
	google.golang.org/genproto/googleapis/rpc v0.0.0-20260817212433-ac3dfec99bb1 // indirect
)

require (
	github.com/hotpath-go/hotpath/compat v0.0.0-00010101000000-000000000000
	github.com/hotpath-go/hotpath/corkwriter v0.0.0-00010101000000-000000000000
	github.com/hotpath-go/hotpath/deflatecache v0.0.0-00010101000000-000000000000
	github.com/hotpath-go/hotpath/dictionary v0.0.0-00010101000000-000000000000
	github.com/hotpath-go/hotpath/dispatch v0.0.0-00010101000000-000000000000
	github.com/hotpath-go/hotpath/emitter v0.0.0-00010101000000-000000000000
	github.com/hotpath-go/hotpath/scheduler v0.0.0-00010101000000-000000000000
	github.com/hotpath-go/hotpath/segmentqueue v0.0.0-00010101000000-000000000000
	github.com/hotpath-go/hotpath/wsframe v0.0.0-00010101000000-000000000000
	github.com/klauspost/compress v1.20.4
	google.golang.org/grpc v1.85.0
	google.golang.org/protobuf v1.36.12
)

// The hotpath modules are developed together in this workspace; the
// replacements let this module build on its own too (GOWORK=off).
replace (
	github.com/hotpath-go/hotpath/compat => ../compat
	github.com/hotpath-go/hotpath/corkwriter => ../corkwriter
	github.com/hotpath-go/hotpath/deflatecache => ../deflatecache
	github.com/hotpath-go/hotpath/dictionary => ../dictionary
	github.com/hotpath-go/hotpath/dispatch => ../dispatch
	github.com/hotpath-go/hotpath/emitter => ../emitter
	github.com/hotpath-go/hotpath/scheduler => ../scheduler
	github.com/hotpath-go/hotpath/segmentqueue => ../segmentqueue
	github.com/hotpath-go/hotpath/wsframe => ../wsframe
)

module github.com/hotpath-go/hotpath/compat

go 1.26.0

require (
	github.com/gobwas/httphead v0.1.0
	github.com/gobwas/ws v1.4.0
	github.com/hotpath-go/hotpath/corkwriter v0.0.0-00010101000000-000000000000
	github.com/hotpath-go/hotpath/deflatecache v0.0.0-00010101000000-000000000000
	github.com/hotpath-go/hotpath/dictionary v0.0.0-00010101000000-000000000000
	github.com/hotpath-go/hotpath/dispatch v0.0.0-00010101000000-000000000000
	github.com/hotpath-go/hotpath/emitter v0.0.0-00010101000000-000000000000
	github.com/hotpath-go/hotpath/scheduler v0.0.0-00010101000000-000000000000
	github.com/hotpath-go/hotpath/segmentqueue v0.0.0-00010101000000-000000000000
	github.com/hotpath-go/hotpath/wsframe v0.0.0-00010101000000-000000000000
	github.com/pion/datachannel v1.6.4
	github.com/pion/dtls/v3 v3.1.16
	github.com/pion/ice/v4 v4.4.9
	github.com/pion/logging v0.2.4
	github.com/pion/sctp v1.12.1
	github.com/pion/transport/v5 v5.1.5
	github.com/pion/webrtc/v4 v4.2.26
	github.com/quic-go/quic-go v0.64.1
	github.com/quic-go/webtransport-go v0.13.0
	golang.org/x/net v0.56.0
	golang.org/x/sys v0.50.0
)

require (
	github.com/dunglas/httpsfv v1.1.1 // indirect
	github.com/gobwas/pool v0.2.1 // indirect
	github.com/google/uuid v1.6.0 // indirect
	github.com/klauspost/compress v1.20.4 // indirect
	github.com/pion/interceptor v0.1.51 // indirect
	github.com/pion/mdns/v2 v2.2.2 // indirect
	github.com/pion/randutil v0.1.0 // indirect
	github.com/pion/rtcp v1.2.20 // indirect
	github.com/pion/rtp v1.10.6 // indirect
	github.com/pion/sdp/v3 v3.0.20 // indirect
	github.com/pion/srtp/v3 v3.1.3 // indirect
	github.com/pion/stun/v4 v4.0.1 // indirect
	github.com/pion/turn/v5 v5.1.3 // indirect
	github.com/quic-go/qpack v0.6.0 // indirect
	github.com/wlynxg/anet v0.0.5 // indirect
	golang.org/x/crypto v0.54.0 // indirect
	golang.org/x/text v0.40.0 // indirect
	golang.org/x/time v0.14.0 // indirect
)

// The hotpath modules are developed together in this workspace; the
// replacements let this module build on its own too (GOWORK=off).
replace (
	github.com/hotpath-go/hotpath/corkwriter => ../corkwriter
	github.com/hotpath-go/hotpath/deflatecache => ../deflatecache
	github.com/hotpath-go/hotpath/dictionary => ../dictionary
	github.com/hotpath-go/hotpath/dispatch => ../dispatch
	github.com/hotpath-go/hotpath/emitter => ../emitter
	github.com/hotpath-go/hotpath/scheduler => ../scheduler
	github.com/hotpath-go/hotpath/segmentqueue => ../segmentqueue
	github.com/hotpath-go/hotpath/wsframe => ../wsframe
)

package main

import (
	"net"
	"sync/atomic"

	"github.com/hotpath-go/hotpath/compat"
	"github.com/hotpath-go/hotpath/compat/wire"
)

// hotpath's room: compat's server with every connection joined to one room
// as it connects, and a broadcast a room Emit of the payload as it is (a
// []byte payload passes the codec untouched).
func init() {
	fanoutServers = append(fanoutServers, fanoutServer{
		Library:     "hotpath",
		Role:        Ours,
		Modes:       []fanoutMode{fanoutPlain, fanoutDeflate, fanoutWindows},
		Serve:       serveHotpathRoom,
		MessageSize: func(p []byte) int { return len(wire.AppendEmit(nil, hotpathRoom, hotpathEvent, 0, p)) },
	})
	const members200 = "200 members, "
	addTargets("fanout",
		Target{Goal: "fan-out to 200 members, 512 B ≥ 3× gws's Broadcaster", Case: members200 + "plain", Row: "hotpath", Against: "lxzan/gws", Min: 3},
		Target{Goal: "with permessage-deflate ≥ 0.7× our own uncompressed rate", Case: members200 + "permessage-deflate", Row: "hotpath", AgainstCase: members200 + "plain", Against: "hotpath", Min: 0.7},
		Target{Goal: "with two windows ≥ 0.7× our own uncompressed rate", Case: members200 + "deflate, windows 10 and 15", Row: "hotpath", AgainstCase: members200 + "plain", Against: "hotpath", Min: 0.7},
	)
}

const (
	hotpathRoom  = "lobby"
	hotpathEvent = "msg"
)

type hotpathRoomServer struct {
	srv  atomic.Pointer[compat.Server] // set before any member connects
	stop func()
}

func serveHotpathRoom(ln net.Listener, mode fanoutMode) (fanoutRoom, error) {
	room := &hotpathRoomServer{}
	opts := compat.Options{
		Compression: compat.Compression{Disabled: mode == fanoutPlain, Level: 1, Threshold: fanoutThreshold},
		OnConnect: func(p *compat.Peer) {
			_, _ = room.srv.Load().Join(p, hotpathRoom)
		},
	}
	srv, stop, err := serveCompat(ln, opts)
	if err != nil {
		return nil, err
	}
	room.srv.Store(srv)
	room.stop = stop
	return room, nil
}

func (r *hotpathRoomServer) Members() int { return r.srv.Load().Members(hotpathRoom) }

func (r *hotpathRoomServer) Broadcast(p []byte) error {
	// A member skipped because its outbox was full misses the message,
	// and the trial reports it invalid.
	_, err := r.srv.Load().Emit(hotpathRoom, hotpathEvent, p)
	return err
}

func (r *hotpathRoomServer) Close() { r.stop() }

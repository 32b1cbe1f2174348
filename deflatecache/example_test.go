package deflatecache_test

import (
	"fmt"

	"github.com/hotpath-go/hotpath/deflatecache"
	"github.com/hotpath-go/hotpath/wsframe"
)

// A server negotiates with what Chromium offers, compresses a broadcast
// once for the room, and inflates what the client sends back.
func Example() {
	params, response, ok, err := deflatecache.Negotiate("permessage-deflate; client_max_window_bits", deflatecache.ServerPolicy{})
	if err != nil || !ok {
		fmt.Println("no compression:", err)
		return
	}
	fmt.Println("Sec-WebSocket-Extensions:", response)

	// One Conn per connection; the room shares one Prepared per message.
	room := make([]*deflatecache.Conn, 3)
	for i := range room {
		room[i], _ = deflatecache.NewConn(params, wsframe.Server, deflatecache.Options{})
	}
	msg := []byte(`{"event":"scores","rows":[{"team":"red","score":12},{"team":"blue","score":9},{"team":"green","score":12},{"team":"gold","score":7}]}`)
	pm, _ := wsframe.NewPrepared(wsframe.OpText, msg)
	before := deflatecache.Deflates()
	var frames [][]byte
	for _, c := range room {
		f, _ := c.BroadcastFrame(pm)
		frames = append(frames, f)
	}
	fmt.Printf("%d frames of %d bytes (plain: %d), %d deflate\n", len(frames), len(frames[0]), len(pm.Frame()), deflatecache.Deflates()-before)

	// The client's side, for the round trip.
	client, _ := deflatecache.NewConn(params, wsframe.Client, deflatecache.Options{})
	frame, _ := client.AppendCompressedFrame(nil, wsframe.OpText, msg)
	var dec wsframe.Decoder
	dec.Reset(wsframe.Config{Role: wsframe.Server, Extensions: wsframe.Rsv1})
	m, _, _ := dec.DecodeMessage(frame, nil)
	text, err := room[0].Inflate(nil, m.Payload, 1<<20)
	fmt.Println(m.Compressed, string(text) == string(msg), err)
	// Output:
	// Sec-WebSocket-Extensions: permessage-deflate; server_no_context_takeover; client_no_context_takeover
	// 3 frames of 86 bytes (plain: 137), 1 deflate
	// true true <nil>
}

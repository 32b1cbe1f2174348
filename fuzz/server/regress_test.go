package server

import (
	"bytes"
	"io"
	"slices"
	"testing"

	"github.com/gobwas/ws"
	"github.com/hotpath-go/hotpath/compat/wire"
	"github.com/hotpath-go/hotpath/dispatch"
	"github.com/hotpath-go/hotpath/wsframe"
)

// TestServerAnswersCallQueuedBehindLargeMessage: a client that sends a
// message larger than one read of the server followed at once by a small
// one, and waits for both answers, gets both. The small message reaches
// the server in the same read as the end of the large one.
func TestServerAnswersCallQueuedBehindLargeMessage(t *testing.T) {
	fs, err := serverOnce()
	if err != nil {
		t.Fatal(err)
	}
	c, err := fs.dial(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	large := wire.AppendCall(nil, dispatch.KindCall, 1, methodEcho, 0, bytes.Repeat([]byte("x"), 20_000))
	small := wire.AppendCall(nil, dispatch.KindCall, 2, methodEcho, 0, []byte("y"))
	stream := slices.Concat(clientFrame(wsframe.OpBinary, large, wsframe.Fin), clientFrame(wsframe.OpBinary, small, wsframe.Fin))
	go c.Write(stream)
	// Both answers are due now; the connection's deadline (connTimeout)
	// ends the wait if one never comes.
	for id := uint32(1); id <= 2; id++ {
		h, err := ws.ReadHeader(c.br)
		if err != nil {
			t.Fatalf("waiting for the answer to call %d: %v", id, err)
		}
		p := make([]byte, h.Length)
		if _, err := io.ReadFull(c.br, p); err != nil {
			t.Fatal(err)
		}
		if pk, err := wire.Decode(p); err != nil || pk.ID != id {
			t.Fatalf("answer %d: %+v, %v", id, pk, err)
		}
	}
}

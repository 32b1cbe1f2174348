package compat

import (
	"context"
	"io"
	"testing"
	"time"
)

// A handler that returns without reading all its client sent frees what
// it left unread: those bytes counted against the connection's
// flow-control window until the connection ended, so that after some
// dozens of such streams (a download that ignores the upload, a handler
// that reads a header and stops) the window was spent and every call on
// the connection hung.
func TestStreamHandlerThatStopsReadingFreesTheWindow(t *testing.T) {
	r := streamRouter()
	HandleStream(r, "file/ignore", func(ctx context.Context, _ struct{}, s *Stream) error { return nil })
	e := newCarrierEnv(t, Options{Router: r})
	for _, carrier := range streamCarriers {
		t.Run(carrier.String(), func(t *testing.T) {
			c := e.dial(t, carrier, ClientOptions{})
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			upload := make([]byte, streamWindow)
			for i := range 2 * connectionWindow / streamWindow {
				s, err := c.OpenStream(ctx, "file/ignore", nil)
				if err != nil {
					t.Fatalf("stream %d: %v", i, err)
				}
				s.Write(upload) // may fail once the server stopped reading
				if _, err := io.ReadAll(s); err != nil {
					t.Fatalf("stream %d: the handler's end: %v", i, err)
				}
				s.Close()
			}
			callCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := c.Call(callCtx, "echo/say", echoReq{Text: "after"}, nil); err != nil {
				t.Fatalf("a call after streams whose handler left their upload unread: %v", err)
			}
		})
	}
}

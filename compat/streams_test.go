package compat

import (
	"context"
	"errors"
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

// A stream handler's error resets its stream with the code a call's
// handler answers for it: an *Error without a code or with one the
// protocol keeps (10-999) as Internal, a ctx's deadline as Timeout. They
// went out as they were: code 0, which a client also reads when the
// other end only closed the stream, and codes no caller can match.
func TestStreamHandlerErrorsAnswerAsCalls(t *testing.T) {
	r := streamRouter()
	HandleStream(r, "file/code", func(ctx context.Context, code uint32, s *Stream) error {
		return &Error{Code: code, Message: "failed"}
	})
	HandleStream(r, "file/wait", func(ctx context.Context, _ struct{}, s *Stream) error {
		<-ctx.Done()
		return ctx.Err()
	})
	e := newCarrierEnv(t, Options{Router: r})
	for _, carrier := range streamCarriers {
		t.Run(carrier.String(), func(t *testing.T) {
			c := e.dial(t, carrier, ClientOptions{})
			open := func(ctx context.Context, method string, req any) error {
				s, err := c.OpenStream(ctx, method, req)
				if err == nil {
					_, err = io.ReadAll(s)
				}
				return err
			}
			ctx := context.Background()
			for code, want := range map[uint32]*Error{0: ErrInternal, 500: ErrInternal, 1234: {Code: 1234}} {
				if err := open(ctx, "file/code", code); !errors.Is(err, want) {
					t.Errorf("a handler that failed with code %d: %v, want code %d", code, err, want.Code)
				}
			}
			short, cancel := context.WithTimeout(ctx, time.Second)
			defer cancel()
			if err := open(short, "file/wait", nil); !errors.Is(err, ErrTimeout) {
				t.Errorf("a handler that returned its ctx's deadline: %v, want Timeout", err)
			}
		})
	}
}

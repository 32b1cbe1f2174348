package compat

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"strings"
	"sync"
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

// Close interrupts a Write that waits for a peer that stopped reading, on
// either end, and the Read and Write it interrupts or that come after it
// return ErrClosed, as CloseWrite after it does (it returned quic-go's
// "close called for canceled stream"). Before, nothing could: OpenStream's
// ctx no longer touches the stream, a handler's ctx ends but does not
// stop a Write, and Close, QUIC's FIN, left the Write waiting until the
// connection ended. (A write deadline now can too: TestStreamDeadlines.)
func TestStreamCloseInterruptsAWrite(t *testing.T) {
	r := streamRouter()
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	HandleStream(r, "file/stall", func(ctx context.Context, _ struct{}, s *Stream) error {
		<-release
		return nil
	})
	handlerErr := make(chan error, 1)
	HandleStream(r, "file/flood", func(ctx context.Context, _ struct{}, s *Stream) error {
		defer context.AfterFunc(ctx, func() { s.Close() })()
		_, err := s.Write(make([]byte, 8<<20))
		handlerErr <- err
		return err
	})
	e := newCarrierEnv(t, Options{Router: r})
	interrupted := func(t *testing.T, who string, errc <-chan error) {
		t.Helper()
		select {
		case err := <-errc:
			if !errors.Is(err, ErrClosed) {
				t.Errorf("%s Write interrupted by Close: %v, want ErrClosed", who, err)
			}
		case <-time.After(20 * time.Second):
			t.Fatalf("%s Write still waits after Close", who)
		}
	}
	for _, carrier := range streamCarriers {
		t.Run(carrier.String(), func(t *testing.T) {
			c := e.dial(t, carrier, ClientOptions{})
			ctx := context.Background()
			s, err := c.OpenStream(ctx, "file/stall", nil)
			if err != nil {
				t.Fatal(err)
			}
			written := make(chan error, 1)
			go func() { _, err := s.Write(make([]byte, 8<<20)); written <- err }()
			time.Sleep(200 * time.Millisecond) // let the Write wait for the window
			s.Close()
			interrupted(t, "the client's", written)
			if _, err := s.Read(make([]byte, 1)); !errors.Is(err, ErrClosed) {
				t.Errorf("Read after Close: %v, want ErrClosed", err)
			}
			if _, err := s.Write([]byte("x")); !errors.Is(err, ErrClosed) {
				t.Errorf("Write after Close: %v, want ErrClosed", err)
			}
			if err := s.CloseWrite(); !errors.Is(err, ErrClosed) {
				t.Errorf("CloseWrite after Close: %v, want ErrClosed", err)
			}

			// The handler closes its stream when its ctx ends, here at the
			// deadline the client opened it with.
			short, cancel := context.WithTimeout(ctx, time.Second)
			defer cancel()
			if _, err := c.OpenStream(short, "file/flood", nil); err != nil {
				t.Fatal(err)
			}
			interrupted(t, "the handler's", handlerErr)
			if err := c.Call(ctx, "echo/say", echoReq{Text: "after"}, nil); err != nil {
				t.Fatalf("a call after the streams: %v", err)
			}
		})
	}
}

// TestStreamAbortIsNotAnEndOfUpload: an upload the client gives up with
// Abort ends its handler's Read with ErrCanceled, where Close (between
// Writes) ends it with io.EOF as a whole upload does; before Abort there
// was no way to tell the two apart.
func TestStreamAbortIsNotAnEndOfUpload(t *testing.T) {
	r := streamRouter()
	type upload struct {
		n   int
		err error
	}
	uploads := make(chan upload, 1)
	HandleStream(r, "file/store", func(ctx context.Context, _ struct{}, s *Stream) error {
		b, err := io.ReadAll(s)
		uploads <- upload{len(b), err}
		return err
	})
	e := newCarrierEnv(t, Options{Router: r})
	for _, carrier := range streamCarriers {
		t.Run(carrier.String(), func(t *testing.T) {
			c := e.dial(t, carrier, ClientOptions{})
			ctx := context.Background()
			send := func(end func(*Stream)) upload {
				t.Helper()
				s, err := c.OpenStream(ctx, "file/store", nil)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := s.Write(make([]byte, 1000)); err != nil {
					t.Fatal(err)
				}
				end(s)
				select {
				case u := <-uploads:
					return u
				case <-time.After(20 * time.Second):
					t.Fatal("the handler still reads")
				}
				return upload{}
			}
			if u := send(func(s *Stream) { s.Close() }); u.err != nil || u.n != 1000 {
				t.Errorf("after Close the handler read %d bytes and %v; want 1000 and io.EOF", u.n, u.err)
			}
			u := send(func(s *Stream) {
				s.Abort()
				if _, err := s.Write([]byte("x")); !errors.Is(err, ErrClosed) {
					t.Errorf("Write after Abort: %v, want ErrClosed", err)
				}
				if _, err := s.Read(make([]byte, 1)); !errors.Is(err, ErrClosed) {
					t.Errorf("Read after Abort: %v, want ErrClosed", err)
				}
			})
			if !errors.Is(u.err, ErrCanceled) {
				t.Errorf("after Abort the handler read %d bytes and %v; want ErrCanceled", u.n, u.err)
			}
			if err := c.Call(ctx, "echo/say", echoReq{Text: "after"}, nil); err != nil {
				t.Fatalf("a call after the streams: %v", err)
			}
		})
	}
}

// OpenStream either fails with its ctx's error or returns a stream that
// works: a ctx canceled as the server's answer arrived, after OpenStream
// had read it but before it let go of ctx, reset the stream it returned
// without an error (about 1 opening in 100 here).
func TestOpenStreamCanceledAsItReturns(t *testing.T) {
	e := newCarrierEnv(t, Options{Router: streamRouter()})
	for _, carrier := range streamCarriers {
		t.Run(carrier.String(), func(t *testing.T) {
			c := e.dial(t, carrier, ClientOptions{})
			for i := range 1000 {
				ctx, cancel := context.WithCancel(context.Background())
				go func() {
					time.Sleep(time.Duration(i%400) * time.Microsecond)
					cancel()
				}()
				s, err := c.OpenStream(ctx, "file/echo", "")
				if err != nil {
					if !errors.Is(err, context.Canceled) {
						t.Fatalf("opening %d: %v, want context.Canceled", i, err)
					}
					continue
				}
				_, werr := s.Write([]byte("x"))
				s.CloseWrite()
				got, err := io.ReadAll(s)
				s.Close()
				if werr != nil || err != nil || string(got) != "x" {
					t.Fatalf("opening %d returned a stream that does not work: write %v, read %q, %v", i, werr, got, err)
				}
			}
		})
	}
}

// A stream handler's panic is logged with its stack, as a call handler's
// is: the log said only "boom", not where.
func TestStreamHandlerPanicLogsItsStack(t *testing.T) {
	r := streamRouter()
	HandleStream(r, "file/panic", func(ctx context.Context, _ struct{}, s *Stream) error { panicInAStreamHandler(); return nil })
	var log lockedBuffer
	e := newCarrierEnv(t, Options{Router: r, Logger: slog.New(slog.NewJSONHandler(&log, nil))})
	c := e.dial(t, CarrierQUIC, ClientOptions{})
	s, err := c.OpenStream(context.Background(), "file/panic", nil)
	if err == nil {
		_, err = io.ReadAll(s)
	}
	if !errors.Is(err, ErrInternal) {
		t.Fatalf("a stream whose handler panicked: %v, want Internal", err)
	}
	if got := log.String(); !strings.Contains(got, "panicInAStreamHandler") {
		t.Errorf("the panic's log has no stack: %s", got)
	}
}

func panicInAStreamHandler() { panic("boom") }

// lockedBuffer is a bytes.Buffer that a logger may write from any goroutine.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// A stream handler that returns its stream's error after the client went
// away (ErrClosed) has not failed: nothing is logged as a handler failure,
// while an error of its own still is.
func TestStreamHandlerEndedByItsConnectionLogsNothing(t *testing.T) {
	r := streamRouter()
	returned := make(chan error, 1)
	HandleStream(r, "file/drain", func(ctx context.Context, _ struct{}, s *Stream) error {
		_, err := io.Copy(io.Discard, s)
		returned <- err
		return err
	})
	var log lockedBuffer
	e := newCarrierEnv(t, Options{Router: r, Logger: slog.New(slog.NewJSONHandler(&log, nil))})
	c := e.dial(t, CarrierQUIC, ClientOptions{Reconnect: Reconnect{Disabled: true}})
	s, err := c.OpenStream(context.Background(), "file/drain", nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Write([]byte("some")); err != nil {
		t.Fatal(err)
	}
	c.Close()
	select {
	case err := <-returned:
		if !errors.Is(err, ErrClosed) {
			t.Fatalf("the handler's read after its client closed: %v, want ErrClosed", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the handler's read did not end 10 s after its client closed")
	}
	waitFor(t, func() bool { return e.srv.Peers() == 0 })
	if got := log.String(); strings.Contains(got, "handler failed") {
		t.Errorf("a handler ended by its connection was logged as failed: %s", got)
	}
}

// A client that closes its stream ends the handler's ctx, as a client's
// RST_STREAM ends an http.Handler's: a handler busy with anything but the
// stream went on until the connection ended (a leftover of the streams
// audit). Not once the handler has closed its side: what it does after
// CloseWrite is its own.
func TestStreamHandlerCtxEndsWhenTheClientCloses(t *testing.T) {
	r := streamRouter()
	ended := make(chan error, 1)
	HandleStream(r, "file/busy", func(ctx context.Context, _ struct{}, s *Stream) error {
		<-ctx.Done()
		ended <- ctx.Err()
		return ctx.Err()
	})
	finished := make(chan error, 1)
	HandleStream(r, "file/after", func(ctx context.Context, _ struct{}, s *Stream) error {
		s.Write([]byte("done"))
		s.CloseWrite()
		select {
		case <-ctx.Done():
		case <-time.After(500 * time.Millisecond):
		}
		finished <- ctx.Err()
		return nil
	})
	e := newCarrierEnv(t, Options{Router: r})
	for _, carrier := range streamCarriers {
		t.Run(carrier.String(), func(t *testing.T) {
			c := e.dial(t, carrier, ClientOptions{})
			ctx := context.Background()
			s, err := c.OpenStream(ctx, "file/busy", nil)
			if err != nil {
				t.Fatal(err)
			}
			s.Close()
			select {
			case err := <-ended:
				if !errors.Is(err, context.Canceled) {
					t.Errorf("the handler's ctx ended with %v, want context.Canceled", err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("the handler's ctx still live 10 s after its client closed the stream")
			}

			// The client reads the handler's end, then closes; the handler,
			// which closed its side first, keeps its ctx.
			s, err = c.OpenStream(ctx, "file/after", nil)
			if err != nil {
				t.Fatal(err)
			}
			if got, err := io.ReadAll(s); err != nil || string(got) != "done" {
				t.Fatalf("read %q, %v", got, err)
			}
			s.Close()
			if err := <-finished; err != nil {
				t.Errorf("a handler that had closed its side: its ctx ended (%v) when the client closed", err)
			}
		})
	}
}

// Stream deadlines, on either end: a Read or a Write that waits past its
// deadline returns os.ErrDeadlineExceeded (a net.Error that is a
// timeout), and the stream goes on once the deadline is moved. Before,
// only Close could stop a waiting Read or Write.
func TestStreamDeadlines(t *testing.T) {
	r := streamRouter()
	send := make(chan string)
	handlerWrite := make(chan error, 1)
	finish := make(chan struct{})
	HandleStream(r, "file/later", func(ctx context.Context, _ struct{}, s *Stream) error {
		// Waits for the word to send; meanwhile reads nothing, so a
		// large upload waits for the window.
		select {
		case word := <-send:
			s.Write([]byte(word))
		case <-ctx.Done():
			return nil
		}
		// Then a download its client does not read: a server-side Write
		// deadline.
		s.SetWriteDeadline(time.Now().Add(200 * time.Millisecond))
		_, err := s.Write(make([]byte, 8<<20))
		handlerWrite <- err
		select { // still reading nothing: the client's Write deadline
		case <-finish:
		case <-ctx.Done():
		}
		return nil
	})
	e := newCarrierEnv(t, Options{Router: r})
	for _, carrier := range streamCarriers {
		t.Run(carrier.String(), func(t *testing.T) {
			c := e.dial(t, carrier, ClientOptions{})
			s, err := c.OpenStream(context.Background(), "file/later", nil)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			timedOut := func(what string, err error) {
				t.Helper()
				var ne net.Error
				if !errors.Is(err, os.ErrDeadlineExceeded) || !errors.As(err, &ne) || !ne.Timeout() {
					t.Fatalf("%s past its deadline: %v, want os.ErrDeadlineExceeded", what, err)
				}
			}

			s.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
			buf := make([]byte, 16)
			_, err = s.Read(buf)
			timedOut("Read", err)
			s.SetReadDeadline(time.Time{})
			send <- "late"
			if n, err := io.ReadFull(s, buf[:4]); err != nil || string(buf[:n]) != "late" {
				t.Fatalf("Read after the deadline was lifted: %q, %v", buf[:n], err)
			}

			select {
			case err := <-handlerWrite:
				timedOut("the handler's Write", err)
			case <-time.After(20 * time.Second):
				t.Fatal("the handler's Write still waits past its deadline")
			}

			s.SetWriteDeadline(time.Now().Add(200 * time.Millisecond))
			n, err := s.Write(make([]byte, 8<<20))
			timedOut("Write", err)
			if n >= 8<<20 {
				t.Errorf("Write past its deadline wrote all %d bytes", n)
			}
			finish <- struct{}{}
		})
	}
}

// Closing a stream whose write side the other end already stopped (a
// handler that returned, a client that closed) is not an error, and
// CloseWrite then says what a Write would: quic-go's own "close called for
// canceled stream" came out of Close after every download read to its end.
func TestStreamCloseAfterTheOtherEndStoppedReading(t *testing.T) {
	r := streamRouter()
	HandleStream(r, "file/hello", func(ctx context.Context, _ struct{}, s *Stream) error {
		_, err := s.Write([]byte("hello"))
		return err
	})
	handlerClose := make(chan error, 1)
	HandleStream(r, "file/closed-by-client", func(ctx context.Context, _ struct{}, s *Stream) error {
		<-ctx.Done() // the client's Close
		handlerClose <- s.Close()
		return nil
	})
	e := newCarrierEnv(t, Options{Router: r})
	for _, carrier := range streamCarriers {
		t.Run(carrier.String(), func(t *testing.T) {
			c := e.dial(t, carrier, ClientOptions{})
			ctx := context.Background()
			download := func() *Stream {
				t.Helper()
				s, err := c.OpenStream(ctx, "file/hello", nil)
				if err != nil {
					t.Fatal(err)
				}
				if got, err := io.ReadAll(s); err != nil || string(got) != "hello" {
					t.Fatalf("read %q, %v", got, err)
				}
				// The handler's STOP_SENDING follows its FIN.
				select {
				case <-s.raw.Context().Done():
				case <-time.After(5 * time.Second):
					t.Fatal("the handler's STOP_SENDING did not come")
				}
				return s
			}

			s := download()
			if err := s.Close(); err != nil {
				t.Errorf("Close after a download read to its end: %v", err)
			}
			s = download()
			var se *Error
			if err := s.CloseWrite(); !errors.As(err, &se) || se.Code != 0 {
				t.Errorf("CloseWrite after the handler returned: %v, want the *Error of code 0 a Write gets", err)
			}

			// A Close that interrupted a Write, then another.
			s, err := c.OpenStream(ctx, "file/closed-by-client", nil)
			if err != nil {
				t.Fatal(err)
			}
			written := make(chan error, 1)
			go func() { _, err := s.Write(make([]byte, 8<<20)); written <- err }()
			time.Sleep(200 * time.Millisecond)
			if err := s.Close(); err != nil {
				t.Errorf("Close interrupting a Write: %v", err)
			}
			<-written
			if err := s.Close(); err != nil {
				t.Errorf("Close again: %v", err)
			}
			select {
			case err := <-handlerClose:
				if err != nil {
					t.Errorf("the handler's Close after its client's: %v", err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("the handler's ctx did not end at its client's Close")
			}
		})
	}
}

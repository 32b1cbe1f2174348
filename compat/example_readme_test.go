package compat_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/hotpath-go/hotpath/compat"
)

type sayRequest struct {
	Text string `json:"text"`
}

type chatLine struct {
	From string `json:"from"`
	Text string `json:"text"`
}

// A server with two methods and rooms, mounted on a mux, and a Go client
// that calls, joins a room, emits to it and receives events: the README's
// example, run by go test.
func Example_webSocket() {
	// Server: register everything, then hand the Router to NewServer.
	r := compat.NewRouter()
	compat.Handle(r, "echo/say", func(ctx context.Context, req sayRequest) (sayRequest, error) {
		if req.Text == "" {
			return req, &compat.Error{Code: 1000, Message: "empty text"}
		}
		return req, nil
	})
	// A handler that blocks (I/O, sleeps, asks the client) runs Async.
	compat.Handle(r, "user/hello", func(ctx context.Context, name string) (string, error) {
		// PeerFrom gives the calling connection: send it an event.
		compat.PeerFrom(ctx).Event("notice", "welcome, "+name)
		return "hello " + name, nil
	})
	// Asking the client from a handler: Async, since the answer is read by
	// the connection's read loop.
	compat.Handle(r, "user/delete", func(ctx context.Context, name string) (bool, error) {
		var ok bool
		if err := compat.PeerFrom(ctx).Ask(ctx, "ui/confirm", "delete "+name+"?", &ok); err != nil {
			return false, err
		}
		return ok, nil
	}, compat.Async())
	srv, err := compat.NewServer(compat.Options{
		Router: r,
		// Any client may join any room unless the server decides; here a
		// room "private:<name>" admits only the connection that
		// Authenticate named so (Peer.Identity), none in this example.
		AllowJoin: func(p *compat.Peer, room string) error {
			if owner, private := strings.CutPrefix(room, "private:"); private && p.Identity() != owner {
				return compat.ErrUnauthorized
			}
			return nil
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/ws", srv)
	mux.Handle("GET /metrics", srv.MetricsHandler())
	hs := httptest.NewServer(mux) // or an http.Server with timeouts (README)
	defer hs.Close()
	defer srv.Shutdown(context.Background()) // closes connections with 1001

	// Client.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	url := "ws" + strings.TrimPrefix(hs.URL, "http") + "/ws"
	// The client answers the server's asks with a Router of its own.
	asks := compat.NewRouter()
	compat.Handle(asks, "ui/confirm", func(ctx context.Context, q string) (bool, error) {
		return q == "delete bob?", nil
	})
	c, err := compat.Dial(ctx, url, compat.ClientOptions{Handlers: asks})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	var out sayRequest
	if err := c.Call(ctx, "echo/say", sayRequest{Text: "hi"}, &out); err != nil {
		log.Fatal(err)
	}
	fmt.Println("echo/say:", out.Text)

	err = c.Call(ctx, "echo/say", sayRequest{}, &out)
	var e *compat.Error
	if errors.As(err, &e) {
		fmt.Println("error code:", e.Code, e.Message)
	}
	err = c.Call(ctx, "no/such", nil, nil)
	fmt.Println("not found:", errors.Is(err, compat.ErrNotFound))

	notices := make(chan string, 1)
	c.On("notice", func(m compat.Message) {
		var s string
		m.Decode(&s)
		notices <- s
	})
	var greeting string
	if err := c.Call(ctx, "user/hello", "ann", &greeting); err != nil {
		log.Fatal(err)
	}
	fmt.Println(greeting, "/", <-notices)
	var deleted bool
	if err := c.Call(ctx, "user/delete", "bob", &deleted); err != nil {
		log.Fatal(err)
	}
	fmt.Println("deleted:", deleted)

	lines := make(chan chatLine, 1)
	c.OnRoom("lobby", "message", func(m compat.Message) {
		var l chatLine
		m.Decode(&l) // m.Data is valid only during the handler
		lines <- l
	})
	members, err := c.Join(ctx, "lobby")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("lobby members:", members)
	_, err = c.Join(ctx, "private:bob")
	fmt.Println("private:bob refused:", errors.Is(err, compat.ErrUnauthorized))
	// Emit to the room, this client included (exceptSelf false).
	if err := c.Emit("lobby", "message", chatLine{From: "ann", Text: "hello"}, false); err != nil {
		log.Fatal(err)
	}
	l := <-lines
	fmt.Printf("%s: %s\n", l.From, l.Text)
	// The server emits to a room as well, framed and compressed once.
	res, err := srv.Emit("lobby", "message", chatLine{From: "server", Text: "hi all"})
	if err != nil {
		log.Fatal(err)
	}
	l = <-lines
	fmt.Printf("%s: %s (delivered %d, dropped %d)\n", l.From, l.Text, res.Delivered, res.Dropped)

	// Output:
	// echo/say: hi
	// error code: 1000 empty text
	// not found: true
	// hello ann / welcome, ann
	// deleted: true
	// lobby members: 1
	// private:bob refused: true
	// ann: hello
	// server: hi all (delivered 1, dropped 0)
}

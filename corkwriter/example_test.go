package corkwriter_test

import (
	"fmt"
	"io"
	"net"

	"github.com/hotpath-go/hotpath/corkwriter"
)

// loopback returns both ends of a TCP connection on 127.0.0.1.
func loopback() (client, server net.Conn) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	defer ln.Close()
	done := make(chan net.Conn)
	go func() {
		c, _ := ln.Accept()
		done <- c
	}()
	client, err = net.Dial("tcp", ln.Addr().String())
	if err != nil {
		panic(err)
	}
	return client, <-done
}

// A turn: the answers to three calls and a shared broadcast frame leave in
// one writev at Uncork.
func ExampleWriter() {
	conn, peer := loopback()
	defer peer.Close()

	broadcast := []byte("[room news, encoded once for every member]")
	w := corkwriter.NewWriter(conn, nil)
	w.Cork()
	for _, answer := range []string{"ok 1;", "ok 2;", "ok 3;"} {
		w.Write([]byte(answer)) // copied into a pooled chunk
	}
	w.WriteShared(broadcast) // referenced, never copied
	if err := w.Uncork(); err != nil {
		fmt.Println(err)
	}
	conn.Close()

	got, _ := io.ReadAll(peer)
	fmt.Printf("%s\n", got)
	// Output:
	// ok 1;ok 2;ok 3;[room news, encoded once for every member]
}

// An Outbox takes frames from any goroutine, reports a status for each, and
// refuses frames once it is closed.
func ExampleOutbox() {
	conn, peer := loopback()
	defer peer.Close()

	o := corkwriter.NewOutbox(conn, &corkwriter.OutboxOptions{
		MaxQueued: 1 << 20,
		Overflow:  corkwriter.DropOnBackpressure,
		OnError:   func(error) { conn.Close() },
	})
	o.Cork() // the owner's turn: frames wait for Uncork
	fmt.Println(o.Send([]byte("answer;")))
	fmt.Println(o.SendShared([]byte("broadcast;")))
	if err := o.Uncork(); err != nil {
		fmt.Println(err)
	}

	o.Close()
	fmt.Println(o.Send([]byte("too late")))
	conn.Close()

	got, _ := io.ReadAll(peer)
	fmt.Printf("%s\n", got)
	// Output:
	// queued
	// queued
	// closed
	// answer;broadcast;
}

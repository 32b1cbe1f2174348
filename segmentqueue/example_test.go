package segmentqueue_test

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing/iotest"

	"github.com/hotpath-go/hotpath/segmentqueue"
)

// A decoder of length-prefixed messages reads whatever the network delivers
// into the queue and takes out every message that is complete. The
// 2-byte length prefix of the second message straddles two reads.
func Example() {
	reads := [][]byte{
		{0, 5, 'h', 'e', 'l', 'l', 'o', 0},
		{12, 'c', 'o', 'n', 't'},
		{'i', 'n', 'u', 'a', 't', 'i', 'o', 'n'},
	}
	var q segmentqueue.Queue
	var scratch [2]byte
	for _, read := range reads {
		if err := q.Push(read); err != nil { // no copy: the queue owns read now
			fmt.Println(err)
			return
		}
		for q.Len() >= 2 {
			prefix, _ := q.Peek(2, scratch[:])
			n := int(binary.BigEndian.Uint16(prefix))
			if q.Len() < 2+n {
				break // wait for the next read
			}
			q.Discard(2)
			msg, _ := q.Next(n) // one copy: "continuation" spans two reads
			fmt.Printf("%s\n", msg)
		}
	}
	q.Release() // idle: nothing stays pooled behind the queue
	// Output:
	// hello
	// continuation
}

// A WebSocket decoder unmasks a payload in place, segment by segment,
// without first joining it, then takes it.
func ExampleQueue_Segments() {
	key := [4]byte{1, 2, 3, 4}
	masked := []byte("bytes")
	for i := range masked {
		masked[i] ^= key[i%4]
	}
	var q segmentqueue.Queue
	q.Push(masked[:2]) // two reads of one frame payload
	q.Push(masked[2:])

	segs, _ := q.Segments(q.Len(), nil)
	pos := 0
	for _, seg := range segs {
		for i := range seg {
			seg[i] ^= key[pos%4]
			pos++
		}
	}
	payload, _ := q.Next(q.Len())
	fmt.Printf("%d segment(s): %s\n", len(segs), payload)
	// Output: 2 segment(s): bytes
}

// A flood of tiny segments hits MaxSegments long before MaxBytes.
func ExampleLimitError() {
	q := segmentqueue.New(segmentqueue.Limits{MaxSegments: 3})
	var err error
	for err == nil {
		err = q.Push([]byte{'x'})
	}
	var limit *segmentqueue.LimitError
	if errors.As(err, &limit) {
		fmt.Println(limit.Limit, limit.Max, errors.Is(err, segmentqueue.ErrLimit))
	}
	// Output: MaxSegments 3 true
}

// readMessages is the README's loop, word for word, so that the compiler
// and ExampleQueue_Fill keep it true: it reads 2-byte-length-prefixed
// messages from conn until conn fails.
func readMessages(conn io.Reader, handle func(msg []byte)) error {
	var q segmentqueue.Queue // zero value: default limits
	var scratch [14]byte     // the largest header we peek
	for {
		_, err := q.Fill(conn) // or q.Push(read), or q.Write(buf[:n])
		for q.Len() >= 2 {
			hdr, _ := q.Peek(2, scratch[:]) // copied into scratch only if it straddles
			n := int(binary.BigEndian.Uint16(hdr))
			if q.Len() < 2+n {
				break
			}
			q.Discard(2)
			msg, _ := q.Next(n) // zero copies inside one segment, one otherwise
			handle(msg)         // valid until the next Discard/Next/Read/Release/Reset
		}
		q.Release() // going idle: pooled memory goes back, nothing stays lent
		if err != nil {
			return err
		}
	}
}

// The README's loop over a connection that delivers one byte per read:
// every prefix and every message straddles reads.
func ExampleQueue_Fill() {
	conn := iotest.OneByteReader(strings.NewReader("\x00\x05hello\x00\x0ccontinuation"))
	err := readMessages(conn, func(msg []byte) { fmt.Printf("%s\n", msg) })
	fmt.Println("then:", err)
	// Output:
	// hello
	// continuation
	// then: EOF
}

package main

import (
	"bytes"
	"compress/flate"
	"errors"
	"testing"

	"github.com/hotpath-go/hotpath/deflatecache"
	"github.com/hotpath-go/hotpath/wsframe"
)

// tail is the end of a sync flush, which RFC 7692 §7.2.1 has the sender
// remove: "Remove 4 octets (that are 0x00 0x00 0xff 0xff) from the tail end".
var tail = []byte{0x00, 0x00, 0xff, 0xff}

// compressStd compresses msgs as a permessage-deflate peer built on
// compress/flate does: one flate.Writer for the whole connection with
// context takeover (each message may refer back into the ones before), or a
// fresh one per message without; a sync flush ends each message and its
// 00 00 ff ff tail is removed.
func compressStd(t *testing.T, msgs [][]byte, level int, takeover bool) [][]byte {
	var out [][]byte
	var buf bytes.Buffer
	var w *flate.Writer
	for _, m := range msgs {
		if w == nil || !takeover {
			buf.Reset()
			var err error
			if w, err = flate.NewWriter(&buf, level); err != nil {
				t.Fatal(err)
			}
		}
		start := buf.Len()
		if _, err := w.Write(m); err != nil {
			t.Fatal(err)
		}
		if err := w.Flush(); err != nil {
			t.Fatal(err)
		}
		p := bytes.Clone(buf.Bytes()[start:])
		if !bytes.HasSuffix(p, tail) {
			t.Fatalf("compress/flate's sync flush does not end in 00 00 ff ff: % x", p)
		}
		out = append(out, p[:len(p)-len(tail)])
	}
	return out
}

// FuzzInflateStream: a stream of messages compressed by compress/flate as
// a peer with the full 15-bit window compresses them, with context
// takeover (so messages refer back into earlier ones, up to 32 KiB) or
// without, inflates through deflatecache's server-side Conn to the same
// messages; a cap of exactly a message's size lets it through, one byte
// less is ErrTooLarge (1009). deflatecache's own FuzzInflate compares
// single payloads, mostly invalid, with compress/flate; this target feeds
// it the valid multi-message streams a real client sends.
func FuzzInflateStream(f *testing.F) {
	f.Add([]byte(`{"t":"msg","text":"hello"}{"t":"msg","text":"hello again"}{"t":"msg","text":"hello"}`), []byte{26, 32}, uint8(1), true)
	f.Add(bytes.Repeat([]byte("abcdefgh"), 5000), []byte{0, 200, 100}, uint8(6), true)
	f.Add(bytes.Repeat([]byte{0}, 3000), []byte{1, 1, 1}, uint8(9), false)
	f.Add([]byte{}, []byte{0}, uint8(0), true)
	f.Fuzz(func(t *testing.T, data, cuts []byte, levelSel uint8, takeover bool) {
		var msgs [][]byte
		for _, c := range cuts {
			n := min(len(data), int(c)*int(c)) // sizes up to 64 KiB, small ones often
			msgs = append(msgs, data[:n])
			data = data[n:]
		}
		msgs = append(msgs, data)
		levels := []int{flate.HuffmanOnly, flate.DefaultCompression, 1, 2, 3, 4, 5, 6, 7, 8, 9}
		level := levels[int(levelSel)%len(levels)]
		comp := compressStd(t, msgs, level, takeover)
		// run inflates the messages in order. The message at index short is
		// first inflated under a cap one byte below its size (a cap of 0
		// means the default, so only for messages of 2 bytes or more),
		// which must fail with ErrTooLarge; with context takeover that ends
		// the stream, and the run.
		run := func(short int) {
			c, err := deflatecache.NewConn(deflatecache.Params{ClientNoContextTakeover: !takeover}, wsframe.Server, deflatecache.Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			for i, m := range msgs {
				if i == short || !takeover && len(m) > 1 {
					if _, err := c.Inflate(nil, comp[i], int64(len(m)-1)); !errors.Is(err, deflatecache.ErrTooLarge) {
						t.Fatalf("message %d of %d bytes under a cap of %d: %v", i, len(m), len(m)-1, err)
					}
					if takeover {
						return
					}
				}
				got, err := c.Inflate(nil, comp[i], max(int64(len(m)), 1))
				if err != nil || !bytes.Equal(got, m) {
					t.Fatalf("message %d (%d bytes, level %d, takeover %v): %v, %d bytes differ", i, len(m), level, takeover, err, len(got))
				}
			}
		}
		run(-1)
		if last := len(msgs) - 1; takeover && len(msgs[last]) > 1 {
			run(last)
		}
	})
}

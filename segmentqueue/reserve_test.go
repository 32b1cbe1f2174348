package segmentqueue_test

import (
	"io"
	"testing"

	sq "github.com/hotpath-go/hotpath/segmentqueue"
)

// sizeReader records the size of each buffer Fill hands to Read.
type sizeReader struct {
	data  []byte
	sizes []int
}

func (r *sizeReader) Read(p []byte) (int, error) {
	r.sizes = append(r.sizes, len(p))
	if len(r.data) == 0 {
		return 0, io.EOF
	}
	n := copy(p, r.data)
	r.data = r.data[n:]
	return n, nil
}

// A Reserve ends with the bytes it announced: once they are taken (Next,
// or Discard), the next Fill into the empty queue reads into a chunk of
// the usual size. The reservation stayed, and every later Fill read into a
// fresh chunk of the reserved size, which a connection waiting in Fill then
// held while idle (a modules audit: 1 MiB for each 2-byte message after
// one of 1 MiB).
func TestReserveEndsWithItsBytes(t *testing.T) {
	const big = 1 << 20
	for _, take := range []string{"next", "discard"} {
		t.Run(take, func(t *testing.T) {
			var q sq.Queue
			r := &sizeReader{data: make([]byte, big)}
			if err := q.Reserve(big); err != nil {
				t.Fatal(err)
			}
			for i := 0; q.Len() < big && i < 1000; i++ {
				if _, err := q.Fill(r); err != nil {
					t.Fatal(err)
				}
			}
			var err error
			if take == "next" {
				_, err = q.Next(big)
			} else {
				err = q.Discard(big)
			}
			if err != nil {
				t.Fatal(err)
			}
			q.Release()
			small := &sizeReader{data: []byte("hi")}
			if _, err := q.Fill(small); err != nil {
				t.Fatal(err)
			}
			if len(small.sizes) != 1 || small.sizes[0] >= big {
				t.Errorf("a 2-byte read after the reserved message was handed buffers of %v bytes", small.sizes)
			}
		})
	}
}

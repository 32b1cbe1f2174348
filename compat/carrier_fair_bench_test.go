package compat

import (
	"bufio"
	"encoding/binary"
	"io"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/quic-go/quic-go"
)

// BenchmarkQUICRawFair puts next to BenchmarkCarrierEcho/quic/small-64/raw
// the per-message work any RPC layer has to do over the same stack, added
// one step at a time, 64 messages of 32 B in flight on one stream:
//
//	server-frames: the server parses each length-prefixed message and
//	writes each echo into a buffer flushed once per read (instead of
//	io.Copy echoing whatever bytes arrived), client as in raw.
//	callers: that server, and 64 goroutines each sending a message with a
//	4-byte id and waiting on a channel of its own until a reader
//	goroutine, matching the id, hands it its answer (instead of one writer
//	and one reader that only counts echoes).
func BenchmarkQUICRawFair(b *testing.B) {
	msg := make([]byte, 32)
	b.Run("server-frames", func(b *testing.B) {
		e := dialQUICFramedEcho(b)
		b.SetBytes(int64(len(msg)))
		benchRaw(b, e, msg, 64)
	})
	b.Run("callers", func(b *testing.B) {
		e := dialQUICFramedEcho(b)
		b.SetBytes(int64(len(msg)))
		benchRawCallers(b, e, msg, 64, false)
	})
	b.Run("callers-writer", func(b *testing.B) {
		e := dialQUICFramedEcho(b)
		b.SetBytes(int64(len(msg)))
		benchRawCallers(b, e, msg, 64, true)
	})
}

// dialQUICFramedEcho is dialQUICEcho with a server that reads messages
// one by one and answers each, the answers of one read in one write.
func dialQUICFramedEcho(b *testing.B) *streamEcho {
	e := dialRawQUIC(b, func(str *quic.Stream) {
		br := bufio.NewReaderSize(str, 64<<10)
		var out, in []byte
		for {
			n, err := binary.ReadUvarint(br)
			if err != nil {
				return
			}
			in = append(in[:0], make([]byte, n)...)
			if _, err := io.ReadFull(br, in); err != nil {
				return
			}
			out = append(binary.AppendUvarint(out, n), in...)
			if br.Buffered() == 0 {
				if _, err := str.Write(out); err != nil {
					return
				}
				out = out[:0]
			}
		}
	})
	b.Cleanup(e.close)
	return e
}

// benchRawCallers runs b.N round trips from inFlight goroutines, each
// writing its message (a 4-byte id, then msg) and waiting for its echo,
// which one reader goroutine hands it by id. With writer, callers hand
// their messages to one writer goroutine, which writes all it finds
// waiting in one Write.
func benchRawCallers(b *testing.B, e *streamEcho, msg []byte, inFlight int, writer bool) {
	if err := e.send(msg); err != nil {
		b.Fatal(err)
	}
	if err := e.recv(); err != nil {
		b.Fatal(err)
	}
	var wmu sync.Mutex
	waiters := make([]chan struct{}, inFlight)
	for i := range waiters {
		waiters[i] = make(chan struct{}, 1)
	}
	go func() {
		for {
			if err := e.recv(); err != nil {
				return
			}
			waiters[binary.LittleEndian.Uint32(e.in)] <- struct{}{}
		}
	}()
	outq := make(chan []byte, inFlight)
	if writer {
		go func() {
			var out []byte
			for m := range outq {
				out = append(out[:0], m...)
			more:
				for {
					select {
					case m := <-outq:
						out = append(out, m...)
					default:
						break more
					}
				}
				if _, err := e.w.Write(out); err != nil {
					return
				}
			}
		}()
		defer close(outq)
	}
	b.ResetTimer()
	defer reportCPU(b)()
	var next atomic.Int64
	var wg sync.WaitGroup
	for i := range inFlight {
		wg.Go(func() {
			body := binary.LittleEndian.AppendUint32(nil, uint32(i))
			body = append(body, msg...)
			var out []byte
			for next.Add(1) <= int64(b.N) {
				if writer {
					outq <- append(binary.AppendUvarint(nil, uint64(len(body))), body...)
					<-waiters[i]
					continue
				}
				out = append(binary.AppendUvarint(out[:0], uint64(len(body))), body...)
				wmu.Lock()
				_, err := e.w.Write(out)
				wmu.Unlock()
				if err != nil {
					b.Error(err)
					return
				}
				<-waiters[i]
			}
		})
	}
	wg.Wait()
}

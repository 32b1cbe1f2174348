package compat

import (
	"bytes"
	"context"
	"encoding/binary"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gobwas/ws"
	"github.com/gobwas/ws/wsutil"
	"github.com/hotpath-go/hotpath/compat/wire"
	"github.com/hotpath-go/hotpath/dispatch"
	"github.com/hotpath-go/hotpath/wsframe"
)

// benchServer starts a server with the test router for benchmarks.
func benchClient(b *testing.B, copts ClientOptions) *Client {
	b.Helper()
	_, addr := newTestServer(b, Options{Logger: slog.New(slog.DiscardHandler)})
	c, err := Dial(context.Background(), "ws://"+addr+"/ws", copts)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { c.Close() })
	return c
}

// BenchmarkCall is one call in flight at a time through the whole stack:
// client encode and frame, loopback TCP, server decode, dispatch, handler,
// answer, client decode.
func BenchmarkCall(b *testing.B) {
	benchCall(b, context.Background(), smallPayload)
}

// BenchmarkCallCancellable is BenchmarkCall with a context that can be
// canceled, as most callers pass: a caller reading its own answer must be
// woken if that context ends (readOwnAnswer).
func BenchmarkCallCancellable(b *testing.B) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	benchCall(b, ctx, smallPayload)
}

// BenchmarkCall10KiB is BenchmarkCall with a 10 KiB payload each way, the
// bench's large echo case: what the Go client copies, masks and allocates
// per byte.
func BenchmarkCall10KiB(b *testing.B) {
	benchCall(b, context.Background(), payload10KiB())
}

// smallPayload is the 32-byte request of the small-call benchmarks.
var smallPayload = []byte(`{"text":"0123456789abcdef0123456789"}`)

// benchCall makes calls of req with ctx one at a time, each answer into
// the same slice.
func benchCall(b *testing.B, ctx context.Context, req []byte) {
	c := benchClient(b, ClientOptions{})
	var resp []byte
	b.SetBytes(int64(len(req)))
	b.ReportAllocs()
	defer reportCPU(b)()
	for b.Loop() {
		if err := c.Call(ctx, "echo/raw", req, &resp); err != nil {
			b.Fatal(err)
		}
		if len(resp) != len(req) {
			b.Fatalf("answer of %d bytes, want %d", len(resp), len(req))
		}
	}
}

// BenchmarkCall64 keeps 64 calls in flight from 64 goroutines; concurrent
// calls leave in batches and their answers in one writev per read.
func BenchmarkCall64(b *testing.B) {
	benchCalls64(b, smallPayload)
}

// BenchmarkCall64x10KiB is BenchmarkCall64 with 10 KiB each way: answers
// that straddle the client's reads, and batches of large calls.
func BenchmarkCall64x10KiB(b *testing.B) {
	benchCalls64(b, payload10KiB())
}

// benchCalls64 makes calls of req from 64 goroutines, with and without
// client batching.
func benchCalls64(b *testing.B, req []byte) {
	for _, nobatch := range []bool{false, true} {
		name := "batching"
		if nobatch {
			name = "no-batching"
		}
		b.Run(name, func(b *testing.B) {
			c := benchClient(b, ClientOptions{NoBatching: nobatch})
			ctx := context.Background()
			b.SetBytes(int64(len(req)))
			b.ReportAllocs()
			b.ResetTimer()
			var wg sync.WaitGroup
			for g := range 64 {
				// b.N calls in all, not 64 more: ns/op is per call.
				per := b.N / 64
				if g < b.N%64 {
					per++
				}
				wg.Add(1)
				go func() {
					defer wg.Done()
					var resp []byte
					for range per {
						if err := c.Call(ctx, "echo/raw", req, &resp); err != nil {
							b.Error(err)
							return
						}
					}
				}()
			}
			wg.Wait()
		})
	}
}

// payload10KiB is the 10 KiB payload of the large-call benchmarks.
func payload10KiB() []byte {
	p := make([]byte, 10<<10)
	for i := range p {
		p[i] = 'a' + byte(i%26)
	}
	return p
}

// BenchmarkCallMinimalClient is the floor for BenchmarkCall on the same
// server: a client that writes one prebuilt masked frame per call and
// reads the answer into one buffer on the same goroutine, as the bench's
// echo client does, with no packet building, masking, decoding or
// copying per call.
func BenchmarkCallMinimalClient(b *testing.B) {
	benchMinimalClient(b, smallPayload)
}

// BenchmarkCallMinimalClient10KiB is the floor for BenchmarkCall10KiB.
func BenchmarkCallMinimalClient10KiB(b *testing.B) {
	benchMinimalClient(b, payload10KiB())
}

// benchMinimalClient makes calls of echo/raw with req as the minimal
// client of BenchmarkCallMinimalClient.
func benchMinimalClient(b *testing.B, req []byte) {
	_, addr := newTestServer(b, Options{Logger: slog.New(slog.DiscardHandler)})
	nc, br, _, err := ws.Dialer{Protocols: []string{Subprotocol}}.Dial(context.Background(), "ws://"+addr+"/ws")
	if err != nil {
		b.Fatal(err)
	}
	defer nc.Close()
	pkt := wire.AppendCall(nil, dispatch.KindCall, 1, "echo/raw", 0, req)
	h := wsframe.Header{Flags: wsframe.Fin, Opcode: wsframe.OpBinary, Length: int64(len(pkt)), Masked: true, Key: wsframe.NewMaskKey()}
	frame := wsframe.AppendHeader(nil, h)
	start := len(frame)
	frame = append(frame, pkt...)
	wsframe.Mask(frame[start:], h.Key, 0)

	buf := make([]byte, 64<<10)
	have := 0
	if br != nil { // bytes that came with the upgrade response
		have, _ = br.Read(buf)
		ws.PutReader(br)
	}
	// readMessage reads until one binary server frame (unmasked, under 64
	// KiB) is whole, and drops it, with any ping before it. The client
	// sends no capabilities, so the server sends none: a wait for them
	// would last until the first keepalive ping.
	readMessage := func() {
		for {
			if size, ok := serverFrameSize(buf[:have]); ok {
				isBinary := buf[0]&0xF == byte(wsframe.OpBinary)
				have = copy(buf, buf[size:have])
				if isBinary {
					return
				}
				continue
			}
			n, err := nc.Read(buf[have:])
			if err != nil {
				b.Fatal(err)
			}
			have += n
		}
	}
	b.ReportAllocs()
	defer reportCPU(b)()
	for b.Loop() {
		if _, err := nc.Write(frame); err != nil {
			b.Fatal(err)
		}
		readMessage()
	}
}

// serverFrameSize reports the size of the unmasked frame of under 64 KiB
// at the start of b, and whether b holds all of it.
func serverFrameSize(b []byte) (int, bool) {
	if len(b) < 2 {
		return 0, false
	}
	size, n := 2, int(b[1]&0x7f)
	if n == 126 {
		if len(b) < 4 {
			return 0, false
		}
		size, n = 4, int(binary.BigEndian.Uint16(b[2:]))
	}
	size += n
	return size, len(b) >= size
}

// BenchmarkCallRawClient is BenchmarkCall's call made by a bare gobwas/ws
// client that writes the request and reads the answer on one goroutine:
// the round trip without the Go client, what BenchmarkCall is measured
// against. With handoff, a reader goroutine reads the answer and hands it
// to the caller over a channel, as a client with a dedicated read loop
// does: the cost of that one extra wake-up is why the Go client's callers
// read their own answers (sharedread.go).
func BenchmarkCallRawClient(b *testing.B) {
	for _, handoff := range []bool{false, true} {
		name := "same-goroutine"
		if handoff {
			name = "reader-goroutine"
		}
		b.Run(name, func(b *testing.B) {
			_, addr := newTestServer(b, Options{Logger: slog.New(slog.DiscardHandler)})
			nc, _, _, err := ws.Dialer{Protocols: []string{Subprotocol}}.Dial(context.Background(), "ws://"+addr+"/ws")
			if err != nil {
				b.Fatal(err)
			}
			defer nc.Close()
			rd := wsutil.Reader{Source: nc, State: ws.StateClientSide}
			buf := make([]byte, 4096)
			// readMessage reads the next binary message, skipping pings.
			// The client sends no capabilities, so none comes first.
			readMessage := func() error {
				for {
					h, err := rd.NextFrame()
					if err != nil {
						return err
					}
					if _, err = io.ReadFull(&rd, buf[:h.Length]); err != nil || h.OpCode == ws.OpBinary {
						return err
					}
				}
			}
			answered := make(chan error, 1)
			if handoff {
				go func() {
					for {
						err := readMessage()
						answered <- err
						if err != nil {
							return
						}
					}
				}()
			}
			req := wire.AppendCall(nil, dispatch.KindCall, 1, "echo/raw", 0, smallPayload)
			b.ReportAllocs()
			for b.Loop() {
				if err := wsutil.WriteClientBinary(nc, req); err != nil {
					b.Fatal(err)
				}
				err := error(nil)
				if handoff {
					err = <-answered
				} else {
					err = readMessage()
				}
				if err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkRoomEmit is the room fan-out of the bench's fanout scenario in
// process: emits of 512 bytes to a room of 200 members, in bursts of 100
// back to back, each burst timed until every member has read all of it.
// Members are minimal clients that count frames. writev/member/burst is
// how many write system calls the outboxes made per member per burst: a
// burst coalesces when it is about 1.
func BenchmarkRoomEmit(b *testing.B) {
	const members, burst = 200, 100
	// Without presence events: since they coalesce (100 ms by default),
	// how many arrive is not known, and waiting for one per join hung.
	s, addr := newTestServer(b, Options{Compression: Compression{Disabled: true}, NoPresence: true, Logger: slog.New(slog.DiscardHandler)})
	// The members count what they read into received and signal reached
	// when it gets to want; the emitter sleeps meanwhile, as a spinning
	// wait would take a core from the members.
	var received, want atomic.Int64
	reached := make(chan struct{}, 1)
	for range members {
		nc, br, _, err := ws.Dialer{Protocols: []string{Subprotocol}}.Dial(context.Background(), "ws://"+addr+"/ws")
		if err != nil {
			b.Fatal(err)
		}
		defer nc.Close()
		go func() {
			buf := make([]byte, 64<<10)
			have := 0
			if br != nil {
				have, _ = br.Read(buf)
				ws.PutReader(br)
			}
			for {
				frames, off := 0, 0
				for {
					size, ok := serverFrameSize(buf[off:have])
					if !ok {
						break
					}
					off += size
					frames++
				}
				have = copy(buf, buf[off:have])
				if frames > 0 && received.Add(int64(frames)) >= want.Load() {
					select {
					case reached <- struct{}{}:
					default:
					}
				}
				n, err := nc.Read(buf[have:])
				if err != nil {
					return
				}
				have += n
			}
		}()
	}
	peers := s.snapshotPeers()
	for len(peers) < members {
		time.Sleep(time.Millisecond)
		peers = s.snapshotPeers()
	}
	for _, p := range peers {
		if _, err := s.Join(p, "lobby"); err != nil {
			b.Fatal(err)
		}
	}
	// wait returns once the members have read n frames in all.
	wait := func(n int64) {
		want.Store(n)
		for received.Load() < n {
			<-reached
		}
	}
	writes := func() (n uint64) {
		for _, p := range peers {
			n += p.link.(*wsConn).out.Stats().Syscalls
		}
		return n
	}
	payload := bytes.Repeat([]byte("a"), 512)
	w0 := writes()
	b.ReportAllocs()
	b.ResetTimer()
	bursts := 0
	for n := 0; n < b.N; n += burst {
		k := min(burst, b.N-n) // b.N emits in all: ns/op is per emit
		bursts++
		next := received.Load() + int64(members*k)
		for range k {
			if _, err := s.Emit("lobby", "msg", payload); err != nil {
				b.Fatal(err)
			}
		}
		wait(next)
	}
	b.StopTimer()
	b.ReportMetric(float64(writes()-w0)/float64(members*bursts), "writev/member/burst")
}

package compat

import (
	"bytes"
	"context"
	"sync/atomic"
	"testing"
	"time"
)

// BenchmarkUnreliableEmit is a room fan-out of unreliable emits (datagrams
// where the carrier has them): 256-byte events from the server to a room
// of 32 Go clients on one carrier, in bursts of 16, each burst timed until
// every member has its 16 events or 100 ms have passed (a datagram may be
// lost). ns/op is per emit, delivered to the whole room; delivered% is how
// many of the events sent the members received.
func BenchmarkUnreliableEmit(b *testing.B) {
	const members, burst = 32, 16
	for _, carrier := range []Carrier{CarrierQUIC, CarrierWebTransport, CarrierSCTP} {
		b.Run(carrierName(carrier), func(b *testing.B) {
			e := newCarrierEnv(b, Options{})
			var received atomic.Int64
			arrived := make(chan struct{}, 1)
			for i := range members {
				c := e.dial(b, carrier, ClientOptions{Reconnect: Reconnect{Disabled: true}})
				c.OnRoom("ticks", "tick", func(Message) {
					received.Add(1)
					select {
					case arrived <- struct{}{}:
					default:
					}
				})
				if _, err := c.Join(context.Background(), "ticks"); err != nil {
					b.Fatalf("member %d: %v", i, err)
				}
			}
			payload := bytes.Repeat([]byte("a"), 256)
			sent := int64(0)
			b.ReportAllocs()
			b.ResetTimer()
			for n := 0; n < b.N; n += burst {
				for range burst {
					if _, err := e.srv.EmitUnreliable("ticks", "tick", payload); err != nil {
						b.Fatal(err)
					}
				}
				sent += members * burst
				giveUp := time.After(100 * time.Millisecond)
			wait:
				for received.Load() < sent {
					select {
					case <-arrived:
					case <-giveUp:
						break wait
					}
				}
			}
			b.StopTimer()
			b.ReportMetric(100*float64(received.Load())/float64(sent), "delivered%")
		})
	}
}

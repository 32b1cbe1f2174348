package scheduler_test

import (
	"fmt"
	"slices"
	"time"

	"github.com/hotpath-go/hotpath/scheduler"
)

// A client times out its calls: one scheduler, one callback, the call id as
// the value. A FakeClock makes the example's time exact.
func Example() {
	clock := scheduler.NewFakeClock(time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC))
	s := scheduler.New(func(ids []uint64) {
		slices.Sort(ids) // the batch is ours until we return
		fmt.Println(clock.Now().Format("15:04:05.000"), "timed out:", ids)
	}, scheduler.WithGranularity(10*time.Millisecond), scheduler.WithClock(clock))
	defer s.Stop()

	s.ArmAfter(25*time.Millisecond, 1)
	answered := s.ArmAfter(25*time.Millisecond, 2)
	s.ArmAfter(21*time.Millisecond, 3)
	s.ArmAfter(50*time.Millisecond, 4)
	s.Cancel(answered) // call 2 was answered in time

	clock.Advance(time.Second)
	// Output:
	// 00:00:00.030 timed out: [1 3]
	// 00:00:00.050 timed out: [4]
}

type conn struct {
	name string
	idle scheduler.Handle
}

// A server closes idle connections: every read pushes the connection's
// deadline out with Reset, which is O(1) and, within one bucket, only
// rewrites a number.
func ExampleScheduler_ResetAfter() {
	const idleTimeout = 30 * time.Second
	clock := scheduler.NewFakeClock(time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC))
	s := scheduler.New(func(idle []*conn) {
		for _, c := range idle {
			fmt.Println(clock.Now().Format("15:04:05"), "closing idle", c.name)
		}
	}, scheduler.WithGranularity(time.Second), scheduler.WithClock(clock))
	defer s.Stop()

	a, b := &conn{name: "a"}, &conn{name: "b"}
	a.idle = s.ArmAfter(idleTimeout, a)
	b.idle = s.ArmAfter(idleTimeout, b)
	for range 5 { // a reads every 20 s, b never does
		clock.Advance(20 * time.Second)
		s.ResetAfter(a.idle, idleTimeout)
	}
	clock.Advance(time.Minute)
	// Output:
	// 00:00:30 closing idle b
	// 00:02:10 closing idle a
}

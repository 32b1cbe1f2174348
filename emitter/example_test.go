package emitter_test

import (
	"errors"
	"fmt"

	"github.com/hotpath-go/hotpath/emitter"
)

// joined is the event a room raises when a member joins.
type joined struct {
	room, user string
}

func Example() {
	var joins emitter.Emitter[joined]

	offLog := joins.On(func(j joined) { fmt.Println("log:", j.user, "joined", j.room) })
	joins.Once(func(j joined) { fmt.Println("first join ever:", j.user) })
	joins.On(func(j joined) { fmt.Println("greet", j.user) })

	joins.Emit(joined{"lobby", "ada"})
	offLog()
	joins.Emit(joined{"lobby", "alan"})
	// Output:
	// log: ada joined lobby
	// first join ever: ada
	// greet ada
	// greet alan
}

// A listener of an ErrorEmitter can refuse an event: the emit stops there
// and returns its error, so the listeners registered after it do not act on
// an event that was refused.
func ExampleErrorEmitter() {
	errFull := errors.New("room is full")
	var joins emitter.ErrorEmitter[joined]
	members := 1
	joins.On(func(j joined) error {
		if members >= 2 {
			return fmt.Errorf("%s cannot join %s: %w", j.user, j.room, errFull)
		}
		return nil
	})
	joins.On(func(j joined) error {
		members++
		fmt.Println("welcome", j.user)
		return nil
	})

	for _, user := range []string{"ada", "alan"} {
		if err := joins.Emit(joined{"lobby", user}); errors.Is(err, errFull) {
			fmt.Println(err)
		}
	}
	// Output:
	// welcome ada
	// alan cannot join lobby: room is full
}

// A listener may remove itself while an emit runs; the emit still calls
// every listener it began with.
func ExampleEmitter_On_offDuringEmit() {
	var e emitter.Emitter[int]
	var off func()
	off = e.On(func(v int) {
		fmt.Println("first listener, event", v)
		off()
	})
	e.On(func(v int) { fmt.Println("second listener, event", v) })
	e.Emit(1)
	e.Emit(2)
	// Output:
	// first listener, event 1
	// second listener, event 1
	// second listener, event 2
}

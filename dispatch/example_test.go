package dispatch_test

import (
	"bytes"
	"errors"
	"fmt"

	"github.com/hotpath-go/hotpath/dispatch"
)

// session is what a server keeps per connection; the handlers receive it.
type session struct {
	user string
}

// method is the handler type the router returns, defined by the server.
type method func(s *session, args []byte) string

func Example() {
	router, err := dispatch.NewRouter([]dispatch.Route[method]{
		{Name: "chat/send", Handler: func(s *session, args []byte) string {
			return s.user + " says " + string(args)
		}},
		{Name: "room/join", Handler: func(s *session, args []byte) string {
			return s.user + " joins " + string(args)
		}},
	})
	if err != nil {
		fmt.Println(err)
		return
	}

	// A call's body here is the method name, a space, then the arguments.
	call := func(s *session, body []byte) error {
		name, args, _ := bytes.Cut(body, []byte(" "))
		m, err := router.Lookup(name)
		if err != nil {
			return err
		}
		fmt.Println(m(s, args))
		return nil
	}
	d := dispatch.NewDispatcher(dispatch.Handlers[*session]{
		Call: call,
		Ping: func(*session, []byte) error { fmt.Println("pong"); return nil },
	})

	s := &session{user: "ada"}
	for _, packet := range [][]byte{
		append([]byte{byte(dispatch.KindCall)}, "chat/send hello"...),
		{byte(dispatch.KindPing)},
		append([]byte{byte(dispatch.KindCall)}, "chat/edit x"...),
		{byte(dispatch.KindResult)},
		{42},
	} {
		err := d.Dispatch(s, packet)
		var unknownMethod *dispatch.UnknownMethodError
		var unhandled *dispatch.UnhandledKindError
		var unknownKind *dispatch.UnknownKindError
		switch {
		case errors.As(err, &unknownMethod):
			fmt.Println("no method", unknownMethod.Method)
		case errors.As(err, &unhandled):
			fmt.Println("a server does not take", unhandled.Kind, "packets")
		case errors.As(err, &unknownKind):
			fmt.Println("not a packet kind:", byte(unknownKind.Kind))
		}
	}
	fmt.Println(router.Names())
	// Output:
	// ada says hello
	// pong
	// no method chat/edit
	// a server does not take result packets
	// not a packet kind: 42
	// [chat/send room/join]
}

package dispatch

import (
	"bytes"
	"errors"
	"testing"
)

// FuzzDecodeKind checks DecodeKind and Dispatch against the definition of a
// kind: never a panic, a valid kind exactly for a first byte in 1..13, the
// body exactly the bytes after it, and the same answer from both.
func FuzzDecodeKind(f *testing.F) {
	for _, seed := range [][]byte{nil, {0}, {1}, {13, 'x'}, {14}, {255, 1, 2}, {byte(KindBatch), 7, 7}} {
		f.Add(seed)
	}
	d := NewDispatcher(recordingHandlers())
	f.Fuzz(func(t *testing.T, packet []byte) {
		k, body, err := DecodeKind(packet)
		var c conn
		dispatchErr := d.Dispatch(&c, packet)
		switch {
		case len(packet) == 0:
			if !errors.Is(err, ErrEmptyPacket) || !errors.Is(dispatchErr, ErrEmptyPacket) {
				t.Fatalf("empty packet: %v, %v", err, dispatchErr)
			}
		case packet[0] >= 1 && packet[0] <= 13:
			if err != nil || k != Kind(packet[0]) || !bytes.Equal(body, packet[1:]) {
				t.Fatalf("valid kind %d: %v, %q, %v", packet[0], k, body, err)
			}
			if dispatchErr != nil || len(c.kinds) != 1 || c.kinds[0] != k || !bytes.Equal(c.bodies[0], body) {
				t.Fatalf("valid kind %d: dispatch %v, handlers saw %v", packet[0], dispatchErr, c.kinds)
			}
		default:
			var e1, e2 *UnknownKindError
			if !errors.As(err, &e1) || !errors.As(dispatchErr, &e2) || e1.Kind != Kind(packet[0]) || e2.Kind != e1.Kind {
				t.Fatalf("unknown kind %d: %v, %v", packet[0], err, dispatchErr)
			}
			if len(c.kinds) != 0 {
				t.Fatalf("unknown kind %d reached a handler", packet[0])
			}
		}
	})
}

// FuzzRouter builds a router from names split out of the input at newlines
// and checks it against a map: NewRouter fails exactly for an empty or a
// repeated name, every registered name is found at its index, and a lookup
// of the query (and of the query cut and extended) agrees with the map.
func FuzzRouter(f *testing.F) {
	f.Add([]byte("chat/send\nchat/join\nroom/leave"), []byte("chat/join"))
	f.Add([]byte("a\nb\na"), []byte("a"))
	f.Add([]byte("a\n\nb"), []byte(""))
	f.Add([]byte("x"), []byte("xx"))
	f.Add([]byte("0123456789abcdef\n0123456789abcdeF\n0123456789abcdef0"), []byte("0123456789abcdef0"))
	f.Fuzz(func(t *testing.T, list, query []byte) {
		var names []string
		if len(list) > 0 {
			for name := range bytes.SplitSeq(list, []byte("\n")) {
				names = append(names, string(name))
			}
		}
		model := make(map[string]int, len(names))
		wantErr := false
		for i, n := range names {
			if _, dup := model[n]; dup || n == "" {
				wantErr = true
				continue
			}
			model[n] = i
		}
		r, err := NewRouter(routesOf(names))
		if len(names) > MaxRoutes {
			if !errors.Is(err, ErrTooManyRoutes) {
				t.Fatalf("%d names: %v, want ErrTooManyRoutes", len(names), err)
			}
			return
		}
		if wantErr {
			var dup *DuplicateMethodError
			if !errors.As(err, &dup) && !errors.Is(err, ErrEmptyMethod) {
				t.Fatalf("NewRouter(%q) = %v, want an empty or duplicate name error", names, err)
			}
			return
		}
		if err != nil {
			t.Fatalf("NewRouter(%q): %v", names, err)
		}
		for i, n := range names {
			if got, ok := r.Index([]byte(n)); !ok || got != i {
				t.Fatalf("Index(%q) = %d, %v; want %d", n, got, ok, i)
			}
		}
		for _, q := range [][]byte{query, query[:len(query)/2], append(query[:len(query):len(query)], 'x')} {
			got, ok := r.Index(q)
			want, inModel := model[string(q)]
			if ok != inModel || (ok && got != want) {
				t.Fatalf("Index(%q) = %d, %v; the model says %d, %v", q, got, ok, want, inModel)
			}
			h, err := r.Lookup(q)
			if inModel != (err == nil) || (inModel && h != want*10) {
				t.Fatalf("Lookup(%q) = %d, %v", q, h, err)
			}
		}
	})
}

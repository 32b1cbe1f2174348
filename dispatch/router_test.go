package dispatch

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"unicode/utf8"
)

func routesOf(names []string) []Route[int] {
	routes := make([]Route[int], len(names))
	for i, n := range names {
		routes[i] = Route[int]{Name: n, Handler: i * 10}
	}
	return routes
}

// checkRouter checks that every registered name is found at its index with
// its handler, and that the near misses of each name are not found.
func checkRouter(t *testing.T, names []string) {
	t.Helper()
	r, err := NewRouter(routesOf(names))
	if err != nil {
		t.Fatalf("%d names: %v", len(names), err)
	}
	// The comment on maxBuildAttempts says the first seed always worked.
	if r.seed != splitmix64(1) {
		t.Errorf("%d names: the perfect hash needed another seed", len(names))
	}
	registered := make(map[string]bool, len(names))
	for _, n := range names {
		registered[n] = true
	}
	for i, n := range names {
		got, ok := r.Index([]byte(n))
		if !ok || got != i {
			t.Fatalf("%d names: Index(%q) = %d, %v; want %d, true", len(names), n, got, ok, i)
		}
		h, err := r.Lookup([]byte(n))
		if err != nil || h != i*10 {
			t.Fatalf("%d names: Lookup(%q) = %d, %v; want %d", len(names), n, h, err, i*10)
		}
		for _, miss := range []string{n[:len(n)-1], n + "x", strings.ToUpper(n), "x" + n[1:]} {
			if registered[miss] {
				continue
			}
			if got, ok := r.Index([]byte(miss)); ok {
				t.Fatalf("%d names: Index(%q) = %d, true for an unregistered name", len(names), miss, got)
			}
		}
	}
	if _, ok := r.Index(nil); ok {
		t.Fatalf("%d names: empty name found", len(names))
	}
}

func TestRouterFindsEveryName(t *testing.T) {
	for _, n := range []int{1, 2, 3, 4, 5, 7, 8, 9, 10, 31, 100, 257, 1000} {
		checkRouter(t, methodNames(n))
	}
}

// TestRouterRandomNames builds routers from random names of every length
// from 1 to 40 bytes, which exercises each branch of the hash.
func TestRouterRandomNames(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, n := range []int{1, 2, 16, 200, 5000} {
		seen := make(map[string]bool, n)
		var names []string
		for len(names) < n {
			b := make([]byte, 1+rng.IntN(40))
			for i := range b {
				b[i] = "ab/._"[rng.IntN(5)]
			}
			if !seen[string(b)] {
				seen[string(b)] = true
				names = append(names, string(b))
			}
		}
		checkRouter(t, names)
	}
}

// TestRouterMaxRoutes builds the largest Router allowed, from names that
// differ only in a counter, and checks the table stays within its bounds.
func TestRouterMaxRoutes(t *testing.T) {
	names := make([]string, MaxRoutes)
	for i := range names {
		names[i] = fmt.Sprintf("unit/method%d", i)
	}
	r, err := NewRouter(routesOf(names))
	if err != nil {
		t.Fatal(err)
	}
	if r.seed != splitmix64(1) {
		t.Error("the perfect hash needed another seed")
	}
	for i, n := range names {
		if got, ok := r.Index([]byte(n)); !ok || got != i {
			t.Fatalf("Index(%q) = %d, %v; want %d", n, got, ok, i)
		}
	}
	// Load factor at least 0.4 and one pilot per four names, rounded up to
	// powers of two.
	if len(r.slots) > 4*MaxRoutes || len(r.pilots) > MaxRoutes/2 {
		t.Fatalf("%d slots and %d pilots for %d routes", len(r.slots), len(r.pilots), MaxRoutes)
	}
}

// TestPlaceBucketsGivesUp checks that the pilot search reports failure
// instead of looping when two names share a hash, which makes NewRouter
// try the next seed.
func TestPlaceBucketsGivesUp(t *testing.T) {
	if _, _, ok := placeBuckets([]uint64{7, 7}, 1, 64, 4); ok {
		t.Fatal("placed two equal hashes in distinct slots")
	}
	if _, _, ok := placeBuckets([]uint64{7, 8}, 1, 64, 4); !ok {
		t.Fatal("could not place two distinct hashes in four slots")
	}
}

func TestRouterEmpty(t *testing.T) {
	r, err := NewRouter[int](nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := r.Index([]byte("a")); ok {
		t.Fatal("empty router found a name")
	}
	if r.Len() != 0 || len(r.Names()) != 0 {
		t.Fatal("empty router has routes")
	}
}

func TestNewRouterErrors(t *testing.T) {
	_, err := NewRouter([]Route[int]{{Name: "a"}, {Name: "b"}, {Name: "a"}})
	var dup *DuplicateMethodError
	if !errors.As(err, &dup) || dup.Method != "a" || dup.First != 0 || dup.Second != 2 {
		t.Fatalf("duplicate: got %v", err)
	}
	_, err = NewRouter([]Route[int]{{Name: "a"}, {Name: ""}})
	if !errors.Is(err, ErrEmptyMethod) || err.Error() != "dispatch: empty method name (route 1)" {
		t.Fatalf("empty name: got %v", err)
	}
	_, err = NewRouter(make([]Route[int], MaxRoutes+1))
	if !errors.Is(err, ErrTooManyRoutes) {
		t.Fatalf("too many: got %v", err)
	}
}

func TestRouterUnknownMethod(t *testing.T) {
	r, err := NewRouter(routesOf(methodNames(10)))
	if err != nil {
		t.Fatal(err)
	}
	long := strings.Repeat("z", 1000)
	for _, name := range []string{"chat/nope", "", long, strings.Repeat("z", 127) + "é"} {
		_, err := r.Lookup([]byte(name))
		var unknown *UnknownMethodError
		if !errors.As(err, &unknown) {
			t.Fatalf("Lookup(%.20q): got %v, want *UnknownMethodError", name, err)
		}
		want := name[:min(len(name), maxErrorMethod)]
		if !utf8.ValidString(want) {
			want = want[:len(want)-1] // cut before the character the limit splits
		}
		if unknown.Method != want {
			t.Fatalf("Lookup(%.20q): error keeps %.20q", name, unknown.Method)
		}
	}
}

func TestRouterNamesInRegistrationOrder(t *testing.T) {
	names := methodNames(100)
	r, err := NewRouter(routesOf(names))
	if err != nil {
		t.Fatal(err)
	}
	got := r.Names()
	if fmt.Sprint(got) != fmt.Sprint(names) {
		t.Fatal("Names() is not the registration order")
	}
	got[0] = "changed"
	if r.Route(0).Name != names[0] {
		t.Fatal("Names() shares the router's storage")
	}
	for i := range r.Len() {
		if rt := r.Route(i); rt.Name != names[i] || rt.Handler != i*10 {
			t.Fatalf("Route(%d) = %+v", i, rt)
		}
	}
}

// TestRouterCopiesRoutes checks that changing the registration list after
// NewRouter does not change the router.
func TestRouterCopiesRoutes(t *testing.T) {
	routes := routesOf(methodNames(3))
	r, err := NewRouter(routes)
	if err != nil {
		t.Fatal(err)
	}
	routes[0].Name = "other"
	if _, ok := r.Index([]byte(methodNames(1)[0])); !ok {
		t.Fatal("router changed with its registration list")
	}
}

func TestRouterLookupAllocatesNothing(t *testing.T) {
	r, err := NewRouter(routesOf(methodNames(1000)))
	if err != nil {
		t.Fatal(err)
	}
	name := []byte(methodNames(1000)[999])
	allocs := testing.AllocsPerRun(100, func() {
		if _, err := r.Lookup(name); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Fatalf("Lookup allocates %v times", allocs)
	}
}

// BenchmarkRouterLookup measures the Router's own API in the usual way
// (BenchmarkRouteShapes runs it beside the shapes): Lookup returns the
// handler, which is then called, over a mix of all registered names.
func BenchmarkRouterLookup(b *testing.B) {
	for _, n := range methodCounts {
		names := methodNames(n)
		routes := make([]Route[func(*sink, []byte) error], n)
		for i, name := range names {
			routes[i] = Route[func(*sink, []byte) error]{Name: name, Handler: routeHandler}
		}
		r, err := NewRouter(routes)
		if err != nil {
			b.Fatal(err)
		}
		seq := mixedNames(names)
		b.Run(fmt.Sprintf("methods=%d", n), func(b *testing.B) {
			var s sink
			b.ReportAllocs()
			for i := range b.N {
				name := seq[i%len(seq)]
				h, err := r.Lookup(name)
				if err != nil {
					b.Fatal(err)
				}
				if err := h(&s, name); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkNewRouter measures building a Router: the one-time cost of the
// perfect hash.
func BenchmarkNewRouter(b *testing.B) {
	for _, n := range methodCounts {
		routes := routesOf(methodNames(n))
		b.Run(fmt.Sprintf("methods=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			for range b.N {
				if _, err := NewRouter(routes); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

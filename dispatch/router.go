package dispatch

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/bits"
	"slices"
	"strconv"
	"unicode/utf8"
)

// Route registers one method: its name as it appears on the wire and the
// handler a lookup of that name returns. H is whatever the caller dispatches
// to: a function type, an interface, an index into its own table.
type Route[H any] struct {
	Name    string
	Handler H
}

// MaxRoutes is the most routes a Router holds.
const MaxRoutes = 1 << 16

// Errors NewRouter returns, wrapped with the index of the offending route
// or the number of routes.
var (
	ErrEmptyMethod   = errors.New("dispatch: empty method name")
	ErrTooManyRoutes = errors.New("dispatch: more than MaxRoutes routes")
)

// DuplicateMethodError reports a method name registered twice, at the
// indexes First and Second of the registration list.
type DuplicateMethodError struct {
	Method        string
	First, Second int
}

// Error names the method and the two routes registered for it.
func (e *DuplicateMethodError) Error() string {
	return fmt.Sprintf("dispatch: method %q registered twice, as routes %d and %d", e.Method, e.First, e.Second)
}

// maxErrorMethod bounds how much of an unknown name an UnknownMethodError
// keeps, so a flood of long bogus names neither copies nor logs them whole.
const maxErrorMethod = 128

// errorMethod is what an UnknownMethodError keeps of name: at most
// maxErrorMethod bytes, backing off to the start of a UTF-8 character so
// that a cut name does not end in half of one.
func errorMethod(name []byte) string {
	if len(name) <= maxErrorMethod {
		return string(name)
	}
	cut := maxErrorMethod
	for i := 0; i < utf8.UTFMax-1 && !utf8.RuneStart(name[cut]); i++ {
		cut--
	}
	return string(name[:cut])
}

// UnknownMethodError reports a lookup of a name no route has. Method holds
// at most the first 128 bytes of that name, cut at a character boundary
// when the name is UTF-8.
type UnknownMethodError struct {
	Method string
}

// Error quotes the unknown name (as much of it as was kept).
func (e *UnknownMethodError) Error() string {
	return "dispatch: unknown method " + strconv.Quote(e.Method)
}

// Router maps a method name to its route. It is built once from a
// registration list and is immutable afterwards, so it is safe for
// concurrent use.
//
// Lookups use a perfect hash built for the registered names: one hash of
// the name picks a bucket, the bucket's pilot picks a slot, and the slot
// names the single route the name can be; one string comparison decides.
// There is no probing: a lookup does the same work for every name of a
// given length, registered or not, so no name sent by a peer can make it
// slower. BenchmarkRouteShapes measured it against a map, a switch on the
// name and a sorted table (see the README). Build it with NewRouter: the
// zero value is not usable.
type Router[H any] struct {
	routes []Route[H]
	seed   uint64
	// bucketShift turns a hash into a bucket: the top log2(len(pilots))
	// bits. For a single bucket it is 64, which Go shifts to zero.
	bucketShift uint
	pilots      []uint16
	// slots maps a slot to a route index. A slot no name hashes to holds
	// 0; a name that lands there is not routes[0].Name, since that name
	// lands on its own slot, so the comparison rejects it.
	slots []uint32
	// slotShift turns a pilot hash into a slot: the top log2(len(slots))
	// bits.
	slotShift uint
}

// NewRouter builds a Router from routes, in registration order. It returns
// an error wrapping ErrEmptyMethod for an empty name, a
// *DuplicateMethodError for a name registered twice, and ErrTooManyRoutes
// past MaxRoutes.
func NewRouter[H any](routes []Route[H]) (*Router[H], error) {
	if len(routes) > MaxRoutes {
		return nil, fmt.Errorf("%w: %d routes", ErrTooManyRoutes, len(routes))
	}
	seen := make(map[string]int, len(routes))
	for i, r := range routes {
		if r.Name == "" {
			return nil, fmt.Errorf("%w (route %d)", ErrEmptyMethod, i)
		}
		if first, dup := seen[r.Name]; dup {
			return nil, &DuplicateMethodError{Method: r.Name, First: first, Second: i}
		}
		seen[r.Name] = i
	}
	r := &Router[H]{routes: slices.Clone(routes)}
	if err := r.buildTable(); err != nil {
		return nil, err
	}
	return r, nil
}

// Index returns the position of name in the registration list, or -1 and
// false for a name no route has. It never allocates.
func (r *Router[H]) Index(name []byte) (int, bool) {
	h := hashName(r.seed, name)
	slot := pilotHash(h, r.pilots[h>>r.bucketShift]) >> r.slotShift
	i := r.slots[slot]
	if int(i) < len(r.routes) && r.routes[i].Name == string(name) {
		return int(i), true
	}
	return -1, false
}

// Lookup returns the handler registered for name, or an
// *UnknownMethodError. Only the error allocates.
func (r *Router[H]) Lookup(name []byte) (H, error) {
	if i, ok := r.Index(name); ok {
		return r.routes[i].Handler, nil
	}
	var zero H
	return zero, &UnknownMethodError{Method: errorMethod(name)}
}

// Len returns the number of routes.
func (r *Router[H]) Len() int { return len(r.routes) }

// Route returns the route at position i of the registration list; i must
// be in [0, Len()).
func (r *Router[H]) Route(i int) Route[H] { return r.routes[i] }

// Names returns the registered method names in registration order, in a
// new slice the caller owns. A preset compression dictionary is built from
// them.
func (r *Router[H]) Names() []string {
	names := make([]string, len(r.routes))
	for i, rt := range r.routes {
		names[i] = rt.Name
	}
	return names
}

// The perfect hash follows the "hash and displace" scheme of PTHash
// (Pibiri and Trani, SIGIR 2021) in its simplest form: names are grouped
// into buckets by their hash, and the buckets, largest first, each search for
// a pilot value that sends all their names to free slots. A lookup then costs
// one hash of the name, one pilot load and one multiply, whatever the number
// of routes.

// maxBuildAttempts bounds the seeds tried before NewRouter gives up; each
// failed seed also doubles the table. With the load factor below, the
// first seed has succeeded for every list in the tests, up to MaxRoutes
// names; a failure needs two distinct names whose 64-bit hashes collide
// under every seed tried.
const maxBuildAttempts = 16

// errNoPerfectHash is returned when no seed yields a perfect hash.
var errNoPerfectHash = errors.New("dispatch: could not build a perfect hash of the method names")

func (r *Router[H]) buildTable() error {
	n := len(r.routes)
	// About 4 names per bucket and a load factor between 0.4 and 0.8 keep
	// the pilot search short and the tables small: for 1000 names, 256
	// pilots (512 bytes) and 2048 slots (8 KiB).
	numBuckets := ceilPow2(max(n/4, 1))
	numSlots := ceilPow2(n + n/4)
	hashes := make([]uint64, n)
	for attempt := range maxBuildAttempts {
		seed := splitmix64(uint64(attempt) + 1)
		for i, rt := range r.routes {
			hashes[i] = hashName(seed, []byte(rt.Name))
		}
		bucketShift := uint(64 - bits.TrailingZeros(uint(numBuckets)))
		pilots, slots, ok := placeBuckets(hashes, numBuckets, bucketShift, numSlots)
		if ok {
			r.seed = seed
			r.bucketShift = bucketShift
			r.pilots = pilots
			r.slots = slots
			r.slotShift = uint(64 - bits.TrailingZeros(uint(numSlots)))
			return nil
		}
		numSlots *= 2
	}
	return errNoPerfectHash
}

// placeBuckets finds a pilot for every bucket such that every name lands on
// its own slot. It reports false if some bucket has no such pilot.
func placeBuckets(hashes []uint64, numBuckets int, bucketShift uint, numSlots int) (pilots []uint16, slots []uint32, ok bool) {
	buckets := make([][]uint32, numBuckets)
	for i, h := range hashes {
		b := h >> bucketShift
		buckets[b] = append(buckets[b], uint32(i))
	}
	order := make([]int, numBuckets)
	for i := range order {
		order[i] = i
	}
	// Largest buckets first, while the table is emptiest: they are the
	// hardest to place.
	slices.SortStableFunc(order, func(a, b int) int { return len(buckets[b]) - len(buckets[a]) })

	pilots = make([]uint16, numBuckets)
	slots = make([]uint32, numSlots)
	taken := make([]bool, numSlots)
	slotShift := uint(64 - bits.TrailingZeros(uint(numSlots)))
	var tried []uint64
	for _, b := range order {
		members := buckets[b]
		if len(members) == 0 {
			break
		}
		placed := false
		for p := range 1 << 16 {
			tried = tried[:0]
			fits := true
			for _, m := range members {
				s := pilotHash(hashes[m], uint16(p)) >> slotShift
				if taken[s] || slices.Contains(tried, s) {
					fits = false
					break
				}
				tried = append(tried, s)
			}
			if !fits {
				continue
			}
			for j, m := range members {
				taken[tried[j]] = true
				slots[tried[j]] = m
			}
			pilots[b] = uint16(p)
			placed = true
			break
		}
		if !placed {
			return nil, nil, false
		}
	}
	return pilots, slots, true
}

// Hash constants: the 64-bit primes of wyhash, odd and dense in bits.
const (
	hashMul0 = 0xa0761d6478bd642f
	hashMul1 = 0xe7037ed1a0b428db
	hashMul2 = 0x8ebc6af09c88c6e3
)

// mix folds the 128-bit product of x and y into 64 bits, so every input
// bit reaches every output bit.
func mix(x, y uint64) uint64 {
	hi, lo := bits.Mul64(x, y)
	return hi ^ lo
}

// hashName hashes a name sixteen bytes per multiply, the way wyhash does:
// two 8-byte words of the name, each xored with a constant, are multiplied
// and the 128-bit product folded. The words read cover every byte, and for
// each length they are an injective encoding of the name, so two names
// differ in hash unless the multiplies collide.
func hashName(seed uint64, name []byte) uint64 {
	n := len(name)
	h := seed ^ uint64(n)*hashMul0
	var x, y uint64
	switch {
	case n > 16:
		for b := name; len(b) > 16; b = b[16:] {
			h = mix(binary.LittleEndian.Uint64(b)^hashMul1^h, binary.LittleEndian.Uint64(b[8:])^hashMul2)
		}
		// The last 16 bytes, overlapping what the loop read.
		x = binary.LittleEndian.Uint64(name[n-16:])
		y = binary.LittleEndian.Uint64(name[n-8:])
	case n >= 8:
		x = binary.LittleEndian.Uint64(name)
		y = binary.LittleEndian.Uint64(name[n-8:])
	case n >= 4:
		x = uint64(binary.LittleEndian.Uint32(name))
		y = uint64(binary.LittleEndian.Uint32(name[n-4:]))
	case n > 0:
		x = uint64(name[0])<<16 | uint64(name[n/2])<<8 | uint64(name[n-1])
	}
	return mix(x^hashMul1^h, y^hashMul2)
}

// pilotHash sends a name's hash to a slot under a bucket's pilot.
func pilotHash(h uint64, pilot uint16) uint64 {
	return (h ^ uint64(pilot)) * hashMul2
}

func ceilPow2(n int) int {
	if n <= 1 {
		return 1
	}
	return 1 << bits.Len(uint(n-1))
}

// splitmix64 turns an attempt number into a well-spread seed.
func splitmix64(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ x>>30) * 0xbf58476d1ce4e5b9
	x = (x ^ x>>27) * 0x94d049bb133111eb
	return x ^ x>>31
}

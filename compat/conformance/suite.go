package conformance

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
)

// Target is an echo server under test: it sends every message back as it
// received it, text as text and binary as binary (compat.Options.Echo, or
// `hotpath -echo`). The deflate cases send messages of up to 34 KB, so
// the server must accept 64 KiB.
type Target struct {
	// Addr is the server's host:port and Path the WebSocket endpoint ("/"
	// when empty).
	Addr string
	Path string

	// MaxMessage is the largest message the server accepts, after
	// inflating; the limit cases need it and are skipped when it is 0.
	MaxMessage int64
	// MaxFragments is the most frames a message may have; its cases are
	// skipped when it is 0.
	MaxFragments int

	// ContextTakeover says the server allows permessage-deflate context
	// takeover to peers that ask for it; without it the takeover cases
	// accept a response that refuses takeover, as RFC 7692 §7.1.1 allows.
	ContextTakeover bool

	// Shutdown, when set, starts a graceful shutdown of the server: it
	// must send close 1001 on every connection. Only the server-initiated
	// closing handshake case uses it, so give it a Target of its own.
	Shutdown func()
}

// Case is one check of the suite: what is sent, under which section of
// which RFC, and the outcome the section calls for.
type Case struct {
	Group   string // framing, fragmentation, utf8, close, limits, deflate
	Section string // "RFC 6455 §5.2"
	Name    string
	Expect  string // "echo", "pong, echo", "close 1002", "fail fast 1007", ...

	offer string // Sec-WebSocket-Extensions of the request
	needs needs
	run   func(s *session) error
}

// needs says which Target fields a case depends on.
type needs uint8

const (
	needMaxMessage needs = 1 << iota
	needMaxFragments
	needShutdown
)

// Result is the outcome of one case against one target.
type Result struct {
	Case
	// Err is why the case failed; nil when it passed or was skipped.
	Err error
	// Skipped says why the case did not run against this target.
	Skipped string
	// Note records a behaviour the RFC allows that the case accepted in
	// place of the stricter one, such as a pong for only the last of
	// several pings.
	Note string
}

// Passed reports whether the case ran and passed.
func (r Result) Passed() bool { return r.Err == nil && r.Skipped == "" }

// caseTimeout bounds one case: the dial, what it sends, the replies and
// the closing handshake.
const caseTimeout = 10 * time.Second

// Run runs the case against tg on a connection of its own.
func (c Case) Run(ctx context.Context, tg Target) Result {
	r := Result{Case: c}
	switch {
	case c.needs&needMaxMessage != 0 && tg.MaxMessage == 0:
		r.Skipped = "Target.MaxMessage not set"
		return r
	case c.needs&needMaxFragments != 0 && tg.MaxFragments == 0:
		r.Skipped = "Target.MaxFragments not set"
		return r
	case c.needs&needShutdown != 0 && tg.Shutdown == nil:
		r.Skipped = "Target.Shutdown not set"
		return r
	}
	ctx, cancel := context.WithTimeout(ctx, caseTimeout)
	defer cancel()
	s, err := dial(ctx, tg, c.offer)
	if err != nil {
		r.Err = fmt.Errorf("handshake: %w", err)
		return r
	}
	defer s.close()
	err = c.run(s)
	var n *noteError
	if errors.As(err, &n) {
		r.Note, err = n.note, nil
	}
	r.Err = err
	return r
}

// noteError is how a case passes with a note: the server took a path the
// RFC allows that is not the strict one.
type noteError struct{ note string }

func (e *noteError) Error() string { return e.note }

// Cases returns every case of the suite, grouped and in a stable order.
func Cases() []Case {
	var cs []Case
	for _, g := range [][]Case{framingCases(), fragmentationCases(), utf8Cases(), closeCases(), limitCases(), deflateCases()} {
		cs = append(cs, g...)
	}
	return cs
}

// Groups lists the case groups in the order Cases returns them.
var Groups = []string{"framing", "fragmentation", "utf8", "close", "limits", "deflate"}

// RunAll runs every case against tg, one after the other, each on its own
// connection. Cases that need a shutdown are skipped: they need a target
// of their own (see Target.Shutdown).
func RunAll(ctx context.Context, tg Target) []Result {
	var rs []Result
	for _, c := range Cases() {
		if c.needs&needShutdown != 0 {
			continue
		}
		rs = append(rs, c.Run(ctx, tg))
	}
	return rs
}

// WriteSummary writes one line per group (cases passed of those run, and
// skipped) and one per failed case or note.
func WriteSummary(w io.Writer, title string, rs []Result) {
	fmt.Fprintf(w, "%s\n", title)
	fmt.Fprintf(w, "  %-14s %7s %7s %7s\n", "group", "passed", "failed", "skipped")
	groups := slices.Clone(Groups)
	for _, r := range rs {
		if !slices.Contains(groups, r.Group) {
			groups = append(groups, r.Group)
		}
	}
	var total [3]int
	for _, g := range groups {
		var n [3]int
		for _, r := range rs {
			if r.Group != g {
				continue
			}
			switch {
			case r.Skipped != "":
				n[2]++
			case r.Err != nil:
				n[1]++
			default:
				n[0]++
			}
		}
		if n == [3]int{} {
			continue
		}
		fmt.Fprintf(w, "  %-14s %3d/%-3d %7d %7d\n", g, n[0], n[0]+n[1], n[1], n[2])
		for i := range n {
			total[i] += n[i]
		}
	}
	fmt.Fprintf(w, "  %-14s %3d/%-3d %7d %7d\n", "total", total[0], total[0]+total[1], total[1], total[2])
	for _, r := range rs {
		switch {
		case r.Err != nil:
			fmt.Fprintf(w, "  FAIL %s: %s [%s] expect %s: %v\n", r.Group, r.Name, r.Section, r.Expect, r.Err)
		case r.Note != "":
			fmt.Fprintf(w, "  note %s: %s [%s]: %s\n", r.Group, r.Name, r.Section, r.Note)
		}
	}
}

// outcome is what a case expects back: replies in order, then either the
// connection left open (the suite closes it cleanly with 1000) or a close
// frame with one of the codes.
type outcome struct {
	replies    []reply
	compressed bool     // every data reply must come compressed
	close      []uint16 // nil: the connection stays open
	// failFast marks a close that must come while the case has left a
	// message unfinished: a server that waits for the rest never sends it,
	// and the case fails at its timeout.
	failFast bool
}

func (o outcome) String() string {
	var parts []string
	for i := 0; i < len(o.replies); {
		j := i
		for j < len(o.replies) && o.replies[j].op == o.replies[i].op {
			j++
		}
		word := map[byte]string{opPong: "pong", opText: "echo", opBinary: "echo"}[o.replies[i].op]
		if j-i > 1 {
			word += fmt.Sprintf(" ×%d", j-i)
		}
		if len(parts) > 0 && strings.HasPrefix(parts[len(parts)-1], "echo") && word[:4] == "echo" {
			word = "echo"
		}
		parts = append(parts, word)
		i = j
	}
	if o.compressed && len(parts) > 0 {
		parts[len(parts)-1] += " (compressed)"
	}
	if o.close != nil {
		word := "close "
		if o.failFast {
			word = "fail fast "
		}
		parts = append(parts, word+codeList(o.close))
	}
	if len(parts) == 0 {
		return "stays open"
	}
	return strings.Join(parts, ", ")
}

func codeList(codes []uint16) string {
	s := make([]string, len(codes))
	for i, c := range codes {
		if c == 1005 {
			s[i] = "(empty)"
			continue
		}
		s[i] = fmt.Sprint(c)
	}
	return strings.Join(s, "|")
}

// verify reads what o expects, after the case has sent its frames.
func (s *session) verify(o outcome) error {
	for _, r := range o.replies {
		if err := s.expectReply(r, o.compressed && r.op <= opBinary); err != nil {
			return err
		}
	}
	if o.close == nil {
		return s.closeCleanly()
	}
	return s.expectClose(o.close)
}

// newCase builds a case that sends with send and checks want.
func newCase(group, section, name string, want outcome, send func(s *session) error) Case {
	return Case{
		Group: group, Section: section, Name: name, Expect: want.String(),
		run: func(s *session) error {
			if err := send(s); err != nil {
				return fmt.Errorf("sending: %w", err)
			}
			return s.verify(want)
		},
	}
}

// framesCase sends fs in one write.
func framesCase(group, section, name string, want outcome, fs ...frame) Case {
	return newCase(group, section, name, want, func(s *session) error { return s.send(fs...) })
}

func echoes(rs ...reply) outcome { return outcome{replies: rs} }

// thenClose expects a close with one of codes after o's replies.
func (o outcome) thenClose(codes ...uint16) outcome {
	o.close = codes
	return o
}

func closes(codes ...uint16) outcome { return outcome{close: codes} }

func failsFast(codes ...uint16) outcome { return outcome{close: codes, failFast: true} }

func textFrame(p string) frame { return frame{fin: true, op: opText, payload: []byte(p)} }

func binFrame(p []byte) frame { return frame{fin: true, op: opBinary, payload: p} }

func textReply(p string) reply { return reply{op: opText, payload: []byte(p)} }

func binReply(p []byte) reply { return reply{op: opBinary, payload: p} }

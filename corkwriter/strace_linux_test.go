package corkwriter

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

const straceTurns = 100

// TestStraceOneWritevPerTurn counts system calls from outside with
// strace -c -f: a turn of 64 small writes through a Writer is exactly one
// writev, where 64 direct conn.Write calls are 64 writes. It is skipped when
// strace is not installed or may not trace (no ptrace in a container).
func TestStraceOneWritevPerTurn(t *testing.T) {
	if os.Getenv("CORKWRITER_STRACE_CHILD") != "" {
		t.Skip("running as the traced child")
	}
	strace, err := exec.LookPath("strace")
	if err != nil {
		t.Skip("strace not installed")
	}
	out := filepath.Join(t.TempDir(), "strace.txt")
	cmd := exec.Command(strace, "-f", "-c", "-e", "trace=write,writev", "-o", out,
		os.Args[0], "-test.run=^TestStraceChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), "CORKWRITER_STRACE_CHILD=1")
	if b, err := cmd.CombinedOutput(); err != nil {
		if bytes.Contains(b, []byte("ptrace")) || bytes.Contains(b, []byte("Operation not permitted")) {
			t.Skipf("strace cannot trace here: %s", firstLine(b))
		}
		t.Fatalf("strace: %v\n%s", err, b)
	}
	summary, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	calls := straceCalls(summary)
	t.Logf("%d turns: %d writev, %d write", straceTurns, calls["writev"], calls["write"])
	// The socket never fills (400 KiB in all), so nothing can split a turn.
	if calls["writev"] != straceTurns {
		t.Fatalf("%d writev calls for %d turns, want one each\n%s", calls["writev"], straceTurns, summary)
	}
	if calls["write"] < 64*straceTurns {
		t.Fatalf("direct writes made %d write calls, want at least %d\n%s", calls["write"], 64*straceTurns, summary)
	}
}

// TestStraceChild is the traced program: straceTurns turns through a Writer,
// then the same turns as direct writes.
func TestStraceChild(t *testing.T) {
	if os.Getenv("CORKWRITER_STRACE_CHILD") == "" {
		t.Skip("only run under TestStraceOneWritevPerTurn")
	}
	c, peer := tcpPair(t)
	got := collect(peer)
	w := NewWriter(c, nil)
	msg := bytes.Repeat([]byte{'m'}, 64)
	for range straceTurns {
		w.Cork()
		for range 64 {
			mustWrite(t, w.Write, msg)
		}
		if err := w.Uncork(); err != nil {
			t.Fatal(err)
		}
	}
	for range straceTurns * 64 {
		if _, err := c.Write(msg); err != nil {
			t.Fatal(err)
		}
	}
	c.Close()
	if n := len(<-got); n != 2*straceTurns*64*64 {
		t.Fatalf("peer read %d bytes", n)
	}
}

// straceCalls parses the table of strace -c: "% time seconds usecs/call
// calls [errors] syscall".
func straceCalls(summary []byte) map[string]int {
	calls := map[string]int{}
	sc := bufio.NewScanner(bytes.NewReader(summary))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 5 {
			continue
		}
		if n, err := strconv.Atoi(f[3]); err == nil {
			calls[f[len(f)-1]] = n
		}
	}
	return calls
}

func firstLine(b []byte) string {
	line, _, _ := bytes.Cut(b, []byte("\n"))
	return string(line)
}

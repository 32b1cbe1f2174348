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
// system call, where 64 direct conn.Write calls are 64. The turn's writes
// are copied into one chunk, a single iovec, which leaves by write(2)
// (sysWritev); a turn of several iovecs would be one writev(2). It is
// skipped when strace is not installed or may not trace (no ptrace in a
// container).
func TestStraceOneWritevPerTurn(t *testing.T) {
	if os.Getenv("CORKWRITER_STRACE_CHILD") != "" {
		t.Skip("running as the traced child")
	}
	turns := straceChild(t, "turns")
	direct := straceChild(t, "direct")
	// The child itself writes too: the test framework's "PASS" line. The
	// socket never fills (400 KiB in all), so nothing can split a turn.
	sent := turns["write"] + turns["writev"]
	t.Logf("%d turns: %d writev, %d write", straceTurns, turns["writev"], turns["write"])
	if sent < straceTurns || sent > straceTurns+straceSlack {
		t.Fatalf("%d write and writev calls for %d turns, want one each (and up to %d of the test framework's)", sent, straceTurns, straceSlack)
	}
	if direct["write"] < 64*straceTurns {
		t.Fatalf("direct writes made %d write calls, want at least %d", direct["write"], 64*straceTurns)
	}
}

// straceSlack is how many writes of its own the traced test binary may make
// beside the ones it measures.
const straceSlack = 4

// straceChild runs TestStraceChild under strace -c in mode ("turns" or
// "direct") and returns its write and writev counts.
func straceChild(t *testing.T, mode string) map[string]int {
	t.Helper()
	strace, err := exec.LookPath("strace")
	if err != nil {
		t.Skip("strace not installed")
	}
	out := filepath.Join(t.TempDir(), "strace-"+mode+".txt")
	cmd := exec.Command(strace, "-f", "-c", "-e", "trace=write,writev", "-o", out,
		os.Args[0], "-test.run=^TestStraceChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), "CORKWRITER_STRACE_CHILD="+mode)
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
	return straceCalls(summary)
}

// TestStraceChild is the traced program: straceTurns turns through a Writer
// (CORKWRITER_STRACE_CHILD=turns), or the same writes made directly
// (=direct).
func TestStraceChild(t *testing.T) {
	mode := os.Getenv("CORKWRITER_STRACE_CHILD")
	if mode == "" {
		t.Skip("only run under TestStraceOneWritevPerTurn")
	}
	c, peer := tcpPair(t)
	got := collect(peer)
	msg := bytes.Repeat([]byte{'m'}, 64)
	if mode == "turns" {
		w := NewWriter(c, nil)
		for range straceTurns {
			w.Cork()
			for range 64 {
				mustWrite(t, w.Write, msg)
			}
			if err := w.Uncork(); err != nil {
				t.Fatal(err)
			}
		}
	} else {
		for range straceTurns * 64 {
			if _, err := c.Write(msg); err != nil {
				t.Fatal(err)
			}
		}
	}
	c.Close()
	if n := len(<-got); n != straceTurns*64*64 {
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

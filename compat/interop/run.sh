#!/usr/bin/env bash
# run.sh runs hotpath's interop and conformance tests against real clients:
#
#   - the RFC 6455 / RFC 7692 conformance suite (compat/conformance),
#   - gorilla/websocket and coder/websocket clients (fuzz/interop),
#   - Node ws: every permessage-deflate offer, 0 B to 16 MiB (ws.test.mjs),
#   - Python websockets, Debian's (websockets_test.py),
#   - a slow reader of a room with context takeover, Node ws and Python
#     websockets: emits its full outbox dropped leave the server's window
#     the one the client inflates with (slow_reader*),
#   - Chromium driven by playwright-core: the demo page and a test page,
#     compression checked on the wire, reconnects (chromium.test.mjs).
#
# It installs what is missing on a fresh Debian machine (chromium and
# python3-websockets from apt, ws and playwright-core with npm ci), builds
# the hotpath command once, and runs every part even after one fails. It
# exits non-zero if any part failed. Servers listen on free loopback ports.
#
#   compat/interop/run.sh
#
# Artifacts (the demo page screenshot) go to artifacts/ at the repository
# root. SKIP_INSTALL=1 skips the apt and npm steps.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
cd "$root"

step() { printf '\n==> %s\n' "$*"; }
failed=()
# run NAME CMD...: run a part, remember a failure, go on. The part runs in
# the background so that an interrupt is trapped at once (bash runs a trap
# only after a foreground command ends) and ends the part, with its
# servers and browser, before the script exits (proctree.sh).
. "$here/proctree.sh"
part=
run() {
	local name=$1
	shift
	step "$name"
	local t0=$SECONDS
	"$@" &
	part=$!
	local rc=0
	wait "$part" || rc=$?
	part=
	if [ $rc -eq 0 ]; then
		echo "--- $name: ok ($((SECONDS - t0)) s)"
	else
		echo "--- $name: FAILED ($((SECONDS - t0)) s)"
		failed+=("$name")
	fi
}

if [ "${SKIP_INSTALL:-}" != 1 ]; then
	step "install what is missing"
	missing=()
	[ -x /usr/bin/chromium ] || missing+=(chromium)
	/usr/bin/python3 -c 'import websockets' 2>/dev/null || missing+=(python3-websockets)
	command -v node >/dev/null || missing+=(nodejs)
	command -v npm >/dev/null || missing+=(npm)
	if [ ${#missing[@]} -gt 0 ]; then
		sudo=""
		[ "$(id -u)" -eq 0 ] || sudo=sudo
		echo "apt-get install ${missing[*]}"
		$sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null || exit 1
	else
		echo "chromium, python3-websockets and node are installed"
	fi
	# npm ci only when node_modules is missing or older than the lock file.
	if [ ! -f "$here/node_modules/.package-lock.json" ] || [ "$here/package-lock.json" -nt "$here/node_modules/.package-lock.json" ]; then
		(cd "$here" && npm ci --no-audit --no-fund --loglevel=error) || exit 1
	else
		echo "node_modules is up to date"
	fi
fi

step "build the hotpath command"
bin=$(mktemp -d)
stop() {
	trap - EXIT INT TERM
	[ -z "$part" ] || stop_tree "$part"
	rm -rf "$bin"
}
trap stop EXIT
trap 'stop; exit 130' INT
trap 'stop; exit 143' TERM
go build -o "$bin/hotpath" ./compat/cmd/hotpath || exit 1
export HOTPATH_BIN=$bin/hotpath
export ARTIFACTS=$root/artifacts
mkdir -p "$ARTIFACTS"

# The conformance suite prints its table per target with -v; the rest of
# its output is the per-case lines, kept out of the way.
conformance() {
	local out
	out=$(go test -count=1 -v -run 'TestConformance|TestCasesNamed' ./compat/conformance 2>&1)
	local rc=$?
	printf '%s\n' "$out" | grep -E '^\s+(RFC 6455 / RFC 7692|group|framing|fragmentation|utf8|close|limits|deflate|total|FAIL|note) ' || true
	if [ $rc -ne 0 ]; then
		# Again, last, where a truncated log still shows them: the failed
		# cases and the test lines that failed (a target that did not
		# start has no table).
		echo "failures:"
		printf '%s\n' "$out" | grep -E -- '^\s+FAIL |--- FAIL|_test\.go:[0-9]+: ' | grep -v -E '_test\.go:[0-9]+: $' || true
	fi
	printf '%s\n' "$out" | grep -E '^(ok|FAIL|---)' | grep -v -- '--- PASS' || true
	return $rc
}
# Each part is bounded (the Go parts by go test's -timeout): a server that
# stops answering fails its part instead of hanging the run. timeout
# signals the part's whole process group, servers and browser included.
bound="timeout -k 10 600"
run "conformance suite (compat/conformance)" conformance
run "Go peers: gorilla/websocket, coder/websocket (fuzz/interop)" go test -count=1 -timeout 600s ./fuzz/interop
run "Node ws" $bound node --test --test-reporter=spec "$here/ws.test.mjs"
run "Python websockets" $bound /usr/bin/python3 "$here/websockets_test.py"
run "Node ws: slow reader, context takeover" $bound node --test --test-reporter=spec "$here/slow_reader.test.mjs"
run "Python websockets: slow reader, context takeover" $bound /usr/bin/python3 "$here/slow_reader_test.py"
run "Chromium (playwright-core)" $bound node --test --test-reporter=spec "$here/chromium.test.mjs"

step "summary"
if [ ${#failed[@]} -gt 0 ]; then
	printf 'FAILED: %s\n' "${failed[@]}"
	exit 1
fi
echo "all interop and conformance tests passed"

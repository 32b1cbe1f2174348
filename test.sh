#!/usr/bin/env bash
# test.sh runs every test of every hotpath module, as CI does: gofmt,
# go vet, go test -race, a bounded run of every fuzz target, one iteration
# of every benchmark, a quick run of the bench runner, the browser
# client's tests under Node, and the interop suites against real clients
# (Node ws, Python websockets, Chromium, Go peers), which install what they
# need on a fresh Debian machine (apt: chromium, python3-websockets; npm
# ci). It exits non-zero on the first failing step.
#
#   ./test.sh                  everything
#   FUZZTIME=2000x ./test.sh   a longer fuzz pass (default 300x per target)
set -euo pipefail
cd "$(dirname "$0")"

MODULES=github.com/hotpath-go/hotpath/...
FUZZTIME=${FUZZTIME:-300x}

step() { printf '\n==> %s\n' "$*"; }

step "go version"
go version

step "gofmt"
unformatted=$(gofmt -l $(git ls-files --cached --others --exclude-standard -- '*.go'))
if [ -n "$unformatted" ]; then
	echo "gofmt would change:"
	echo "$unformatted"
	exit 1
fi
echo "all files formatted"

step "go vet"
go vet "$MODULES"

step "go test -race"
go test -race -count=1 "$MODULES"

step "fuzz targets, $FUZZTIME each"
go run ./fuzz -time "$FUZZTIME"

step "every module's benchmarks, one iteration each (they build, run and end)"
# BenchmarkRoomEmit waited for ever for presence events once they coalesced,
# and nothing noticed: a benchmark only runs when someone measures.
go test -count=1 -run '^$' -bench . -benchtime 1x -timeout 600s "$MODULES"

step "bench runner (quick sanity run of one cheap scenario)"
go run ./bench -quick -only '^framewrite$'

step "build the hotpath command for the tests that run it"
bindir=$(mktemp -d)
trap 'rm -rf "$bindir"' EXIT
go build -o "$bindir/hotpath" ./compat/cmd/hotpath
export HOTPATH_BIN=$bindir/hotpath

step "browser client (compat/js) under Node"
# Node 20 has WebSocket only behind a flag; the live tests need it.
node $(node -e 'typeof WebSocket>"u"&&process.stdout.write("--experimental-websocket")') --test compat/js/test/

step "interop and conformance against real clients"
compat/interop/run.sh

step "browser carriers (WebTransport, WebRTC) in Chromium"
compat/carriertest/run.sh

step "all tests passed"

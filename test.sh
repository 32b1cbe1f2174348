#!/usr/bin/env bash
# test.sh runs every test of every hotpath module, as CI does:
# install what the tests need, gofmt, go vet, go test -race, and a bounded run
# of every fuzz target. It exits non-zero on the first failure.
#
#   ./test.sh              everything
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

step "bench runner (quick sanity run of one cheap scenario)"
go run ./bench -quick -only '^framewrite$'

step "all tests passed"

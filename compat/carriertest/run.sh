#!/usr/bin/env bash
# run.sh runs the Chromium carrier tests: it builds compat/cmd/hotpath,
# installs playwright-core (npm ci) and, when missing and run as root,
# Debian's chromium, then runs chromium.test.mjs with node --test.
#
#   compat/carriertest/run.sh
#
# Needs Go, Node 20 and npm; CHROMIUM names another browser binary.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)

chromium=${CHROMIUM:-/usr/bin/chromium}
if [ ! -x "$chromium" ]; then
	if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
		apt-get update -qq
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium >/dev/null
	else
		echo "carriertest: no Chromium at $chromium, and not root to install it" >&2
		exit 1
	fi
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
(cd "$root" && go build -o "$work/hotpath" ./compat/cmd/hotpath)

cd "$here"
if [ ! -d node_modules/playwright-core ]; then
	npm ci --no-audit --no-fund --silent
fi
HOTPATH_BIN="$work/hotpath" CHROMIUM="$chromium" timeout 180 node --test --test-timeout=60000 chromium.test.mjs

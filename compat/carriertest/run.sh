#!/usr/bin/env bash
# run.sh runs the Chromium carrier tests (WebTransport, WebRTC data
# channel, WebSocket): it builds compat/cmd/hotpath, installs what is
# missing on a fresh Debian machine (chromium, nodejs and npm from apt, as
# root or with sudo; playwright-core with npm ci), then runs its four
# suites (chromium, deflate, limits, reconnect .test.mjs) with node --test.
#
#   compat/carriertest/run.sh
#
# It reuses what compat/interop/run.sh installs: the same Debian chromium
# and the same playwright-core version, which npm ci takes from npm's cache
# (--prefer-offline). CHROMIUM names another browser binary;
# SKIP_INSTALL=1 skips the apt and npm steps.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)

chromium=${CHROMIUM:-/usr/bin/chromium}
if [ "${SKIP_INSTALL:-}" != 1 ]; then
	missing=()
	[ -x "$chromium" ] || [ -n "${CHROMIUM:-}" ] || missing+=(chromium)
	command -v node >/dev/null || missing+=(nodejs)
	command -v npm >/dev/null || missing+=(npm)
	if [ ${#missing[@]} -gt 0 ]; then
		sudo=""
		[ "$(id -u)" -eq 0 ] || sudo=sudo
		echo "carriertest: apt-get install ${missing[*]}"
		$sudo apt-get update -qq
		DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
	fi
	# npm ci only when node_modules is missing or older than the lock file.
	if [ ! -f "$here/node_modules/.package-lock.json" ] || [ "$here/package-lock.json" -nt "$here/node_modules/.package-lock.json" ]; then
		(cd "$here" && npm ci --prefer-offline --no-audit --no-fund --loglevel=error)
	fi
fi
if [ ! -x "$chromium" ]; then
	echo "carriertest: no Chromium at $chromium" >&2
	exit 1
fi

# stop ends what the suites started when run.sh exits or is interrupted:
# the test runner, the servers and Chromium (proctree.sh). Without it an
# interrupted run left the runner going on its own, restarting servers
# from the binary removed with $work, until its timeout minutes later.
. "$here/../interop/proctree.sh"
work=$(mktemp -d)
runner=
stop() {
	trap - EXIT INT TERM
	[ -z "$runner" ] || stop_tree "$runner"
	rm -rf "$work"
}
trap stop EXIT
trap 'stop; exit 130' INT
trap 'stop; exit 143' TERM
(cd "$root" && go build -o "$work/hotpath" ./compat/cmd/hotpath)

# In the background, so that the traps run at once (bash runs them only
# after a foreground command ends); timeout makes the process group.
cd "$here"
HOTPATH_BIN="$work/hotpath" CHROMIUM="$chromium" timeout 300 node --test --test-concurrency=1 --test-timeout=90000 chromium.test.mjs deflate.test.mjs limits.test.mjs reconnect.test.mjs &
runner=$!
status=0
wait "$runner" || status=$?
runner=
exit "$status"

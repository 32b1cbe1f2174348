# proctree.sh, sourced by compat/interop/run.sh and compat/carriertest/run.sh:
# ending a part of a test run, with the servers and browsers it started,
# when the script is interrupted (Ctrl-C, or SIGTERM from an outer timeout).
# A part runs in the background under timeout(1), which makes it a process
# group of its own; playwright starts Chromium in yet another group, so the
# group alone is not enough and the processes below the part are ended too.

# descendants PID...: the PIDs and every process below them.
descendants() {
	local p
	for p in "$@"; do
		echo "$p"
		descendants $(pgrep -P "$p" 2>/dev/null)
	done
}

# stop_tree PID: SIGTERM to PID's process group, if it leads one, and to
# every process below PID (playwright closes its browser on it), then,
# after at most 5 s, SIGKILL to whatever is left of them.
stop_tree() {
	local procs
	procs=$(descendants "$1" | tr '\n' ' ')
	procs=${procs% }
	kill -TERM -- -"$1" $procs 2>/dev/null || true
	for _ in $(seq 50); do
		ps -o stat= -p "${procs// /,}" 2>/dev/null | grep -qv Z || break
		sleep 0.1
	done
	kill -KILL -- -"$1" $procs 2>/dev/null || true
}

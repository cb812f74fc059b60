#!/usr/bin/env bash
# make deps: what the build needs, installed only when missing: Go (checked,
# not installed), gcc for cgo and OpenCV 4 (libopencv-dev, for gocv) through
# apt, and the Go modules. apt's output is shown as it runs; when another apt
# or dpkg holds its lock (an unattended upgrade on a fresh machine), this
# waits for it, saying so, for up to APT_LOCK_WAIT seconds (default 600).
set -euo pipefail
GO=${GO:-go}
wait_s=${APT_LOCK_WAIT:-600}

if ! command -v "$GO" >/dev/null 2>&1; then
	echo "make deps: Go is not installed (need Go 1.26+ on PATH, e.g. /usr/local/go/bin)" >&2
	exit 1
fi

# apt_run runs apt-get with its arguments, retrying while apt's lock is held.
apt_run() {
	local out start=$SECONDS
	out=$(mktemp)
	trap 'rm -f "$out"' RETURN
	while true; do
		if DEBIAN_FRONTEND=noninteractive apt-get -q -o DPkg::Lock::Timeout=10 "$@" 2>&1 | tee "$out"; then
			[ "${PIPESTATUS[0]}" -eq 0 ] && return 0
		fi
		if ! grep -q -e 'Could not get lock' -e 'Unable to lock' -e 'Unable to acquire the dpkg frontend lock' "$out"; then
			return 1
		fi
		if (( SECONDS - start >= wait_s )); then
			echo "make deps: apt's lock was still held after ${wait_s}s; try again when the other apt or dpkg has finished (APT_LOCK_WAIT=seconds to wait longer)" >&2
			return 1
		fi
		echo "make deps: another apt or dpkg holds its lock (above); waiting ($((SECONDS - start))s so far, up to ${wait_s}s)…"
		sleep 5
	done
}

# apt_install installs packages, after an update.
apt_install() {
	if [ "$(id -u)" -ne 0 ]; then
		echo "make deps: installing $* needs root (run as root, or install them yourself)" >&2
		exit 1
	fi
	echo "make deps: apt-get update"
	apt_run update
	echo "make deps: apt-get install $* (a few minutes on a fresh machine)"
	apt_run install -y "$@"
}

if ! command -v gcc >/dev/null 2>&1; then
	echo "make deps: installing gcc (cgo)"
	apt_install gcc libc6-dev
fi
if ! pkg-config --exists opencv4 2>/dev/null; then
	echo "make deps: installing OpenCV 4 (libopencv-dev, for gocv; build with -tags nogocv to do without)"
	apt_install pkg-config libopencv-dev
fi
# The Go modules: each one fetched is named (nothing is printed when they
# are all in the module cache).
"$GO" mod download -x 2>&1 | while read -r line; do
	case "$line" in
	"# get "*.zip) echo "make deps: fetching ${line#\# get }" ;;
	"# get "*) ;;
	go:* | *rror*) echo "$line" >&2 ;;
	esac
done
exit "${PIPESTATUS[0]}"

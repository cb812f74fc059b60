#!/usr/bin/env bash
# The host CPU's kernels (cpu/kern) against torch's CPU matmul, alone and with
# host-to-device copies in flight, on the GPU machine, in one command from the
# repository root (scripts/gpu/cpukern.py says what it runs). Build the test
# binary first, on a machine with Go:
#   CGO_ENABLED=1 go test -c -tags nogocv -o .gpu-cpukern/kern.test ./cpu/kern
# then, there:
#   bash scripts/gpu/cpukern.sh [BINARY]
# Results: $OUT/cpukern.md, cpukern.json, cpukern-tests.log, cpukern-bench.log
# ($OUT defaults to /tmp/cpukern).
set -euo pipefail
bin=${1:-.gpu-cpukern/kern.test}
if [ ! -x "$bin" ]; then
	echo "cpukern.sh: no test binary at $bin (build it: CGO_ENABLED=1 go test -c -tags nogocv -o .gpu-cpukern/kern.test ./cpu/kern)" >&2
	exit 2
fi
if ldd "$bin" 2>&1 | grep -q 'not found'; then
	echo "cpukern.sh: $bin needs libraries this machine lacks:" >&2
	ldd "$bin" >&2
	exit 2
fi
PYTHONUNBUFFERED=1 exec python3 "$(dirname "$0")/cpukern.py" --bin "$bin" --out "${OUT:-/tmp/cpukern}"

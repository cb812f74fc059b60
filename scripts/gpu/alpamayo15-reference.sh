#!/usr/bin/env bash
# Alpamayo 1.5 against NVIDIA's own code, in one command on the GPU machine
# (from the repository root; no Go there):
#
#   bash scripts/gpu/alpamayo15-reference.sh
#
# 1. scripts/reference/alpamayo15_reference.py runs NVlabs/alpamayo1.5 (the
#    ignored .nv/alpamayo1_5, carried along) on a tiny random checkpoint and
#    writes $OUT/alpamayo15-tiny;
# 2. that folder goes to testdata/reference/alpamayo15-tiny (of this copy);
# 3. the models/alpamayo test binary built beforehand on the Go machine,
#      CGO_ENABLED=1 go test -tags nogocv -c -o .gpu/models-alpamayo.test ./models/alpamayo
#    (carried in .gpu/), runs the Alpamayo 1.5 reference tests on the cpu
#    and cuda backends.
# Logs: $OUT/alpamayo15-reference.log, $OUT/alpamayo15-go-tests.log. Exit
# status: the script's where it failed (the cases it wrote are still
# tested), else the tests'.
set -uo pipefail
out=${OUT:?set OUT to the folder whose files come back}
bin=${1:-.gpu/models-alpamayo.test}
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"

python3 scripts/reference/alpamayo15_reference.py --nv .nv/alpamayo1_5 --out "$out" 2>&1 | tee "$out/alpamayo15-reference.log"
rc=${PIPESTATUS[0]}
if [ ! -d "$out/alpamayo15-tiny" ]; then
	echo "alpamayo15-reference: the reference script wrote nothing (exit $rc); see $out/alpamayo15-reference.log" >&2
	exit "$rc"
fi
[ "$rc" -eq 0 ] || echo "alpamayo15-reference: the reference script failed on some cases (exit $rc); testing the others" >&2
rm -rf testdata/reference/alpamayo15-tiny
cp -r "$out/alpamayo15-tiny" testdata/reference/alpamayo15-tiny

if [ ! -x "$bin" ]; then
	echo "alpamayo15-reference: no test binary $bin: the reference outputs are in $out/alpamayo15-tiny" >&2
	exit 1
fi
bin=$(cd "$(dirname "$bin")" && pwd)/$(basename "$bin")
(cd models/alpamayo && "$bin" -test.run 'Alpamayo15MatchesNVIDIA' -test.v -test.count=1 -test.timeout 600s) 2>&1 | tee "$out/alpamayo15-go-tests.log"
trc=${PIPESTATUS[0]}
[ "$rc" -ne 0 ] && exit "$rc"
exit "$trc"

#!/usr/bin/env bash
# Runs the GPU test binaries in DIR (default .gpu), each from its package's
# directory so relative testdata paths resolve, and prints a summary. On a
# machine without a GPU the tests report SKIPPED; this script then says so
# loudly and still exits 0 only if nothing failed.
set -u
dir=$(cd "${1:-.gpu}" && pwd)
root=$(cd "$(dirname "$0")/.." && pwd)
fail=0 skipped=0 passed=0
for bin in "$dir"/*.test; do
	name=$(basename "$bin" .test)
	pkgdir="$root/${name//-//}"
	[ -d "$pkgdir" ] || pkgdir="$root"
	echo "=== $name"
	out=$(cd "$pkgdir" && "$bin" -test.v -test.count=1 -test.timeout 300s 2>&1)
	rc=$?
	echo "$out" | grep -E '^(--- |ok|PASS|FAIL)|SKIPPED|max \|' || true
	passed=$((passed + $(echo "$out" | grep -c -- '--- PASS')))
	skipped=$((skipped + $(echo "$out" | grep -c -- '--- SKIP')))
	[ $rc -eq 0 ] || fail=$((fail + 1))
done
echo "gpu-test: $passed passed, $fail binaries failed, $skipped skipped"
if ! nvidia-smi -L >/dev/null 2>&1; then
	echo "gpu-test: NO GPU ON THIS MACHINE: the GPU tests above were SKIPPED, not passed"
fi
[ $fail -eq 0 ]

#!/usr/bin/env bash
# Compressed streaming (issue 30) on the GPU machine, from binaries built on
# a development machine (no Go, no network there):
#
#	CGO_ENABLED=1 go build -tags nogocv -ldflags=-s -o .gpu-z/vlanode ./cmd/vlanode
#	CGO_ENABLED=1 go test -c -tags nogocv -ldflags=-s -o .gpu-z/cuda.test ./cuda
#	CGO_ENABLED=1 go test -c -tags nogocv -ldflags=-s -o .gpu-z/alpamayo.test ./models/alpamayo
#	bash scripts/gpu/compressed.sh STEP      # from the repository root
#
# STEP is one of (each fits a 10-minute call):
#   tests    the GPU tests: the Decoder calls and the executor on the GPU
#            (every tensor of the codec's cases and of synth 10B VLM and
#            expert layers in the slot equal to the raw blob, corruption
#            named), the tiny model compressed = raw = resident, bit for bit
#   profile  the decode kernel's rate into residency/profiles/h200.json
#            (vlanode profile --decode-only; commit the file afterwards)
#   synth    /tmp/a10b: synth Alpamayo-R1-10B (22 GB, seed 1)
#   exact    bench, GPU alone: compressed and raw at 4, 8, 16 GiB in one call
#   coexec   bench, with CPU shares: compressed and raw at 4, 8, 16 GiB
#
# Results go to $OUT (default ./out). It exits non-zero on a failure, and
# says so when there is no GPU (the tests then SKIP, they do not pass).
set -u
root=$(cd "$(dirname "$0")/../.." && pwd)
bin=$root/.gpu-z
out=${OUT:-$root/out}
model=${MODEL:-/tmp/a10b}
mkdir -p "$out"
fail=0
case "${1:-}" in
tests)
	(cd "$root/cuda" && "$bin/cuda.test" -test.run 'GPUDFBDecode|GPUExecutorCompressed|GPUZ' -test.v -test.count 1 -test.timeout 540s) \
		>"$out/z-cuda-tests.txt" 2>&1 || fail=1
	grep -E '^(--- |ok|PASS|FAIL)|SKIPPED' "$out/z-cuda-tests.txt"
	(cd "$root/models/alpamayo" && "$bin/alpamayo.test" -test.run 'CUDALayeredCompressed|CUDALayeredMatchesResident' -test.v -test.count 1 -test.timeout 540s) \
		>"$out/z-alpamayo-tests.txt" 2>&1 || fail=1
	grep -E '^(--- |ok|PASS|FAIL)|SKIPPED' "$out/z-alpamayo-tests.txt"
	;;
profile)
	"$bin/vlanode" profile --decode-only --from "$root/residency/profiles/h200.json" --out "$root/residency/profiles/h200.json" \
		2>&1 | tee "$out/z-profile.txt" || fail=1
	;;
synth)
	"$bin/vlanode" synth --arch alpamayo-r1-10b --out "$model" 2>&1 | tail -3 || fail=1
	;;
exact | coexec)
	flags=--exact
	[ "$1" = coexec ] && flags=
	"$bin/vlanode" bench --model "$model" --budgets 4GiB,8GiB,16GiB $flags --compare-raw --runs 2 --out "$out/z-bench-$1" \
		>"$out/z-bench-$1.txt" 2>"$out/z-bench-$1.log" || fail=1
	cat "$out/z-bench-$1.txt"
	grep -E 'pinned host memory|compression|within' "$out/z-bench-$1.log"
	;;
*)
	echo "usage: $0 tests|profile|synth|exact|coexec" >&2
	exit 2
	;;
esac
if ! nvidia-smi -L >/dev/null 2>&1; then
	echo "compressed: NO GPU ON THIS MACHINE: the GPU steps above were SKIPPED or failed, not passed"
	fail=1
fi
exit $fail

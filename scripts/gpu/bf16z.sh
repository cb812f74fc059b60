#!/usr/bin/env bash
# bf16z on the GPU machine, from test binaries built on a development
# machine (no Go, no network there):
#
#	CGO_ENABLED=1 go test -c -tags nogocv -ldflags=-s -o .gpu-codec/cuda.test ./cuda
#	CGO_ENABLED=1 go test -c -tags nogocv -ldflags=-s -o .gpu-codec/bf16z.test ./weights/bf16z
#	bash scripts/gpu/bf16z.sh [full]        # from the repository root
#
# 1. the decode kernels' GPU tests (TestGPUZ*: both kernels bit-identical
#    to the Go decoder on random and adversarial units, plans, corrupted
#    and truncated data reported in the status word);
# 2. BenchmarkGPUZDecode: GB/s of decoded output for a 386 MB VLM layer
#    and a 127 MB expert layer, both kernels (target: at least 220);
# 3. with "full": every tensor of a synthetic Alpamayo-R1-10B (22 GB,
#    written to a temporary folder) encoded, decoded and compared by the Go
#    codec on this machine's cores: ratio and rates per module.
#
# Results go to $OUT (default ./out): bf16z-tests.txt, bf16z-bench.txt,
# bf16z-checkpoint.txt. It exits non-zero if a test or the benchmark fails.
set -u
root=$(cd "$(dirname "$0")/../.." && pwd)
bin=$root/.gpu-codec
out=${OUT:-$root/out}
mkdir -p "$out"
fail=0
cd "$root/cuda" || exit 1
"$bin/cuda.test" -test.run 'GPUZ' -test.v -test.count 1 -test.timeout 600s >"$out/bf16z-tests.txt" 2>&1 || fail=1
grep -E '^(--- |ok|PASS|FAIL)|SKIPPED|bit-identical' "$out/bf16z-tests.txt"
"$bin/cuda.test" -test.run '^$' -test.bench 'GPUZDecode' -test.benchtime 10x -test.v -test.timeout 600s >"$out/bf16z-bench.txt" 2>&1 || fail=1
grep -E 'GB/s of output|SKIPPED|FAIL|^ok|^PASS' "$out/bf16z-bench.txt"
if [ "${1:-}" = full ]; then
	cd "$root/weights/bf16z" || exit 1
	"$bin/bf16z.test" -test.run 'TestCheckpoint' -test.v -test.timeout 3600s -bf16z.arch alpamayo-r1-10b -bf16z.all \
		>"$out/bf16z-checkpoint.txt" 2>&1 || fail=1
	grep -E '^\s+\||streamed|applied|wrote|--- |FAIL' "$out/bf16z-checkpoint.txt"
fi
if ! nvidia-smi -L >/dev/null 2>&1; then
	echo "bf16z: NO GPU ON THIS MACHINE: the GPU tests and benchmark above were SKIPPED, not passed"
fi
exit $fail

#!/usr/bin/env bash
# vision-preprocess.sh: the camera-resolution preprocessing on the GPU
# machine (issue 33): the bit-identity test of the device path against
# the host's and transformers', then the 16 × 1920×1080 JPEG benchmarks
# (on the GPU end to end, the host's decoding alone, all on the host).
#
# Build the test binary on a machine with Go (no OpenCV needed there or
# on the GPU machine), from the repository root:
#
#	CGO_ENABLED=1 go test -c -tags nogocv -o .gpu-vision/vision.test ./vision
#
# then run, from the repository root on the GPU machine:
#
#	bash scripts/gpu/vision-preprocess.sh [.gpu-vision/vision.test]
#
# It prints the results and writes them to $OUT/vision-preprocess.txt
# (or ./vision-preprocess.txt). Pass: every test line PASS (none SKIPPED),
# and BenchmarkGPUProcessFrames16JPEG1920x1080's ms/batch ≤ 15.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
bin=$(cd "$root" && realpath "${1:-.gpu-vision/vision.test}")
out=${OUT:-$root}/vision-preprocess.txt
cd "$root/vision" || exit 1
{
	echo "# $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores, $(lscpu | sed -n 's/^Model name: *//p'),"\
		"$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1 || echo no nvidia-smi)"
	"$bin" -test.run 'TestGPUDeviceProcessorMatchesHost|TestProcessorReference|TestFramesGolden' -test.v -test.count=1 2>&1 |
		grep -E '^(--- |ok|PASS|FAIL)|SKIPPED|bit-identical|that differ|first difference'
	echo "tests: exit ${PIPESTATUS[0]}"
	"$bin" -test.run '^$' -test.bench 'ProcessFrames16JPEG1920x1080|Decode16JPEG1920x1080' \
		-test.benchtime 50x -test.count 5 2>&1
} | tee "$out"

#!/usr/bin/env bash
# GPU selection by UUID (issue 33), run on the GPU machine from the repo
# root: bash scripts/gpu/gpu-select.sh [DIR]   (DIR: default .gpu-clients)
#
# DIR holds binaries built elsewhere with -tags nogocv:
#   go build -tags nogocv -o .gpu-clients/vlanode ./cmd/vlanode
#   go test -tags nogocv -c -o .gpu-clients/cuda-driver.test ./cuda/driver
# It checks that CUDA's cuDeviceGetUuid names each device as nvidia-smi
# does, and that `vlanode serve --gpu` (an ordinal, a UUID, and an ordinal
# under CUDA_VISIBLE_DEVICES) gives NVML telemetry and the engine the same
# GPU: serve logs the UUID it chose, and its Status reports that GPU's
# memory. Results go to $OUT (default out/gpu-select): a log and a verdict.
set -u
dir=${1:-.gpu-clients}
out=${OUT:-out/gpu-select}
mkdir -p "$out"
log="$out/gpu-select.log"
: >"$log"
say() { echo "$*" | tee -a "$log"; }
fail=0
check() { # what, ok (0/1)
	if [ "$2" -eq 0 ]; then say "PASS: $1"; else say "FAIL: $1"; fail=$((fail + 1)); fi
}

nvidia-smi -L | tee -a "$log" || { say "FAIL: no nvidia-smi"; exit 1; }
"$dir/cuda-driver.test" -test.run 'TestGPUDeviceUUID' -test.v 2>&1 | tee -a "$out/driver-test.log" | grep -E 'CUDA device|--- ' | tee -a "$log"
smi0=$(nvidia-smi --query-gpu=uuid --format=csv,noheader -i 0 | tr -d ' ')
grep -q "CUDA device 0: $smi0" "$out/driver-test.log"
check "cuDeviceGetUuid of CUDA device 0 is nvidia-smi's GPU 0 ($smi0)" $?

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$dir/vlanode" synth --arch alpamayo-r1-tiny --out "$work/tiny" >/dev/null 2>&1

# serve_once ARGS...: starts serve with --log-level info, waits for it to
# serve, reads one Status, stops it; leaves its stderr in $work/serve.err.
serve_once() {
	"$dir/vlanode" serve --model "$work/tiny" --device cuda --name sel --listen 127.0.0.1:0 --data-dir "$work/js" \
		--status-interval 200ms "$@" >"$work/serve.out" 2>"$work/serve.err" &
	local pid=$!
	for _ in $(seq 1 300); do
		grep -q 'serving' "$work/serve.out" && break
		kill -0 $pid 2>/dev/null || break
		sleep 0.2
	done
	sleep 1
	kill -TERM $pid 2>/dev/null
	wait $pid
	cat "$work/serve.out" "$work/serve.err" >>"$log"
}

serve_once --gpu 0
grep -q "cuda_ordinal=0 uuid=$smi0" "$work/serve.err"
check "--gpu 0: telemetry and engine on $smi0" $?

serve_once --gpu "$smi0"
grep -q "cuda_ordinal=0 uuid=$smi0" "$work/serve.err"
check "--gpu $smi0: CUDA ordinal 0" $?

CUDA_VISIBLE_DEVICES="$smi0" serve_once --gpu 0
grep -q "cuda_ordinal=0 uuid=$smi0" "$work/serve.err"
check "CUDA_VISIBLE_DEVICES=$smi0 --gpu 0: the same GPU" $?

n=$(nvidia-smi -L | wc -l)
if [ "$n" -ge 2 ]; then
	smi1=$(nvidia-smi --query-gpu=uuid --format=csv,noheader -i 1 | tr -d ' ')
	CUDA_VISIBLE_DEVICES=1 serve_once --gpu 0
	grep -q "cuda_ordinal=0 uuid=$smi1" "$work/serve.err"
	check "CUDA_VISIBLE_DEVICES=1 --gpu 0: NVML reads nvidia-smi's GPU 1 ($smi1), not its GPU 0" $?
else
	say "SKIPPED: one GPU: CUDA_VISIBLE_DEVICES renumbering needs two to show"
fi

say "gpu-select: $fail failed"
echo "gpu-select: $fail failed" >"$out/verdict.txt"
[ $fail -eq 0 ]

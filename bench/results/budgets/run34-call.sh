#!/usr/bin/env bash
# Session 24, GPU call 3 (issue 29): calibrate at 8 GiB (the CPU rate from the unprofiled run), then
# one bench with Accelerate at 16/8/4 GiB and one at 11/5 GiB, both with the calibrated profile.
set -u
mkdir -p .gpu && tar -C .gpu -xJf .gpurun/gpu.tar.xz
V=$PWD/.gpu/vlanode
W=/tmp/work; mkdir -p $W
step() { # name timeout cmd...
	local name=$1 t=$2; shift 2
	mkdir -p $W/$name
	echo "=== $name ($(date +%T))" | tee -a $OUT/summary.txt
	( timeout $t "$@" ) > $W/$name/stdout.log 2>&1
	echo "rc=$? ($(date +%T))" | tee -a $OUT/summary.txt
	grep -E "calibration round|pipelined|Accelerate|accelerate|^ +[0-9.]+G |rror|panic" $W/$name/stdout.log | cut -c1-420 | tail -n 25 | tee -a $OUT/summary.txt >/dev/null
	tar -C $W -czf $OUT/$name.tgz $name
}
step synth 60 $V synth --arch alpamayo-r1-10b --out /tmp/a10b
step calibrate 90 $V profile --calibrate 8GiB --model /tmp/a10b --from residency/profiles/h200.json --out $W/calibrate/h200.json --rounds 1
P=$W/calibrate/h200.json; [ -s $P ] || P=residency/profiles/h200.json
step bench 330 $V bench --model /tmp/a10b --device cuda --profile $P --budgets 16GiB,8GiB,4GiB --runs 1 --warmup 1 --accelerate .gpurun/accelerate_baseline.py --out $W/bench/out
step bench115 110 $V bench --model /tmp/a10b --device cuda --profile $P --budgets 11GiB,5GiB --runs 1 --warmup 1 --out $W/bench115/out
echo done | tee -a $OUT/summary.txt

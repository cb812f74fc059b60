#!/usr/bin/env bash
# Session 26, GPU call 3: the Euler steps' 64-row CPU tier calibrated in the executor (profile --calibrate 4GiB
# --calibrate-stage diffusion), then the standard workload's sweep at 4 and 5 GiB again with that profile.
set -u
END=${END:-560}
mkdir -p .gpu && tar -C .gpu -xJf .gpurun/gpu.tar.xz
V=$PWD/.gpu/vlanode
D=$OUT/run41; mkdir -p $D
step() { name=$1; t=$2; shift 2; [ $t -gt 5 ] || { echo "$name skipped t=$SECONDS" | tee -a $D/steps.log; return; }; ( timeout $t "$@" ) > $D/$name.log 2>&1; echo "$name rc=$? t=$SECONDS" | tee -a $D/steps.log; }
left() { echo $((END - SECONDS)); }
cap() { l=$(left); echo $(( l < $1 ? l : $1 )); }
$V synth --arch alpamayo-r1-10b --out /tmp/a10b > $D/synth-a10b.log 2>&1
echo "synth t=$SECONDS" >> $D/steps.log
step calibrate-64 $(cap 200) $V profile --calibrate 4GiB --calibrate-stage diffusion --model /tmp/a10b --from residency/profiles/h200.json --out $D/cal64.json
grep -v compressing $D/calibrate-64.log | tail -6 | cut -c1-600
[ -s $D/cal64.json ] || exit 0
for b in 4GiB 5GiB; do $V plan --model /tmp/a10b --budget $b --profile $D/cal64.json | grep -A5 "stage   rows" | cut -c1-80; done
step sweep-4GiB-5GiB $(left) $V bench --model /tmp/a10b --device cuda --profile $D/cal64.json --budgets 4GiB,5GiB --plan-kinds gpu-only,static,dynamic --runs 1 --warmup 1 --out $D/sweep45
grep -vE "compressing" $D/sweep-4GiB-5GiB.log | grep -E "pick|planned|stage  pick|standard|pipelined  " | cut -c1-330 | tail -24

#!/usr/bin/env bash
# Session 24, GPU call 1 (issue 31): 8 clients and 32 clips at 8 GiB through NATS with batches of
# up to 8, the node's default plan and --exact; then the budget 8 -> 4 -> 16 GiB under load.
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
	grep -E "plans/s|solo|same reasoning|worst|^plans|^errors|clips:|round_trip|^ +total|rror|panic|OVER|ok$|replay:" $W/$name/stdout.log | cut -c1-300 | tail -n 25 | tee -a $OUT/summary.txt >/dev/null
}
nvidia-smi --query-gpu=name,memory.used --format=csv | tee -a $OUT/summary.txt
step synth 60 $V synth --arch alpamayo-r1-10b --out /tmp/a10b
$V clip --out /tmp/clips32 --count 32 --seconds 0.4 > $W/clips.log 2>&1
serial=$(for i in 0 1 2 3 4 5 6 7; do echo /tmp/clips32/clip-00$i; done)
node() { # tag extra-flags...
	local tag=$1; shift
	$V serve --model /tmp/a10b --device cuda --name h200 --port 4222 --budget 8GiB --max-batch 8 --batch-wait 20ms --queue-bound 40 --data-dir /tmp/js-$tag "$@" > $W/serve-$tag.out 2> $W/serve-$tag.err &
	SERVE=$!
	for i in $(seq 1 120); do grep -q "serving" $W/serve-$tag.out 2>/dev/null && break; sleep 1; done
	echo "serve $tag up after ${i}s" | tee -a $OUT/summary.txt
	step load-$tag 150 $V load --nats-url nats://127.0.0.1:4222 --node h200 --clients 8 --requests 2 --max-reasoning-tokens 21 --height 1080 --out $W/load-$tag/load.json
	step serial-$tag 90 $V replay --nats-url nats://127.0.0.1:4222 --node h200 --concurrency 1 --no-progress --max-reasoning-tokens 21 --out $W/serial-$tag/serial.jsonl $serial
	step c32-$tag 90 $V replay --nats-url nats://127.0.0.1:4222 --node h200 --concurrency 32 --no-progress --max-reasoning-tokens 21 --out $W/c32-$tag/c32.jsonl /tmp/clips32
	kill -TERM $SERVE; wait $SERVE
	grep -E "batch|budget" $W/serve-$tag.err | tail -5 >> $OUT/summary.txt
	tar -C $W -czf $OUT/$tag.tgz serve-$tag.out serve-$tag.err load-$tag serial-$tag c32-$tag
	rm -rf /tmp/js-$tag
}
node auto
node exact --exact
mkdir -p /tmp/bul && $V clip --out /tmp/bul/clips --count 4 --seconds 3 > /dev/null 2>&1
step bul 240 env BIN=$V HIGH=8 LOW=4 END=16 MAX_TOKENS=21 MODEL=/tmp/a10b OUT=/tmp/bul SETTLE=10 HOLD=20 bash .gpu/budget-under-load.sh
tail -n 30 $W/bul/stdout.log >> $OUT/summary.txt
tar -C /tmp -czf $OUT/bul.tgz bul/serve.out bul/serve.err bul/budget.txt bul/replay.txt bul/mem.csv bul/load.jsonl bul/t-low bul/t-high $W/bul 2>/dev/null
echo done | tee -a $OUT/summary.txt

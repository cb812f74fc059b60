#!/usr/bin/env bash
# The budget changes while clients keep sending (issue 31): serve a model
# within HIGH GiB, replay clips into it four at a time, change the budget to
# LOW GiB and then to END GiB (HIGH unless set) with `vlanode budget`, and
# check with nvidia-smi sampled every 10 ms that the GPU's memory never went
# above the old or the new budget during each change (nor above LOW while it
# held, nor above END after), that every request got a plan, and that each
# plan's vram_peak_bytes is within the budget it carries.
#
#   scripts/budget-under-load.sh                     # bin/vlanode, /tmp/a10b, 16 -> 8 -> 16 GiB
#   HIGH=8 LOW=4 END=16 MODEL=/tmp/a10b OUT=/tmp/b8416 scripts/budget-under-load.sh
#
# Needs nvidia-smi and python3; exits 1 when a check fails.
set -euo pipefail
bin=${BIN:-bin/vlanode}
model=${MODEL:-/tmp/a10b}
device=${DEVICE:-cuda}
high=${HIGH:-16}
low=${LOW:-8}
end=${END:-$high}
settle=${SETTLE:-15} # seconds at HIGH before the first change
hold=${HOLD:-30}     # seconds at LOW
after=${AFTER:-0}    # seconds at END before the replay's last clips are awaited
tokens=${MAX_TOKENS:-0} # max_reasoning_tokens of every request (0: the model's default; 21 for the standard workload)
out=${OUT:-$(mktemp -d)}
port=${PORT:-4299}
smi=${NVIDIA_SMI:-nvidia-smi}
mkdir -p "$out"
url=nats://127.0.0.1:$port
token=budget-under-load-$$

[ -d "$out/clips" ] || "$bin" clip --out "$out/clips" --count 8 --seconds 3 >/dev/null
"$smi" --query-gpu=timestamp,memory.used --format=csv,noheader,nounits -lms 10 >"$out/mem.csv" &
sampler=$!
serve=""
trap 'kill -TERM $sampler ${serve:-} 2>/dev/null || true; wait 2>/dev/null || true' EXIT
sleep 1 # the idle memory, before serve starts

"$bin" serve --model "$model" --device "$device" --budget "${high}GiB" --name budget --port "$port" \
	--data-dir "$out/js" --queue-bound 32 --control-token "$token" >"$out/serve.out" 2>"$out/serve.err" &
serve=$!
for _ in $(seq 1 1200); do # the model loads: up to 2 minutes
	grep -q "node budget serving" "$out/serve.out" && break
	kill -0 $serve 2>/dev/null || { echo "serve exited:" >&2; cat "$out/serve.err" >&2; exit 1; }
	sleep 0.1
done
grep -q "node budget serving" "$out/serve.out" || { echo "serve did not start" >&2; exit 1; }

"$bin" replay --nats-url "$url" --node budget --concurrency 4 --every 5 --no-progress --max-reasoning-tokens "$tokens" \
	--out "$out/load.jsonl" "$out/clips" >"$out/replay.txt" 2>&1 &
replay=$!
change() { # change NAME GiB: times the change into $out/t-NAME (epoch s before and after)
	date +%s.%N >"$out/t-$1"
	"$bin" budget --nats-url "$url" --node budget --control-token "$token" --set "${2}GiB" | tee -a "$out/budget.txt"
	date +%s.%N >>"$out/t-$1"
}
sleep "$settle"
change low "$low"
sleep "$hold"
change high "$end"
sleep "$after"
replay_rc=0
wait $replay || replay_rc=$?
cat "$out/replay.txt"
kill -TERM $serve
wait $serve || true
serve=""
kill -TERM $sampler
wait $sampler 2>/dev/null || true

python3 - "$out" "$high" "$low" "$end" "$replay_rc" <<'PY'
import csv, datetime, json, sys
out, replay_rc = sys.argv[1], int(sys.argv[5])
high, low, end = (float(x) * 1024 for x in sys.argv[2:5])
ts = lambda s: datetime.datetime.strptime(s.strip(), "%Y/%m/%d %H:%M:%S.%f").timestamp()
rows = [(ts(r[0]), float(r[1])) for r in csv.reader(open(f"{out}/mem.csv")) if len(r) == 2]
base = rows[0][1]  # MiB in use before serve started
t_low = [float(x) for x in open(f"{out}/t-low")]
t_high = [float(x) for x in open(f"{out}/t-high")]
top = lambda a, b: max((m for t, m in rows if a <= t <= b), default=0.0) - base
g = lambda mib: f"{mib/1024:g} GiB"
checks = [
    ("whole run", top(0, 1e12), max(high, low, end)),
    (f"at {g(high)}", top(0, t_low[0]), high),
    (f"during {g(high)} -> {g(low)}", top(*t_low), max(high, low)),
    (f"at {g(low)}", top(t_low[1], t_high[0]), low),
    (f"during {g(low)} -> {g(end)}", top(*t_high), max(low, end)),
    (f"at {g(end)}", top(t_high[1], 1e12), end),
]
ok = replay_rc == 0
print(f"nvidia-smi: {len(rows)} samples, {base:.0f} MiB in use before serve; MiB above that:")
for name, mib, limit in checks:
    good = mib <= limit
    ok &= good
    print(f"  {name:24s} max {mib:8.0f}  limit {limit:8.0f}  {'ok' if good else 'OVER'}")
lines = [json.loads(l) for l in open(f"{out}/load.jsonl")]
plans = [x["plan"] for x in lines if "plan" in x]
failed = [x for x in lines if "plan" not in x]
within = all(p["vram_peak_bytes"] <= p["budget_bytes"] for p in plans)
ok &= not failed and within
print(f"replay: {len(plans)} plans, {len(failed)} failed {failed[:3]}; budgets {sorted({p['budget_bytes'] for p in plans})}; "
      f"every peak within its plan's budget: {within}")
sys.exit(0 if ok else 1)
PY

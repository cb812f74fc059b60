#!/usr/bin/env bash
# Runs every reference checkpoint of testdata/reference that the command
# line can check against transformers' outputs, through the command line:
# for each Qwen3 case `vlanode generate --expect` (greedy ids) and `vlanode
# eval --expect` (logits), for each Qwen3-VL case and each of its inputs
# `vlanode eval --expect`, for each Alpamayo-R1 action side (expert) case
# `vlanode eval --states --expect` (teacher-forced: the action embedding,
# hidden states and velocity at each of the reference's Euler states, and
# the keys and values written into the VLM cache). The tolerances are
# eval's defaults for the device (cmd/vlanode/expect.go).
#
#   bash scripts/cli-reference.sh [BIN [DEVICE]]   # defaults: bin/vlanode cpu
#
# On the GPU machine: bash scripts/cli-reference.sh .gpu/vlanode cuda.
# Prints one line a check (and one more for each further tensor compared)
# and a summary; exits 1 if any check failed.
set -u
bin=${1:-bin/vlanode}
device=${2:-cpu}
root=$(cd "$(dirname "$0")/.." && pwd)
ref=$root/testdata/reference
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
pass=0 fail=0

check() { # name, then the command
	local name=$1
	shift
	if out=$("$@" 2>&1) && grep -q '^MATCH:' <<<"$out" && ! grep -q MISMATCH <<<"$out"; then
		pass=$((pass + 1))
		echo "PASS $name: $(grep -m1 '^MATCH:' <<<"$out")"
		grep '^MATCH:' <<<"$out" | tail -n +2 | sed 's/^/    /' # the expert's other tensors
	else
		fail=$((fail + 1))
		echo "FAIL $name:"
		sed 's/^/    /' <<<"$out" | tail -n 20
	fi
}

for dir in "$ref"/qwen3-*/; do
	dir=${dir%/}
	case=$(basename "$dir")
	check "$case generate" "$bin" generate --device "$device" --model "$dir" --inputs "$dir/inputs.safetensors" \
		--max-new-tokens 12 --expect "$dir/expected.safetensors"
	check "$case eval" "$bin" eval --device "$device" --model "$dir" --inputs "$dir/inputs.safetensors" \
		--out "$work/$case.safetensors" --expect "$dir/expected.safetensors"
done
for dir in "$ref"/qwen3vl-*/; do
	dir=${dir%/}
	case=$(basename "$dir")
	for in in "$dir"/inputs*.safetensors; do
		variant=$(basename "$in" .safetensors)
		variant=${variant#inputs}
		check "$case eval${variant:+ ${variant#-}}" "$bin" eval --device "$device" --model "$dir" --inputs "$in" \
			--out "$work/$case$variant.safetensors" --expect "$dir/expected$variant.safetensors"
	done
done
for dir in "$ref"/alpamayo-expert*/; do
	dir=${dir%/}
	case=$(basename "$dir")
	check "$case eval" "$bin" eval --device "$device" --model "$dir" --vlm "$dir/vlm_config.json" \
		--inputs "$dir/inputs.safetensors" --states "$dir/expected.safetensors" \
		--out "$work/$case.safetensors" --expect "$dir/expected.safetensors"
done
echo "cli-reference ($device): $pass passed, $fail failed"
[ "$fail" -eq 0 ]

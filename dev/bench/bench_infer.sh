#!/usr/bin/env bash
# make bench-infer: generation speed of ./infer at batch 1 on a GPT-2 124M-shaped model, next to
# the limit that memory bandwidth sets on this machine, both measured in the same run.
#
# Generating one token reads every weight once (each used for one multiply-add), so
#   tokens/s <= read bandwidth / bytes read per token.
# Bytes per token: all parameters except wpe (only the token's own row of it is read), as float32,
# plus the keys and values in the cache (2 L C floats per position attended to). Read bandwidth:
# dev/bench/membw.c, all threads summing a 1 GiB buffer, the median of its passes (sustained, as the
# generation speed is an average over many tokens). The machine may be shared and its bandwidth
# varies from moment to moment, so the two alternate: membw, infer, membw, infer, ..., membw, and
# each round compares infer with the mean of the two bandwidths measured around it. The summary
# is the median round.
#
#   bash dev/bench/bench_infer.sh                   random GPT-2 124M weights (-e d12)
#   MODEL=data/gpt2_124M.safetensors bash dev/bench/bench_infer.sh    any model infer reads
#   knobs: TOKENS=128 (tokens generated per run), ROUNDS=3
set -euo pipefail
cd "$(dirname "$0")/../.."
CC=${CC:-gcc}
CFLAGS=${CFLAGS:--O3 -march=native -fopenmp}
MODEL=${MODEL:-d12}
TOKENS=${TOKENS:-128}
ROUNDS=${ROUNDS:-3}
PROMPT="The history of the city begins with a small settlement on the river, where"
mkdir -p build
$CC $CFLAGS -o build/membw dev/bench/membw.c
[ -x ./infer ] || { echo "bench_infer: ./infer not built (make infer)" >&2; exit 1; }

# bytes read per decode step, from infer's own report of the model and the run
bytes_per_token() {  # stderr file of an infer run
  awk '
    /^model:/ { for (i = 1; i <= NF; i++) { split($i, f, "="); gsub(",", "", f[2]); v[f[1]] = f[2] }
                params = $(NF-3) }
    /^prompt:/ { P = $2 }
    /^generation:/ { for (i = 1; i <= NF; i++) if ($i == "decode") steps = $(i-1) }
    END {
      weights = 4 * (params - (v["maxT"] - 1) * v["C"])      # float32; one row of wpe
      kv = 4 * 2 * v["L"] * v["C"] * (P + (steps + 1) / 2)   # cache, averaged over the steps
      printf "%.0f %.0f\n", weights, kv
    }' "$1"
}

# Other jobs on the cores hurt infer far more than membw: each token passes ~135 OpenMP barriers,
# and one descheduled thread stalls each of them, the more so when the threads that wait for it
# spin on the core it needs. So, unless told otherwise, GCC's OpenMP spins only briefly before
# its waiting threads sleep (GOMP_SPINCOUNT; the default is 300000; doc/infer.md has the
# measurements). And say how busy the machine was.
[ -z "${OMP_WAIT_POLICY:-}" ] && export GOMP_SPINCOUNT=${GOMP_SPINCOUNT:-3000}
cores=$(getconf _NPROCESSORS_ONLN)
load_before=$(cut -d' ' -f1 /proc/loadavg)
bw_before=$(./build/membw | awk '{print $2}')
ratios=()
for ((r = 1; r <= ROUNDS; r++)); do
  ./infer -e "$MODEL" -p "$PROMPT" -n "$TOKENS" -E 0 -S "$r" > /dev/null 2> build/bench_infer.err ||
    { cat build/bench_infer.err >&2; exit 1; }
  bw_after=$(./build/membw | awk '{print $2}')
  tps=$(awk '/^generation:/ {print $(NF-1)}' build/bench_infer.err)
  read -r weights kv < <(bytes_per_token build/bench_infer.err)
  line=$(awk -v a="$bw_before" -v b="$bw_after" -v w="$weights" -v kv="$kv" -v tps="$tps" -v r="$r" 'BEGIN {
    bw = (a + b) / 2; limit = bw * 1e9 / (w + kv)
    printf "round %d: memory read %.1f GB/s (%.1f before, %.1f after), limit %.1f tok/s, generation %.1f tok/s = %.0f%%", r, bw, a, b, limit, tps, 100 * tps / limit
  }')
  echo "$line"
  ratios+=("$(echo "$line" | awk '{gsub("%", "", $NF); print $NF}') $line")
  bw_before=$bw_after
done
grep '^model:\|^prompt:\|^generation:' build/bench_infer.err | sed 's/^/last run: /'
awk -v w="$weights" -v kv="$kv" -v model="$MODEL" 'BEGIN {
  printf "model %s: %.1f MB of weights + %.1f MB of cache (on average) read per generated token\n", model, w / 1e6, kv / 1e6 }'
median=$(printf '%s\n' "${ratios[@]}" | sort -n | awk -v n="${#ratios[@]}" 'NR == int((n + 1) / 2) {$1 = ""; print substr($0, 2)}')
echo "bench_infer: median $median of the memory-bandwidth limit (batch 1, float32)"
load_after=$(cut -d' ' -f1 /proc/loadavg)
echo "load average $load_before before, $load_after after, on $cores cores (includes this benchmark); OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-} GOMP_SPINCOUNT=${GOMP_SPINCOUNT:-}"
if awk -v l="$load_before" -v c="$cores" 'BEGIN {exit !(l > 0.5 * c)}'; then
  echo "warning: the machine was busy before the run (load $load_before on $cores cores): other jobs" \
       "share the cores, and the tok/s above understate infer; rerun when it is idle"
fi

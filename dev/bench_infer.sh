#!/usr/bin/env bash
# make bench-infer: generation speed of ./infer at batch 1 on a GPT-2 124M-shaped model, next to
# the limit that memory bandwidth sets on this machine, both measured in the same run.
#
# Generating one token reads every weight once (each used for one multiply-add), so
#   tokens/s <= read bandwidth / bytes read per token.
# Bytes per token: all parameters except wpe (only the token's own row of it is read), as float32,
# plus the keys and values in the cache (2 L C floats per position attended to). Read bandwidth:
# dev/membw.c, all threads summing a 1 GiB buffer. The machine is shared and its bandwidth varies
# from moment to moment, so both are measured ROUNDS times, alternating, and the best of each is
# compared (the least disturbed measurement of each).
#
#   bash dev/bench_infer.sh                   random GPT-2 124M weights (-e d12)
#   MODEL=data/gpt2_124M.safetensors bash dev/bench_infer.sh    any model infer reads
set -euo pipefail
cd "$(dirname "$0")/.."
CC=${CC:-gcc}
CFLAGS=${CFLAGS:--O3 -march=native -fopenmp}
MODEL=${MODEL:-d12}
TOKENS=${TOKENS:-128}
ROUNDS=${ROUNDS:-3}
PROMPT="The history of the city begins with a small settlement on the river, where"
mkdir -p build
$CC $CFLAGS -o build/membw dev/membw.c
[ -x ./infer ] || { echo "bench_infer: ./infer not built (make infer)" >&2; exit 1; }

best_bw=0; best_tps=0
for ((r = 1; r <= ROUNDS; r++)); do
  bw=$(./build/membw | awk '{print $2}')
  ./infer -e "$MODEL" -p "$PROMPT" -n "$TOKENS" -E 0 -S "$r" > /dev/null 2> build/bench_infer.err ||
    { cat build/bench_infer.err >&2; exit 1; }
  tps=$(awk '/^generation:/ {print $(NF-1)}' build/bench_infer.err)
  echo "round $r: memory read $bw GB/s, generation $tps tok/s"
  best_bw=$(awk -v a="$best_bw" -v b="$bw" 'BEGIN {print (b > a ? b : a)}')
  best_tps=$(awk -v a="$best_tps" -v b="$tps" 'BEGIN {print (b > a ? b : a)}')
done
grep '^model:\|^prompt:\|^generation:' build/bench_infer.err | sed 's/^/last run: /'
# model: L=12 NH=12 C=768 V=50257 maxT=1024, 124475904 parameters, 2 threads
read -r L C maxT params P steps < <(awk '
  /^model:/ { for (i = 1; i <= NF; i++) { split($i, kv, "="); gsub(",", "", kv[2]); v[kv[1]] = kv[2] }
              L = v["L"]; C = v["C"]; maxT = v["maxT"]; params = $(NF-3) }
  /^prompt:/ { P = $2 }
  /^generation:/ { for (i = 1; i <= NF; i++) if ($i == "decode") steps = $(i-1) }
  END { print L, C, maxT, params, P, steps }' build/bench_infer.err)
awk -v L="$L" -v C="$C" -v maxT="$maxT" -v params="$params" -v P="$P" -v steps="$steps" \
    -v bw="$best_bw" -v tps="$best_tps" -v model="$MODEL" 'BEGIN {
  weights = 4 * (params - (maxT - 1) * C)          # float32; one row of wpe
  kv = 4 * 2 * L * C * (P + (steps + 1) / 2)       # cache read, averaged over the decode steps
  limit = bw * 1e9 / (weights + kv)
  printf "model %s: %.1f MB of weights + %.1f MB of cache (average) read per token\n", model, weights / 1e6, kv / 1e6
  printf "memory-bandwidth limit: %.1f GB/s / %.1f MB = %.1f tok/s\n", bw, (weights + kv) / 1e6, limit
  printf "bench_infer: generation %.1f tok/s at batch 1 = %.0f%% of the memory-bandwidth limit (%.1f tok/s)\n", tps, 100 * tps / limit, limit
}'

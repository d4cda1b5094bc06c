#!/usr/bin/env bash
# make bench-data: the memory a training run holds for its data, on a data set far larger than
# memory would allow reading whole, against Tiny Shakespeare. ./train_cpu trains its default model
# (default B, T) for STEPS steps, shuffled, once on data/tinyshakespeare_train.bin (338K tokens,
# 0.7 MB) and once on SHARDS shards of 100M tokens (200 MB each; Tiny Shakespeare's ids repeated,
# written in llm.c's format by test/shards_make.py's writer) named by a glob, and reports each
# run's peak resident memory (GNU time's maximum resident set size) and its wall time (the larger
# set's includes checking every shard's header and ids before the first step). The loader maps one
# shard at a time (gpt2/dataloader.h), so the two peaks should differ by at most what one shard's
# pages touched add, not by the data set's size.
#
#   bash dev/bench/bench_data.sh            knobs: SHARDS=16 (3.2 GB), STEPS=5, DIR=build/bench/shards
set -euo pipefail
cd "$(dirname "$0")/../.."
SHARDS=${SHARDS:-16}
STEPS=${STEPS:-5}
DIR=${DIR:-build/bench/shards}
PY=${PYTHON:-/usr/bin/python3}
[ -x ./train_cpu ] || { echo "bench_data: ./train_cpu not built (make train_cpu)" >&2; exit 1; }
[ -x /usr/bin/time ] || { echo "bench_data: needs GNU time (apt-get install time)" >&2; exit 1; }
mkdir -p "$DIR"
if [ "$(ls "$DIR"/ts_train_*.bin 2>/dev/null | wc -l)" != "$SHARDS" ]; then
  rm -f "$DIR"/ts_train_*.bin
  "$PY" - "$DIR/ts" "$SHARDS" data/tinyshakespeare_train.bin <<'PY'
import sys
sys.path.insert(0, "test")
import numpy as np
import shards_make
prefix, shards, src = sys.argv[1], int(sys.argv[2]), sys.argv[3]
ids = shards_make.read_tokens(src).astype(np.uint16)
one = np.resize(ids, 100_000_000)  # Tiny Shakespeare's ids repeated to 100M
for k in range(shards):
    shards_make.write_shard("%s_train_%06d.bin" % (prefix, k + 1), np.roll(one, 7919 * k))
PY
fi
bytes=$(cat "$DIR"/ts_train_*.bin | wc -c)
cpu=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')
echo "machine: $cpu, $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GB", $2 / 1e6}' /proc/meminfo) memory"
echo "./train_cpu (default model and batch) -x $STEPS -R 1 -v 0 -s 0, on each data set:"
printf "%-44s %10s %12s %14s %10s\n" "data" "tokens" "bytes" "peak RSS (MB)" "wall (s)"
run() {  # NAME -i ARG
  local name=$1 spec=$2 log=build/bench/data_$1.log
  /usr/bin/time -f "%M %e" -o build/bench/data_$1.rss ./train_cpu -i "$spec" -x "$STEPS" -R 1 -v 0 -s 0 > "$log" 2>&1
  local rss wall tokens
  read -r rss wall < <(tail -n1 build/bench/data_$1.rss)
  tokens=$(sed -nE 's/^train: .* \(([0-9]+ shards, )?([0-9]+) tokens.*/\2/p' "$log")
  printf "%-44s %10s %12s %14s %10s\n" "$spec" "$tokens" "$3" "$((rss / 1024))" "$wall"
  echo "$((rss / 1024))" > build/bench/data_$1.mb
}
run tiny data/tinyshakespeare_train.bin "$(wc -c < data/tinyshakespeare_train.bin)"
run shards "$DIR/ts_train_*.bin" "$bytes"
tiny=$(cat build/bench/data_tiny.mb) big=$(cat build/bench/data_shards.mb)
echo "peak RSS on $((bytes / 1000000)) MB of shards - on Tiny Shakespeare: $((big - tiny)) MB"
grep -m1 "^step $STEPS/" build/bench/data_shards.log || true

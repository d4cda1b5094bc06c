#!/usr/bin/env bash
# make bench-cpu: training speed of ./train_cpu next to this machine's FMA peak and PyTorch, all
# measured in the same run, for GPT-2 124M (-e d12, B=4, T=64) and for train_cpu's default model
# and batch (no flags; ./train_cpu -h lists them).
#
# What is counted (doc/cpu_speed.md):
#   FLOPs per step = 6 * P * B * T with P = all parameters train_cpu reports (with wte's padding
#   rows, which the output layer does multiply). 2 FLOPs per multiply-add, forward 2PBT, backward
#   4PBT. Left out: attention's own products (QK^T and att.V, 12 * L * T * C per token for forward
#   + backward without the causal saving, 1% of the total for d12 at T=64) and everything that is
#   not a multiply-add in a matmul (layernorm, softmax, GELU, AdamW), so achieved GFLOP/s is model
#   FLOPs per second, as MFU counts it, not every instruction executed.
#   FMA peak: dev/fma_peak.c, all OpenMP threads running independent vector FMA chains.
#   ms per step: the median of the steps train_cpu times after its first (the first touches
#   freshly allocated memory); validation and sampling off (-v 0 -s 0).
#   PyTorch: dev/bench_torch.py on the checkpoint train_cpu starts from (same model, same
#   weights, same B and T), the same step (forward, backward, clip, AdamW), as many threads.
#
#   bash dev/bench_cpu.sh          knobs: STEPS=6 (train_cpu steps per model), TORCH=1 (0 skips PyTorch)
set -euo pipefail
cd "$(dirname "$0")/.."
CC=${CC:-gcc}
CFLAGS=${CFLAGS:--O3 -march=native -fopenmp}
PYTHON=${PYTHON:-/usr/bin/python3}
STEPS=${STEPS:-6}
TORCH=${TORCH:-1}
[ -x ./train_cpu ] || { echo "bench_cpu: ./train_cpu not built (make train_cpu)" >&2; exit 1; }
mkdir -p build/bench
$CC $CFLAGS -o build/fma_peak dev/fma_peak.c

threads=$(./build/fma_peak 1000 | sed 's/.*threads \([0-9]*\).*/\1/')
peak_line=$(./build/fma_peak)
peak=$(echo "$peak_line" | awk '{print $2}')
echo "machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cores, $threads OpenMP threads"
echo "FMA peak: $peak GFLOP/s float32 ($peak_line)"

torch_ok=0
if [ "$TORCH" = 1 ] && $PYTHON -c 'import torch' 2>/dev/null; then torch_ok=1; fi

summary=()
bench_model() {  # name, train_cpu flags (model and batch)
  local name=$1; shift
  local dir=build/bench/$name
  rm -rf "$dir"
  echo
  echo "== $name: ./train_cpu $* -x $STEPS -v 0 -s 0"
  ./train_cpu "$@" -x "$STEPS" -v 0 -s 0 > "$dir.log" 2>&1 || { cat "$dir.log" >&2; exit 1; }
  grep '^model:\|^step ' "$dir.log" | sed 's/^/  /'
  # P from the model line; B and T from the memory line; median ms of steps 2..STEPS
  local ms
  ms=$(awk '/^step / && $2 !~ /^1\// { for (i = 1; i <= NF; i++) if ($i == "ms") print $(i-1) }' "$dir.log" |
       sort -n | awk '{ t[n++] = $1 } END { print n % 2 ? t[(n-1)/2] : (t[n/2-1] + t[n/2]) / 2 }')
  read -r P B T < <(awk '
    /^model:/ { for (i = 1; i <= NF; i++) if ($i == "parameters") P = $(i-1) }
    /^memory:/ { match($0, /B=[0-9]+/); B = substr($0, RSTART+2, RLENGTH-2)
                 match($0, /T=[0-9]+/); T = substr($0, RSTART+2, RLENGTH-2) }
    END { print P, B, T }' "$dir.log")
  local line
  line=$(awk -v P="$P" -v B="$B" -v T="$T" -v ms="$ms" -v peak="$peak" -v name="$name" 'BEGIN {
    flops = 6 * P * B * T; gf = flops / (ms * 1e-3) * 1e-9
    printf "%s: train_cpu %.1f ms/step, %.0f tok/s, %.1f GFLOP/s = %.1f%% of FMA peak (6*P*B*T = %.1f GFLOP per step, P=%d, B=%d, T=%d)",
           name, ms, B * T / (ms * 1e-3), gf, 100 * gf / peak, flops * 1e-9, P, B, T }')
  echo "  $line"
  if [ $torch_ok = 1 ]; then
    ./train_cpu "$@" -x 0 -v 0 -s 0 -o "$dir" > /dev/null
    $PYTHON dev/bench_torch.py "$dir/model_00000000.bin" -b "$B" -t "$T" --threads "$threads" > "$dir.torch.log" 2>&1 ||
      { cat "$dir.torch.log" >&2; exit 1; }
    sed 's/^/  /' "$dir.torch.log"
    local tms
    tms=$(awk '/^torch_ms_per_step/ {print $2}' "$dir.torch.log")
    line="$line; PyTorch $tms ms/step, train_cpu is $(awk -v a="$tms" -v b="$ms" 'BEGIN {printf "%.2f", a / b}')x faster"
    rm -rf "$dir"
  fi
  summary+=("$line")
}

bench_model d12 -e d12 -b 4 -t 64
bench_model default

echo
echo "== summary (FMA peak $peak GFLOP/s, $threads threads)"
for s in "${summary[@]}"; do echo "$s"; done
[ $torch_ok = 1 ] && grep -h '^torch_blas' build/bench/d12.torch.log | sed 's/^torch_blas/PyTorch BLAS:/' || true

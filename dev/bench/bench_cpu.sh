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
#   FMA peak: dev/bench/fma_peak.c, all OpenMP threads running independent vector FMA chains, measured
#   before and after every train_cpu run; the summary uses the highest (what the cores can do),
#   and says so when the measurements disagree, which means other processes were using the cores.
#   ms per step: the median of the steps train_cpu times after its first (the first touches
#   freshly allocated memory), and the fastest; validation and sampling off (-v 0 -s 0).
#   PyTorch: dev/bench/bench_torch.py on the checkpoint train_cpu starts from (same model, same
#   weights, same B and T), the same step (forward, backward, clip, AdamW), as many threads.
# The machine may be shared: the script first waits (up to QUIET_WAIT seconds) until no other
# process is using more than 10% of a core, and names the ones that were when it gives up waiting.
#
#   bash dev/bench/bench_cpu.sh
#   knobs: STEPS=8 (train_cpu steps per model), TORCH=1 (0 skips PyTorch), QUIET_WAIT=120
set -euo pipefail
cd "$(dirname "$0")/../.."
CC=${CC:-gcc}
CFLAGS=${CFLAGS:--O3 -march=native -fopenmp}
PYTHON=${PYTHON:-/usr/bin/python3}
STEPS=${STEPS:-8}
TORCH=${TORCH:-1}
QUIET_WAIT=${QUIET_WAIT:-120}
[ -x ./train_cpu ] || { echo "bench_cpu: ./train_cpu not built (make train_cpu)" >&2; exit 1; }
mkdir -p build/bench
$CC $CFLAGS -o build/fma_peak dev/bench/fma_peak.c

# Other processes over 10% of a core during one second (top's second sample), or nothing.
busy_processes() {
  command -v top > /dev/null || return 0
  top -bn2 -d1 | awk -v me=$$ '/^top -/ { n++ } n == 2 && $1 ~ /^[0-9]+$/ && $9 + 0 > 10 && $12 != "top" { print $12 "(" $9 "%)" }' |
    head -5 | tr '\n' ' '
}
wait_quiet() {
  local start=$SECONDS busy
  while busy=$(busy_processes) && [ -n "$busy" ]; do
    if [ $((SECONDS - start)) -ge "$QUIET_WAIT" ]; then
      echo "  note: the machine is busy ($busy); timings below are disturbed by it"
      return
    fi
    sleep 5
  done
}

peaks=()
measure_peak() {
  local p
  p=$(./build/fma_peak | awk '{print $2}')
  peaks+=("$p")
  echo "  FMA peak now: $p GFLOP/s"
}

threads=$(./build/fma_peak 1000 | sed 's/.*threads \([0-9]*\).*/\1/')
cpuinfo() { grep -m1 "^$1" /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'; }
# the model name alone can hide the generation ("AMD EPYC"): family 25 is Zen 3/4, 26 is Zen 5
echo "machine: $(cpuinfo 'model name') (family $(cpuinfo 'cpu family'), model $(cpuinfo 'model')), $(nproc) cores, $threads OpenMP threads"
echo "FMA peak: $(./build/fma_peak)"

torch_ok=0
if [ "$TORCH" = 1 ] && $PYTHON -c 'import torch' 2>/dev/null; then torch_ok=1; fi

results=()   # "name P B T median_ms fastest_ms torch_ms" per model
bench_model() {  # name, train_cpu flags (model and batch)
  local name=$1; shift
  local dir=build/bench/$name
  rm -rf "$dir"
  echo
  echo "== $name: ./train_cpu $* -x $STEPS -v 0 -s 0"
  wait_quiet
  measure_peak
  ./train_cpu "$@" -x "$STEPS" -v 0 -s 0 > "$dir.log" 2>&1 || { cat "$dir.log" >&2; exit 1; }
  measure_peak
  grep '^model:\|^step ' "$dir.log" | sed 's/^/  /'
  # median and fastest ms of steps 2..STEPS; P from the model line, B and T from the memory line
  local ms fastest P B T tms=-
  read -r ms fastest < <(awk '/^step / && $2 !~ /^1\// { for (i = 1; i <= NF; i++) if ($i == "ms") print $(i-1) }' "$dir.log" |
       sort -n | awk '{ t[n++] = $1 } END { print (n % 2 ? t[(n-1)/2] : (t[n/2-1] + t[n/2]) / 2), t[0] }')
  read -r P B T < <(awk '
    /^model:/ { for (i = 1; i <= NF; i++) if ($i == "parameters") P = $(i-1) }
    /^memory:/ { match($0, /B=[0-9]+/); B = substr($0, RSTART+2, RLENGTH-2)
                 match($0, /T=[0-9]+/); T = substr($0, RSTART+2, RLENGTH-2) }
    END { print P, B, T }' "$dir.log")
  if [ $torch_ok = 1 ]; then
    ./train_cpu "$@" -x 0 -v 0 -s 0 -o "$dir" > /dev/null
    wait_quiet
    $PYTHON dev/bench/bench_torch.py "$dir/model_00000000.bin" -b "$B" -t "$T" --threads "$threads" > "$dir.torch.log" 2>&1 ||
      { cat "$dir.torch.log" >&2; exit 1; }
    sed 's/^/  /' "$dir.torch.log"
    tms=$(awk '/^torch_ms_per_step/ {print $2}' "$dir.torch.log")
    rm -rf "$dir"
  fi
  results+=("$name $P $B $T $ms $fastest $tms")
}

bench_model d12 -e d12 -b 4 -t 64
bench_model default

peak=$(printf '%s\n' "${peaks[@]}" | sort -g | tail -1)
low=$(printf '%s\n' "${peaks[@]}" | sort -g | head -1)
echo
echo "== summary: FMA peak $peak GFLOP/s float32 ($threads threads; highest of ${#peaks[@]} measurements, lowest $low)"
awk -v lo="$low" -v hi="$peak" 'BEGIN { if (lo < 0.85 * hi) print "note: the FMA peak varied during the run: other processes were using the cores, the timings are disturbed" }'
for r in "${results[@]}"; do
  echo "$r" | awk -v peak="$peak" '{
    name = $1; P = $2; B = $3; T = $4; ms = $5; fast = $6; tms = $7
    flops = 6 * P * B * T; gf = flops / (ms * 1e-3) * 1e-9
    printf "%s: %.1f ms/step (median; fastest %.1f), %.0f tok/s, %.1f GFLOP/s = %.1f%% of FMA peak [6*P*B*T = %.1f GFLOP/step, P=%d, B=%d, T=%d]",
           name, ms, fast, B * T / (ms * 1e-3), gf, 100 * gf / peak, flops * 1e-9, P, B, T
    if (tms != "-") printf "; PyTorch %.1f ms/step = %.2fx the time of train_cpu", tms, tms / ms
    printf "\n" }'
done
[ $torch_ok = 1 ] && grep -h '^torch_blas' build/bench/d12.torch.log | sed 's/^torch_blas/PyTorch BLAS:/' || true

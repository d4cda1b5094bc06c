#!/usr/bin/env bash
# make bench-cpu: training speed of ./train_cpu in float32 and in mixed precision (-p bf16), next
# to this machine's peak in each precision and to PyTorch (float32), all measured in the same run,
# for GPT-2 124M (-e d12, B=4, T=64) and for train_cpu's default model and batch (no flags;
# ./train_cpu -h lists them).
#
# What is counted (doc/cpu_speed.md):
#   FLOPs per step = 6 * P * B * T with P = all parameters train_cpu reports (with wte's padding
#   rows, which the output layer does multiply). 2 FLOPs per multiply-add, forward 2PBT, backward
#   4PBT. Left out: attention's own products (QK^T and att.V, 12 * L * T * C per token for forward
#   + backward without the causal saving, 1% of the total for d12 at T=64) and everything that is
#   not a multiply-add in a matmul (layernorm, softmax, GELU, AdamW), so achieved GFLOP/s is model
#   FLOPs per second, as MFU counts it, not every instruction executed. The same count for both
#   precisions: bf16 changes what the products run on, not how many there are.
#   Peaks: dev/bench/fma_peak.c (gpt2/cpu_peak.h, what train_cpu's MFU counts against), all
#   OpenMP threads running independent vector chains: float32 FMAs (fp32) and AVX512_BF16's
#   vdpbf16ps (bf16; AMX's tdpbf16ps where the bf16 products run on AMX, gpt2/cpu_amx.h; a build
#   without AVX512_BF16 has neither, and its bf16 products run on FMAs: then the bf16 peak is the
#   FMA peak). Both are measured before and after every train_cpu run; the summary uses
#   the highest of each (what the cores can do), and says so when the measurements disagree, which
#   means other processes were using the cores. Each run's GFLOP/s is given as a % of the peak of
#   its own precision.
#   ms per step: the median of the steps train_cpu times after its first (the first touches
#   freshly allocated memory), and the fastest; validation and sampling off (-v 0 -s 0). fp32 and
#   bf16 run one after the other, so bf16's speed-up over fp32 is measured in the same conditions.
#   PyTorch: dev/bench/bench_torch.py on the checkpoint train_cpu starts from (same model, same
#   weights, same B and T), the same step (forward, backward, clip, AdamW) in float32, as many
#   threads.
# The machine may be shared: the script first waits (up to QUIET_WAIT seconds) until no other
# process is using more than 10% of a core, and names the ones that were when it gives up waiting.
#
#   bash dev/bench/bench_cpu.sh
#   knobs: STEPS=8 (train_cpu steps per model and precision), TORCH=1 (0 skips PyTorch), QUIET_WAIT=120
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

# The peaks, each measurement kept: fp32 (float32 FMA) and bf16 (vdpbf16ps, or AMX's tdpbf16ps;
# the FMA peak where this build has no AVX512_BF16, fma_peak's exit status 2).
peaks_fp32=()
peaks_bf16=()
bf16_instruction=vdpbf16ps   # what the bf16 peak is measured on: asked once here (peak_now runs
                             # in a subshell, where a variable set would not reach the summary)
if ! probe=$(./build/fma_peak bf16 1000 2>/dev/null); then
  bf16_instruction="float32 FMA: this build has no AVX512_BF16"
elif [[ "$probe" == *AMX* ]]; then
  bf16_instruction="AMX tdpbf16ps"
fi
peak_now() {  # PRECISION: prints its peak in GFLOP/s
  local out rc=0
  out=$(./build/fma_peak "$1" 2>&1) || rc=$?
  if [ "$1" = bf16 ] && [ $rc = 2 ]; then
    out=$(./build/fma_peak fp32) || rc=$?
  elif [ $rc != 0 ]; then
    echo "bench_cpu: ./build/fma_peak $1 failed: $out" >&2; exit 1
  fi
  echo "$out" | awk '{print $2}'
}
measure_peaks() {
  local f b
  f=$(peak_now fp32); b=$(peak_now bf16)
  peaks_fp32+=("$f"); peaks_bf16+=("$b")
  echo "  peaks now: fp32 $f GFLOP/s, bf16 $b GFLOP/s"
}

threads=$(./build/fma_peak 1000 | sed 's/.*threads \([0-9]*\).*/\1/')
cpuinfo() { grep -m1 "^$1" /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'; }
# the model name alone can hide the generation ("AMD EPYC"): family 25 is Zen 3/4, 26 is Zen 5
echo "machine: $(cpuinfo 'model name') (family $(cpuinfo 'cpu family'), model $(cpuinfo 'model')), $(nproc) cores, $threads OpenMP threads"
echo "FMA peak: $(./build/fma_peak)"
echo "bf16 peak: $(./build/fma_peak bf16 2>&1 || true)"

torch_ok=0
if [ "$TORCH" = 1 ] && $PYTHON -c 'import torch' 2>/dev/null; then torch_ok=1; fi

results=()   # "name precision P B T median_ms fastest_ms torch_ms" per model and precision
run_train_cpu() {  # name precision, train_cpu flags (model and batch): one train_cpu run, into results
  local name=$1 precision=$2; shift 2
  local log=build/bench/$name.$precision.log
  echo "-- $precision: ./train_cpu $* -p $precision -x $STEPS -v 0 -s 0"
  wait_quiet
  measure_peaks
  ./train_cpu "$@" -p "$precision" -x "$STEPS" -v 0 -s 0 > "$log" 2>&1 || { cat "$log" >&2; exit 1; }
  measure_peaks
  grep '^peak:\|^model:\|^step ' "$log" | sed 's/^/  /'
  # median and fastest ms of steps 2..STEPS; P from the model line, B and T from the memory line
  local ms fastest P B T
  read -r ms fastest < <(awk '/^step / && $2 !~ /^1\// { for (i = 1; i <= NF; i++) if ($i == "ms") print $(i-1) }' "$log" |
       sort -n | awk '{ t[n++] = $1 } END { print (n % 2 ? t[(n-1)/2] : (t[n/2-1] + t[n/2]) / 2), t[0] }')
  read -r P B T < <(awk '
    /^model:/ { for (i = 1; i <= NF; i++) if ($i == "parameters") P = $(i-1) }
    /^memory:/ { match($0, /B=[0-9]+/); B = substr($0, RSTART+2, RLENGTH-2)
                 match($0, /T=[0-9]+/); T = substr($0, RSTART+2, RLENGTH-2) }
    END { print P, B, T }' "$log")
  results+=("$name $precision $P $B $T $ms $fastest -")
}

bench_model() {  # name, train_cpu flags (model and batch)
  local name=$1; shift
  local dir=build/bench/$name tms=-
  echo
  echo "== $name: ./train_cpu $*, float32 and -p bf16"
  run_train_cpu "$name" fp32 "$@"
  run_train_cpu "$name" bf16 "$@"
  if [ $torch_ok = 1 ]; then
    local B T
    read -r B T < <(echo "${results[${#results[@]}-1]}" | awk '{print $4, $5}')
    rm -rf "$dir"
    ./train_cpu "$@" -x 0 -v 0 -s 0 -o "$dir" > /dev/null
    echo "-- PyTorch (float32): dev/bench/bench_torch.py on the same model, B=$B, T=$T"
    wait_quiet
    $PYTHON dev/bench/bench_torch.py "$dir/model_00000000.bin" -b "$B" -t "$T" --threads "$threads" > "$dir.torch.log" 2>&1 ||
      { cat "$dir.torch.log" >&2; exit 1; }
    sed 's/^/  /' "$dir.torch.log"
    tms=$(awk '/^torch_ms_per_step/ {print $2}' "$dir.torch.log")
    rm -rf "$dir"
    # PyTorch's time goes with the fp32 row
    results[${#results[@]}-2]="${results[${#results[@]}-2]% -} $tms"
  fi
}

bench_model d12 -e d12 -b 4 -t 64
bench_model default

highest() { printf '%s\n' "$@" | sort -g | tail -1; }
lowest() { printf '%s\n' "$@" | sort -g | head -1; }
peak_fp32=$(highest "${peaks_fp32[@]}"); low_fp32=$(lowest "${peaks_fp32[@]}")
peak_bf16=$(highest "${peaks_bf16[@]}"); low_bf16=$(lowest "${peaks_bf16[@]}")
echo
echo "== summary: peaks on $threads threads: fp32 $peak_fp32 GFLOP/s (float32 FMA; highest of ${#peaks_fp32[@]} measurements, lowest $low_fp32)," \
     "bf16 $peak_bf16 GFLOP/s ($bf16_instruction; highest of ${#peaks_bf16[@]}, lowest $low_bf16)"
awk -v lf="$low_fp32" -v hf="$peak_fp32" -v lb="$low_bf16" -v hb="$peak_bf16" 'BEGIN {
  if (lf < 0.85 * hf || lb < 0.85 * hb) print "note: the peaks varied during the run: other processes were using the cores, the timings are disturbed" }'
fp32_ms=
for r in "${results[@]}"; do
  read -r name precision _ <<< "$r"
  [ "$precision" = fp32 ] && fp32_ms=$(echo "$r" | awk '{print $6}')
  echo "$r" | awk -v peak="$([ "$precision" = bf16 ] && echo "$peak_bf16" || echo "$peak_fp32")" -v fp32_ms="$fp32_ms" '{
    name = $1; prec = $2; P = $3; B = $4; T = $5; ms = $6; fast = $7; tms = $8
    flops = 6 * P * B * T; gf = flops / (ms * 1e-3) * 1e-9
    printf "%s %s: %.1f ms/step (median; fastest %.1f), %.0f tok/s, %.1f GFLOP/s = %.1f%% of %s peak [6*P*B*T = %.1f GFLOP/step, P=%d, B=%d, T=%d]",
           name, prec, ms, fast, B * T / (ms * 1e-3), gf, 100 * gf / peak, prec, flops * 1e-9, P, B, T
    if (tms != "-") printf "; PyTorch %.1f ms/step = %.2fx the time of train_cpu", tms, tms / ms
    if (prec == "bf16") {
      x = fp32_ms / ms
      printf "; %.2fx the speed of fp32", x
      if (name == "d12") printf " (goal: >= 1.5x: %s)", (x >= 1.5 ? "met" : "not met")
    }
    printf "\n" }'
done
[ $torch_ok = 1 ] && grep -h '^torch_blas' build/bench/d12.torch.log | sed 's/^torch_blas/PyTorch BLAS:/' || true

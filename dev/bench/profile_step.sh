#!/usr/bin/env bash
# Where a training step's time goes: perf samples of ./train_cpu's steady-state steps, grouped by
# part of the step (the table of doc/cpu_speed.md). perf (Debian's linux-perf) samples both
# threads at ~1 kHz over a window of STEPS steps that starts after step 2 and ends before the
# program does (a first run of 3 steps times the start-up and a step), so that start-up, the first
# step's page faults and the exit are left out.
#
#   bash dev/bench/profile_step.sh [TRAIN_CPU_BINARY] [train_cpu flags]
#   default: ./train_cpu -e d12 -b 4 -t 64; knobs: STEPS=12 (steps sampled)
#
# The groups, by symbol (OpenMP outlines a parallel loop as NAME._omp_fn.N, counted as NAME):
#   matmul kernel     mm_kernel, bf_kernel (gpt2/cpu_math.h, gpt2/cpu_bf16.h)
#   matmul packing    mm_pack_*, bf_pack_*, gemm_block, gemm_threads, mm_transpose (blocking, packing)
#   AdamW             gpt2_update (which applies the clip's factor as it reads each gradient)
#   grad norm         sum_of_squares, gpt2_grad_norm
#   attention         attention_forward, attention_backward, axpy_sum
#   layernorm, GELU, softmax, cross-entropy, residual, encoder, bias: their functions
#   memset            memset (gradients zeroed each step)
#   threads waiting   libgomp (a thread that finished its share waits for the other)
#   kernel            the Linux kernel ([k]: page faults, scheduling)
#   other             the rest
set -euo pipefail
cd "$(dirname "$0")/../.."
BIN=${1:-./train_cpu}
shift || true
FLAGS=("$@")
[ ${#FLAGS[@]} -gt 0 ] || FLAGS=(-e d12 -b 4 -t 64)
STEPS=${STEPS:-12}
command -v perf > /dev/null || { echo "profile_step: perf is not installed (apt-get install linux-perf)" >&2; exit 1; }
[ -x "$BIN" ] || { echo "profile_step: $BIN not built" >&2; exit 1; }
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
# the delay: how long start-up and 2 steps take, and a step's time (the third's), measured by a
# run of 3 steps; the window: STEPS such steps
t0=$(date +%s%N)
"$BIN" "${FLAGS[@]}" -x 3 -v 0 -s 0 > "$dir/first" 2>&1 || { cat "$dir/first" >&2; exit 1; }
step_ms=$(awk '/^step +3\// { for (i = 1; i <= NF; i++) if ($i == "ms") print int($(i-1)) }' "$dir/first")
delay=$(( ($(date +%s%N) - t0) / 1000000 - step_ms ))
# the run to sample, long enough to outlast the window and stopped after it: sampling ends before
# the program frees its memory and exits (unmapping gigabytes, while the other threads wait),
# which is no part of a step
"$BIN" "${FLAGS[@]}" -x $((STEPS * 4 + 20)) -v 0 -s 0 > "$dir/out" 2>&1 &
pid=$!
sleep "$(awk -v d="$delay" 'BEGIN { print d / 1000 }')"
perf record -q -F 999 -p "$pid" -o "$dir/perf.data" -- sleep "$(awk -v s="$step_ms" -v n="$STEPS" 'BEGIN { print s * n / 1000 }')" 2> /dev/null
kill "$pid" 2> /dev/null; wait "$pid" 2> /dev/null || true
grep -m1 '^precision' "$dir/out" || true
awk '/^step / && $2 !~ /^[12]\// { for (i = 1; i <= NF; i++) if ($i == "ms") print $(i-1) }' "$dir/out" | sort -n |
  awk '{ t[n++] = $1 } END { printf "steps run: %d, median %.1f ms per step\n", n, (n % 2 ? t[(n-1)/2] : (t[n/2-1] + t[n/2]) / 2) }'
perf report -i "$dir/perf.data" --no-children --sort dso,symbol --stdio 2>/dev/null | awk '
  /^ +[0-9.]+%/ {
    pct = $1 + 0; dso = $2; sym = $4
    sub(/\._omp_fn\.[0-9]+$/, "", sym); sub(/\.part\.[0-9]+.*$/, "", sym); sub(/\.constprop\.[0-9]+.*$/, "", sym)
    g = "other"
    if ($0 ~ /\[k\]/) g = "kernel (page faults, scheduling)"
    else if (dso ~ /libgomp/) g = "threads waiting (libgomp)"
    else if (sym ~ /^(mm|bf)_kernel/) g = "matmul kernel"
    else if (sym ~ /^(mm|bf)_(pack|transpose)|^gemm_(block|threads)|^bf_gemm/) g = "matmul packing and blocking"
    else if (sym ~ /^gpt2_update/) g = "AdamW"
    else if (sym ~ /^sum_of_squares|^gpt2_grad_norm/) g = "gradient norm"
    else if (sym ~ /^attention_|^axpy_sum/) g = "attention"
    else if (sym ~ /^layernorm_/) g = "layernorm"
    else if (sym ~ /^gelu_/) g = "GELU"
    else if (sym ~ /^softmax_|^crossentropy_|expf|logf/) g = "softmax and cross-entropy"
    else if (sym ~ /^residual_|^encoder_|^matmul_bias|^matmul_dbias|^matmul_backward|^matmul_forward/) g = "residual, encoder, bias"
    else if (sym ~ /memset|zero_floats/) g = "memset (zeroing gradients)"
    share[g] += pct
  }
  END { for (g in share) printf "%6.1f%%  %s\n", share[g], g }' | sort -rn

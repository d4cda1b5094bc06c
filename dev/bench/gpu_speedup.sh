#!/usr/bin/env bash
# make bench-gpu: training speed of ./train_gpu (-p fp32 and -p bf16) against ./train_cpu, all
# measured in this run on this machine, for fresh models of depth d2 up to d12 (GPT-2 124M), same
# B and T, validation and sampling off. Prints a table and writes it to doc/results/gpu_speedup.md.
#
#   ms per step: the median of the steps each program times after its first (the first allocates
#   and warms up); train_gpu times a step from the batch to the end of AdamW, synchronised.
#   tok/s = B*T / (ms per step). MFU: train_gpu's own figure (6 x parameters + 12 L C T flops per
#   token against the device's peak for that precision: float32 without tensor cores for fp32,
#   bf16 tensor cores for bf16; train_gpu prints the peak it uses).
#   The CPU is slow at these sizes, so it runs fewer steps: CPU_STEPS=3 (2 timed), GPU_STEPS=20.
#
#   bash dev/bench/gpu_speedup.sh        knobs: DEPTHS="2 4 6 8 12" B=4 T=1024 CPU_STEPS=3 GPU_STEPS=20
set -euo pipefail
cd "$(dirname "$0")/../.."
DEPTHS=${DEPTHS:-2 4 6 8 12}
B=${B:-4}
T=${T:-1024}
CPU_STEPS=${CPU_STEPS:-3}
GPU_STEPS=${GPU_STEPS:-20}
[ -x ./train_cpu ] || { echo "gpu_speedup: ./train_cpu not built (make train_cpu)" >&2; exit 1; }
[ -x ./train_gpu ] || { echo "gpu_speedup: ./train_gpu not built (make train_gpu)" >&2; exit 1; }
mkdir -p build/bench doc/results

# median ms of the "| X ms |" progress lines after the first
median_ms() {
  grep -E '^step +[0-9]+/' "$1" | tail -n +2 | sed -E 's/.*\| ([0-9.]+) ms \|.*/\1/' | sort -g |
    awk '{ v[NR] = $1 } END { if (NR == 0) exit 1; print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}

device=$(./train_gpu -e d2 -b 1 -t 8 -x 0 -v 0 -s 0 2>&1 | head -n 1) ||
  { echo "gpu_speedup: ./train_gpu cannot run here: $device" >&2; exit 1; }
cpu=$(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //')
threads=${OMP_NUM_THREADS:-$(nproc)}

table="| model | parameters | CPU ms/step | CPU tok/s | GPU fp32 ms/step | fp32 tok/s | fp32 MFU | GPU bf16 ms/step | bf16 tok/s | bf16 MFU | speedup fp32 | speedup bf16 |
|---|---|---|---|---|---|---|---|---|---|---|---|"
last_mfu() { grep -E '^step +[0-9]+/' "$1" | tail -n 1 | sed -E 's/.*MFU ([0-9.]+)%.*/\1/'; }
for d in $DEPTHS; do
  ./train_cpu -e d$d -b $B -t $T -x $CPU_STEPS -v 0 -s 0 > build/bench/cpu_d$d.log 2>&1
  ./train_gpu -e d$d -b $B -t $T -x $GPU_STEPS -v 0 -s 0 -p fp32 > build/bench/gpu_fp32_d$d.log 2>&1
  ./train_gpu -e d$d -b $B -t $T -x $GPU_STEPS -v 0 -s 0 -p bf16 > build/bench/gpu_bf16_d$d.log 2>&1
  params=$(grep -m1 '^model:' build/bench/gpu_fp32_d$d.log | sed -E 's/.*, ([0-9]+) parameters.*/\1/')
  cpu_ms=$(median_ms build/bench/cpu_d$d.log)
  f_ms=$(median_ms build/bench/gpu_fp32_d$d.log)
  b_ms=$(median_ms build/bench/gpu_bf16_d$d.log)
  f_mfu=$(last_mfu build/bench/gpu_fp32_d$d.log)
  b_mfu=$(last_mfu build/bench/gpu_bf16_d$d.log)
  row=$(awk -v d=$d -v p=$params -v c=$cpu_ms -v f=$f_ms -v g=$b_ms -v fm=$f_mfu -v gm=$b_mfu -v bt=$((B * T)) 'BEGIN {
    printf "| d%d | %.1fM | %.1f | %.0f | %.2f | %.0f | %.1f%% | %.2f | %.0f | %.1f%% | %.0fx | %.0fx |", d, p / 1e6, c,
      bt / c * 1e3, f, bt / f * 1e3, fm, g, bt / g * 1e3, gm, c / f, c / g }')
  echo "$row"
  table="$table
$row"
done

out=doc/results/gpu_speedup.md
{
  echo "# train_gpu against train_cpu"
  echo
  echo "Measured by \`make bench-gpu\` (dev/bench/gpu_speedup.sh) on $(date -u +%Y-%m-%d), commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown)."
  echo "Fresh models of depth dN (N layers, C = 64N; d12 = GPT-2 124M), B=$B, T=$T, validation and sampling off."
  echo "ms per step: median over the steps after the first ($((CPU_STEPS - 1)) timed on the CPU, $((GPU_STEPS - 1)) on the GPU)."
  echo
  echo "- GPU: $device"
  echo "- CPU: $cpu, $threads OpenMP threads"
  echo
  echo "$table"
} > $out
echo "wrote $out"

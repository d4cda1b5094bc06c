#!/usr/bin/env bash
# make bench-dp: what data parallelism gains and what its communication costs on this machine
# (doc/parallel.md). ./train_cpu trains its default model (-e d4, T=64) on the same batch of
# B_TOTAL x 64 tokens per step, split three ways, all measured in this run:
#   1 process  x 1 thread,  B = B_TOTAL          the baseline: one core
#   2 processes x 1 thread, B = B_TOTAL/2        data parallel (mpirun): two cores, MPI all-reduce
#   1 process  x 2 threads, B = B_TOTAL          the same two cores, shared by OpenMP instead
# For each: tok/s and ms per step (train_cpu's average, first step left out), the speedup over
# the baseline, and for the 2-process run the time per step spent in the all-reduce of the
# gradients (train_cpu's progress line: from the end of a rank's backward pass until it holds the
# sum, so waiting for the slower rank counts too), its share of the step, and the bandwidth that
# implies: an all-reduce of G bytes over N ranks moves 2 (N-1)/N G bytes per rank (ring
# all-reduce; NCCL's "bus bandwidth").
#
#   bash dev/bench/bench_dp.sh            knobs: STEPS=20, B_TOTAL=8, MODEL=d4
set -euo pipefail
cd "$(dirname "$0")/../.."
. test/lib.sh
STEPS=${STEPS:-20}
B_TOTAL=${B_TOTAL:-8}
MODEL=${MODEL:-d4}
[ -x ./train_cpu ] || { echo "bench_dp: ./train_cpu not built (make train_cpu)" >&2; exit 1; }
command -v mpirun >/dev/null || { echo "bench_dp: no mpirun (apt-get install openmpi-bin libopenmpi-dev, then make train_cpu)" >&2; exit 1; }
out=build/bench
mkdir -p $out
args=(-e "$MODEL" -t 64 -x "$STEPS" -v 0 -s 0)

cpu=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')
echo "machine: $cpu, $(nproc) cores; Open MPI $(mpirun --version | head -n1 | awk '{print $NF}')"
run() {  # NAME PROCESSES THREADS B
  local name=$1 np=$2 threads=$3 b=$4
  if [ "$np" = 1 ]; then OMP_NUM_THREADS=$threads ./train_cpu "${args[@]}" -b "$b" >"$out/dp_$name.txt" 2>&1
  else MPI_THREADS=$threads mpi_run "$np" ./train_cpu "${args[@]}" -b "$b" >"$out/dp_$name.txt" 2>&1
  fi || { echo "bench_dp: $name failed:" >&2; tail -5 "$out/dp_$name.txt" >&2; exit 1; }
}
run one 1 1 "$B_TOTAL"
run ranks 2 1 $((B_TOTAL / 2))
run threads 1 2 "$B_TOTAL"
params=$(grep -m1 '^model:' $out/dp_one.txt | sed -E 's/.*, ([0-9]+) parameters.*/\1/')
grep -m1 '^model:' $out/dp_one.txt
echo "batch: $B_TOTAL x 64 = $((B_TOTAL * 64)) tokens per step; gradients $params floats = $(awk -v p="$params" 'BEGIN{printf "%.1f", p*4/1e6}') MB per all-reduce; $STEPS steps"
echo
printf "%-34s %9s %9s %8s %22s\n" "split of the batch" "tok/s" "ms/step" "speedup" "all-reduce per step"
base=$(awk '/^average/ {print $2}' $out/dp_one.txt)
for name in one ranks threads; do
  f=$out/dp_$name.txt
  ms=$(awk '/^average/ {print $2}' "$f")
  toks=$(awk '/^average/ {print $6}' "$f")
  case $name in
    one) what="1 process x 1 thread, B=$B_TOTAL" ;;
    ranks) what="2 processes x 1 thread, B=$((B_TOTAL / 2)) each" ;;
    threads) what="1 process x 2 threads, B=$B_TOTAL" ;;
  esac
  reduce="-"
  if [ $name = ranks ]; then
    # the mean over the steps after the first, as train_cpu's average
    reduce=$(awk -v p="$params" -v ms="$ms" '/^step .*all-reduce/ { n++; if (n > 1) { s += $(NF - 1); k++ } }
      END { m = s / k; printf "%.1f ms (%.0f%%), %.2f GB/s", m, 100 * m / ms, 2 * 0.5 * p * 4 / (m / 1e3) / 1e9 }' "$f")
  fi
  printf "%-34s %9s %9s %7.2fx %22s\n" "$what" "$toks" "$ms" "$(awk -v a="$base" -v b="$ms" 'BEGIN{print a / b}')" "$reduce"
done
echo
echo "raw outputs: $out/dp_one.txt, $out/dp_ranks.txt, $out/dp_threads.txt"

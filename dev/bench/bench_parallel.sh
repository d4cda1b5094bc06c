#!/usr/bin/env bash
# make bench-parallel: what each way of splitting training over processes costs on this machine
# (doc/parallel.md). ./train_cpu trains its default model (-e d4) on Tiny Shakespeare, the same
# B x T tokens per step in every row, one OpenMP thread per process, so that the rows compare
# processes:
#   1 process         -b B                                  the baseline: one core
#   dp 2              mpirun -np 2, -b B/2                  data parallel: the gradients all-reduced
#   tp 2              mpirun -np 2 -tp 2, -b B              tensor parallel: each block's heads and
#                                                           MLP width halved, activations summed
#   pp 2              mpirun -np 2 -pp 2, -b B/2 -d B x T   pipeline: 2 stages of 2 layers, 2
#                                                           micro-steps (1F1B), wte's gradient summed
#                                                           over the two ends
#   dp 2 + ZeRO-1     mpirun -np 2 -z 1, -b B/2             AdamW's moments split over the replicas
#   1 process x 2 threads, -b B                             reference: the same 2 cores by OpenMP
# For each: ms per step (the median of the steps after the first), tok/s (tokens per step / that
# median), the speedup over the baseline, memory per process (the most any rank holds: parameters,
# gradients, AdamW moments and activations with their gradients, from train_cpu's rank lines, or its
# memory line for one process), rank 0's communication per step (train_cpu's "comm":
# collectives and pipeline transfers, waiting for the other rank included; the median) and its share
# of the step, the MB each rank sends per step (the most of any rank), and the loss after the last
# step (the same batches and the same model: the rows should agree to rounding).
#
# Writes the table and every run's whole output to doc/results/bench_parallel.txt (the runs also
# to build/bench/par_NAME.txt) and prints the table.
#
#   bash dev/bench/bench_parallel.sh        knobs: STEPS=30, B=8 (even), T=64
set -euo pipefail
cd "$(dirname "$0")/../.."
. test/lib.sh
STEPS=${STEPS:-30}
B=${B:-8}
T=${T:-64}
RESULT=doc/results/bench_parallel.txt
[ -x ./train_cpu ] || { echo "bench_parallel: ./train_cpu not built (make train_cpu)" >&2; exit 1; }
command -v mpirun >/dev/null || { echo "bench_parallel: no mpirun (apt-get install openmpi-bin libopenmpi-dev, then make train_cpu)" >&2; exit 1; }
[ $((B % 2)) = 0 ] && [ "$B" -gt 0 ] || { echo "bench_parallel: B=$B: give an even B (the 2-process rows take B/2 each)" >&2; exit 1; }
[ "$STEPS" -ge 3 ] || { echo "bench_parallel: STEPS=$STEPS: give at least 3 (the first step is left out of the median)" >&2; exit 1; }
out=build/bench
mkdir -p $out
args=(-e d4 -t "$T" -x "$STEPS" -v 0 -s 0)
half=$((B / 2))
tokens=$((B * T))

# name | processes | threads | train_cpu's options beyond $args | the row's label
rows=(
  "one|1|1|-b $B|1 process"
  "dp|2|1|-b $half|dp 2"
  "tp|2|1|-tp 2 -b $B|tp 2"
  "pp|2|1|-pp 2 -b $half -d $tokens|pp 2"
  "zero|2|1|-z 1 -b $half|dp 2 + ZeRO-1"
  "threads|1|2|-b $B|1 process x 2 threads"
)

cpu=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')
load() { cut -d' ' -f1-3 /proc/loadavg; }
{
  echo "make bench-parallel (dev/bench/bench_parallel.sh): STEPS=$STEPS B=$B T=$T"
  echo "machine: $cpu, $(nproc) cores; Open MPI $(mpirun --version | head -n1 | awk '{print $NF}')"
  echo "load average before the runs: $(load)"
} >$out/par_head.txt

for row in "${rows[@]}"; do
  IFS='|' read -r name np threads opts label <<<"$row"
  # shellcheck disable=SC2086  # opts: several options
  if [ "$np" = 1 ]; then
    OMP_NUM_THREADS=$threads ./train_cpu "${args[@]}" $opts >"$out/par_$name.txt" 2>&1
  else
    MPI_THREADS=$threads mpi_run "$np" ./train_cpu "${args[@]}" $opts >"$out/par_$name.txt" 2>&1
  fi || { echo "bench_parallel: $name failed:" >&2; tail -5 "$out/par_$name.txt" >&2; exit 1; }
  grep -q '^average' "$out/par_$name.txt" || { echo "bench_parallel: $name printed no average:" >&2; tail -5 "$out/par_$name.txt" >&2; exit 1; }
  got=$(sed -n 's/^batch: \([0-9]*\) tokens per step.*/\1/p' "$out/par_$name.txt")
  [ "$got" = "$tokens" ] || { echo "bench_parallel: $name trained $got tokens per step, not $tokens" >&2; exit 1; }
done
echo "load average after the runs: $(load)" >>$out/par_head.txt

# One run's figures, from its output: "MS|COMM|STATE|ACT|SENT|PARTS|LOSS", COMM and SENT "-" for
# one process, PARTS the nonzero groups of the rank that sends the most ("(tp 8.39)"), or "".
figures() {  # FILE PROCESSES
  awk -v np="$2" '
    function median(a, n,    i, j, x) {
      for (i = 2; i <= n; i++) { x = a[i]; for (j = i - 1; j > 0 && a[j] > x; j--) a[j + 1] = a[j]; a[j + 1] = x }
      return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
    }
    function after(line, key,    s) {  # the number after "key " in line
      s = substr(line, index(line, key " ") + length(key) + 1)
      return s + 0
    }
    /^step / {
      steps++
      if (steps == 1) next
      n++
      split($0, cell, " \\| ")
      ms[n] = cell[5] + 0
      loss = after($0, "loss")
      if (index($0, ", comm ")) { comm[n] = after($0, ", comm"); ncomm++ }
    }
    /^memory: / { state = after($0, "AdamW m, v"); act = after($0, "their gradients") }
    /^rank [0-9]+ \(/ {
      s = after($0, "params") + after($0, "grads") + after($0, "AdamW")
      a = after($0, "activations")
      if (s + a > state + act) { state = s; act = a }
      t = after($0, "sent")
      if (t >= sent) {
        sent = t; parts = ""
        split("tp pp dp wte", g, " ")
        for (i = 1; i <= 4; i++) {
          v = after(substr($0, index($0, "MB/step")), g[i])
          if (v > 0) parts = parts (parts == "" ? "" : ", ") g[i] " " sprintf("%.2f", v)
        }
      }
    }
    END {
      if (np > 1 && (sent == "" || ncomm < n)) exit 1  # every process prints its line, each step its comm
      printf "%.1f|%s|%.1f|%.1f|%s|%s|%.6f\n", median(ms, n), (np > 1 ? sprintf("%.1f", median(comm, n)) : "-"),
        state, act, (np > 1 ? sprintf("%.2f", sent) : "-"), (parts == "" ? "" : "(" parts ")"), loss
    }' "$1"
}

{
  cat $out/par_head.txt
  grep -m1 '^model:' $out/par_one.txt
  echo "batch: $B x $T = $tokens tokens per step in every row; $STEPS steps, the median of steps 2-$STEPS"
  grep -m1 '^pipeline:' $out/par_pp.txt | sed 's/^/pp 2: /'
  echo
  printf "%-22s %5s %8s %6s %8s %26s %20s %-34s %10s\n" "run" "procs" "ms/step" "tok/s" "speedup" \
    "MB/rank (state + act)" "comm ms/step (share)" "MB sent/step/rank" "loss@$STEPS"
  base=""
  for row in "${rows[@]}"; do
    IFS='|' read -r name np threads opts label <<<"$row"
    fig=$(figures "$out/par_$name.txt" "$np") ||
      { echo "bench_parallel: $name: no rank lines or no comm time in its output" >&2; exit 1; }
    IFS='|' read -r ms comm state act sent sent_parts loss <<<"$fig"
    [ -n "$base" ] || base=$ms
    share=""
    [ "$comm" = - ] || share=$(awk -v c="$comm" -v m="$ms" 'BEGIN { printf " (%2.0f%%)", 100 * c / m }')
    printf "%-22s %5s %8.1f %6.0f %7.2fx %26s %20s %-34s %10s\n" "$label" "$np" "$ms" \
      "$(awk -v t="$tokens" -v m="$ms" 'BEGIN { print t / m * 1e3 }')" "$(awk -v a="$base" -v b="$ms" 'BEGIN { print a / b }')" \
      "$(awk -v s="$state" -v a="$act" 'BEGIN { printf "%.1f (%.1f + %.1f)", s + a, s, a }')" "$comm$share" \
      "$sent${sent_parts:+ $sent_parts}" "$loss"
  done
  echo
  echo "state: parameters + gradients + AdamW m, v; act: activations + their gradients; of the rank that holds the most."
  echo "comm: rank 0's seconds in collectives and pipeline transfers per step, waiting for the other rank included."
  echo "sent: as train_cpu counts it, by the ring algorithms: an all-reduce sends 2 (N-1)/N of the array, a reduce-scatter"
  echo "  or an all-gather (N-1)/N; pipeline transfers whole."
  echo
  for row in "${rows[@]}"; do
    IFS='|' read -r name np threads opts label <<<"$row"
    if [ "$np" = 1 ]; then echo "== $label: OMP_NUM_THREADS=$threads ./train_cpu ${args[*]} $opts"
    else echo "== $label: OMP_NUM_THREADS=$threads mpirun -np $np ./train_cpu ${args[*]} $opts"; fi
    cat "$out/par_$name.txt"
    echo
  done
} >"$RESULT"
sed -n '/^== /q; p' "$RESULT"
echo "wrote $RESULT (the table and every run's output)"

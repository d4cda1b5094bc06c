#!/usr/bin/env bash
# dev/kernels/run.sh emu|gpu STEP...: runs the kernel ladder's steps, built by make (make
# kernels-emu, make kernels), and prints one line per step, PASS or FAIL (or SKIP: a step whose
# instructions this GPU lacks, as Hopper's wgmma on another GPU); exit status 1 if any fails.
#
#   emu   each step on the CPU emulator of CUDA, at small shapes, twice: as built with
#         AddressSanitizer and UBSan (build/emu/kernels/STEP), in the emulator's plain order of
#         warps, and as built for the race detector (build/emu/kernels/STEP_race), which stops at a
#         shared-memory access that no barrier orders (or out of its arrays), in a random order of
#         warps with cp.async copies landing at random points between their issue and their wait
#         (CUDA_EMU_SCHEDULE=random:7 CUDA_EMU_ASYNC=random:7). A step passes when both runs pass
#         (each checks the step's results against its CPU layer). The steps run as many at a time
#         as there are cores.
#   gpu   each step on this machine's GPU (build/kernels/STEP): checked at small shapes and at
#         GPT-2 124M's, then timed; the table goes to build/kernels/ladder.md (and the screen), the
#         bar chart of the rates, as % of each step's limit, to build/kernels/ladder.png where
#         Python has matplotlib.
# KERNELS_EMU_DIR: where the emulator's builds are (default build/emu/kernels; test/test_kernels.sh
# runs broken copies from elsewhere).
set -u
cd "$(dirname "$0")/../.."
usage="usage: dev/kernels/run.sh emu|gpu STEP..."
[ $# -ge 2 ] || { echo "$usage" >&2; exit 2; }
mode=$1; shift
case $mode in emu|gpu) ;; *) echo "$usage" >&2; exit 2 ;; esac

passed=0; failed=0; skipped=0
logs=build/kernels/logs
mkdir -p "$logs"

# run_once LOG PROGRAM [ENV...]: runs PROGRAM with ENV into LOG; prints why it failed, if it did
run_once() {
  local log=$1 prog=$2; shift 2
  # (bash's own line for a program killed by a signal is left out: the exit status says it)
  { (export "$@" ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=0}; exec "$prog") >"$log" 2>&1; } 2>/dev/null
  local rc=$? line last=""
  while IFS= read -r line; do last=$line; done <"$log"
  if [ $rc -eq 0 ] && [[ "$last" == PASS* || "$last" == SKIP* ]]; then return 0; fi
  # the first mismatch or the error, else the end of the output
  local why; why=$(grep -m 1 -E "^  FAIL|error|ERROR|race" "$log" || tail -n 1 "$log")
  echo "exit $rc: $(sed 's/^ *//' <<<"$why")"
  return 1
}

if [ "$mode" = emu ]; then
  # Two runs a step (see above): all of them independent programs, as many at a time as there are
  # cores, each on one (one OpenMP thread, and so one emulator worker: the steps' launches are
  # small, and a second thread in a run cost more than it gained), a step's line printed, in the
  # steps' order, once its runs are done.
  cores=$(nproc 2>/dev/null || echo 1) running=0
  export OMP_NUM_THREADS=1
  dir=${KERNELS_EMU_DIR:-build/emu/kernels}
  race_env="CUDA_EMU_SCHEDULE=random:7 CUDA_EMU_ASYNC=random:7"
  # start COMMAND...: in the background, once fewer than $cores runs are under way
  start() {
    if [ "$running" -ge "$cores" ]; then wait -n; running=$((running - 1)); fi
    "$@" &
    running=$((running + 1))
  }
  for step in "$@"; do
    [ -x "$dir/$step" ] && [ -x "$dir/${step}_race" ] || continue  # (said below)
    start run_once "$logs/$step.emu.log" "$dir/$step" >"$logs/$step.emu.rc"
    start run_once "$logs/$step.emu-race.log" "$dir/${step}_race" $race_env >"$logs/$step.emu-race.rc"
  done
  wait
  for step in "$@"; do
    if [ ! -x "$dir/$step" ] || [ ! -x "$dir/${step}_race" ]; then
      why="not built (make kernels-emu builds it)"
    elif [ -s "$logs/$step.emu.rc" ]; then
      why="AddressSanitizer, plain order, $(cat "$logs/$step.emu.rc")"
    elif [ -s "$logs/$step.emu-race.rc" ]; then
      why="race detector, $race_env, $(cat "$logs/$step.emu-race.rc")"
    else
      why=""
    fi
    if [ -z "$why" ]; then
      # the step's own last line, less the timing it does not have here
      while IFS= read -r line; do last=$line; done <"$logs/$step.emu.log"
      if [[ "$last" == SKIP* ]]; then skipped=$((skipped + 1)); else passed=$((passed + 1)); fi
      last=${last%not timed (the emulator checks correctness only)}
      echo "${last%"${last##*[! ]}"}"  # (and the spaces before it)
    else
      failed=$((failed + 1))
      echo "FAIL $step: $why (log: $logs/)"
    fi
  done
  echo "kernels-emu: $passed passed, $failed failed$([ $skipped -eq 0 ] || echo ", $skipped skipped")"
  [ $failed -eq 0 ]
  exit
fi

tsv=build/kernels/ladder.tsv
: >"$tsv"
for step in "$@"; do
  bin=build/kernels/$step
  if why=$(run_once "$logs/$step.gpu.log" "$bin" LADDER_TSV="$tsv"); then
    last=$(tail -n 1 "$logs/$step.gpu.log")
    if [[ "$last" == SKIP* ]]; then skipped=$((skipped + 1)); else passed=$((passed + 1)); fi
    echo "$last"
  else
    failed=$((failed + 1))
    echo "FAIL $step: $why (log: $logs/$step.gpu.log)"
  fi
done
PYTHON=${PYTHON:-python3}
device=$(grep -h -m 1 "^device:" "$logs"/*.gpu.log 2>/dev/null | head -n 1 | sed 's/^device: //')
"$PYTHON" dev/kernels/table.py "$tsv" "$device" build/kernels/ladder.md build/kernels/ladder.png
echo "kernels: $passed passed, $failed failed$([ $skipped -eq 0 ] || echo ", $skipped skipped")"
[ $failed -eq 0 ]

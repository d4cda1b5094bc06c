#!/usr/bin/env bash
# dev/kernels/run.sh emu|gpu STEP...: runs the kernel ladder's steps, built by make (make
# kernels-emu, make kernels), and prints one line per step, PASS or FAIL; exit status 1 if any fails.
#
#   emu   each step on the CPU emulator of CUDA, at small shapes, three times: as built with
#         AddressSanitizer and UBSan (build/emu/kernels/STEP) in the emulator's plain order of
#         warps, the same in a random order with cp.async copies landing at random points between
#         their issue and their wait (CUDA_EMU_SCHEDULE=random:7 CUDA_EMU_ASYNC=random:7), and as built for the race
#         detector (build/emu/kernels/STEP_race), which stops at a shared-memory access that no
#         barrier orders. A step passes when all three pass.
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

passed=0; failed=0
logs=build/kernels/logs
mkdir -p "$logs"

# run_once LOG PROGRAM [ENV...]: runs PROGRAM with ENV into LOG; prints why it failed, if it did
run_once() {
  local log=$1 prog=$2; shift 2
  env "$@" ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=0} "$prog" >"$log" 2>&1
  local rc=$?
  local last; last=$(tail -n 1 "$log")
  if [ $rc -eq 0 ] && [[ "$last" == PASS* ]]; then return 0; fi
  # the first mismatch or the error, else the end of the output
  local why; why=$(grep -m 1 -E "^  FAIL|error|ERROR|race" "$log" || tail -n 1 "$log")
  echo "exit $rc: $(sed 's/^ *//' <<<"$why")"
  return 1
}

if [ "$mode" = emu ]; then
  for step in "$@"; do
    bin=${KERNELS_EMU_DIR:-build/emu/kernels}/$step
    why=""
    if [ ! -x "$bin" ] || [ ! -x "${bin}_race" ]; then
      why="not built (make kernels-emu builds it)"
    else
      why=$(run_once "$logs/$step.emu.log" "$bin") ||
        why="plain order, $why"
      [ -z "$why" ] && { why=$(run_once "$logs/$step.emu-random.log" "$bin" CUDA_EMU_SCHEDULE=random:7 \
        CUDA_EMU_ASYNC=random:7) || why="CUDA_EMU_SCHEDULE=random:7 CUDA_EMU_ASYNC=random:7, $why"; }
      [ -z "$why" ] && { why=$(run_once "$logs/$step.emu-race.log" "${bin}_race") ||
        why="race detector, $why"; }
    fi
    if [ -z "$why" ]; then
      passed=$((passed + 1))
      # the step's own last line, less the timing it does not have here
      tail -n 1 "$logs/$step.emu.log" | sed 's/ *not timed (the emulator checks correctness only)$//'
    else
      failed=$((failed + 1))
      echo "FAIL $step: $why (log: $logs/)"
    fi
  done
  echo "kernels-emu: $passed passed, $failed failed"
  [ $failed -eq 0 ]
  exit
fi

tsv=build/kernels/ladder.tsv
: >"$tsv"
for step in "$@"; do
  bin=build/kernels/$step
  if why=$(run_once "$logs/$step.gpu.log" "$bin" LADDER_TSV="$tsv"); then
    passed=$((passed + 1))
    tail -n 1 "$logs/$step.gpu.log"
  else
    failed=$((failed + 1))
    echo "FAIL $step: $why (log: $logs/$step.gpu.log)"
  fi
done
PYTHON=${PYTHON:-python3}
device=$(grep -h -m 1 "^device:" "$logs"/*.gpu.log 2>/dev/null | head -n 1 | sed 's/^device: //')
"$PYTHON" dev/kernels/table.py "$tsv" "$device" build/kernels/ladder.md build/kernels/ladder.png
echo "kernels: $passed passed, $failed failed"
[ $failed -eq 0 ]

#!/usr/bin/env bash
# The kernel ladder (dev/kernels/) on the CPU emulator of CUDA, as `make kernels-emu` runs it: every
# step must pass (each against its CPU layer, under AddressSanitizer in the plain order of the
# warps and under the race detector in a random one), and there must be at least 19 of them across
# the three families (matmul, attention, layernorm). Then the ladder must catch broken steps:
# copies of real steps with one planted fault each, built and run the same way, must each come out
# FAIL with a non-zero exit:
#   a sum that stops one k short (a wrong value),
#   a kernel that no longer stops at the edge of the output (AddressSanitizer: out of bounds),
#   a shared-memory step missing the barrier before its tile is overwritten (wrong values, and
#   the race detector's build alone must name the race).
set -u
. "$(dirname "$0")/lib.sh"
log=build/kernels-emu.log
make -s -j"$JOBS" kernels-emu >"$log" 2>&1
rc=$?
cat "$log"
[ $rc -eq 0 ] || { echo "FAIL: make kernels-emu exited $rc"; exit 1; }
for family in matmul attention layernorm; do
  n=$(grep -cE "^PASS [0-9]+ $family " "$log")
  [ "$n" -ge 3 ] || { echo "FAIL: $n $family steps passed, expected at least 3"; exit 1; }
done
steps=$(grep -cE "^PASS [0-9]+ " "$log")
[ "$steps" -ge 19 ] || { echo "FAIL: $steps steps passed, expected at least 19"; exit 1; }
echo "ok: make kernels-emu: $steps steps, every one PASS"
# and AddressSanitizer never lost track of the stacks (its warning that false reports may follow,
# printed where it is told of a switch between fibers that it cannot follow)
if grep -l "ASan is ignoring" build/kernels/logs/[0-9][0-9]_*.log; then
  echo "FAIL: AddressSanitizer's warning of a stack it does not know, in the logs above"; exit 1
fi

# plant STEP NAME SED: a copy of dev/kernels/STEP.cu changed by SED (which must change it) in
# build/kernels_break/NAME, built as the Makefile builds the ladder; run.sh must say FAIL, exit 1
plant() {
  local step=$1 name=$2 edit=$3 dir=build/kernels_break
  mkdir -p $dir/emu
  sed -E "s|#include \"([a-z_]+\.cuh)\"|#include \"../../dev/kernels/\1\"|; $edit" dev/kernels/$step.cu >$dir/$name.cu
  if cmp -s <(sed -E "s|#include \"([a-z_]+\.cuh)\"|#include \"../../dev/kernels/\1\"|" dev/kernels/$step.cu) $dir/$name.cu; then
    echo "FAIL: the planted fault '$edit' does not change dev/kernels/$step.cu: update this test"; exit 1
  fi
  $PY dev/emu/cuda_emu.py $dir/$name.cu $dir/emu/$name.cpp || exit 1
  make -s -j"$JOBS" $dir/emu/$name $dir/emu/${name}_race -f - <<MK || { echo "FAIL: the broken copy $name does not build"; exit 1; }
include Makefile
$dir/emu/$name: $dir/emu/$name.cpp
	\$(CXX) -Og \$(EMU_CXXFLAGS) \$< -o \$@
$dir/emu/${name}_race: $dir/emu/$name.cpp
	\$(call emu_race_build)
MK
  out=$(KERNELS_EMU_DIR=$dir/emu bash dev/kernels/run.sh emu $name 2>&1)
  rc=$?
  echo "$out" | sed 's/^/    /'
  if [ $rc -eq 0 ] || ! grep -q "^FAIL $name" <<<"$out"; then
    echo "FAIL: dev/kernels/run.sh passed $step with a planted fault ($edit)"; exit 1
  fi
  echo "ok: $step with a planted fault ($edit) fails"
}
rm -rf build/kernels_break
plant 01_matmul_naive short_k 's/k < K; k\+\+/k < K - 1; k++/'
plant 01_matmul_naive no_edge 's/if \(m >= M \|\| n >= N\) return;//'
smem=$(grep -l "__syncthreads" dev/kernels/0[2-9]_matmul_*.cu | head -n 1)
[ -n "$smem" ] || { echo "FAIL: no matmul step with shared memory and barriers"; exit 1; }
# the last barrier of the kernel: the one before the next tile overwrites the one being read
last=$(grep -n "__syncthreads();" "$smem" | tail -n 1 | cut -d: -f1)
plant "$(basename "$smem" .cu)" no_barrier "${last}s/__syncthreads\(\);//"
# and the race detector alone names it, whatever the values happen to be
out=$(ASAN_OPTIONS=detect_leaks=0 build/kernels_break/emu/no_barrier_race 2>&1)
if [ $? -eq 0 ] || ! grep -q "race on shared memory" <<<"$out"; then
  echo "FAIL: the race detector's build of $(basename "$smem") without its last barrier did not report a race"; exit 1
fi
grep -A 3 "race on shared memory" <<<"$out" | sed 's/^/    /'
echo "ok: the race detector names the missing barrier"

# What make kernels does with the steps' rows on a GPU: each step appends its row to LADDER_TSV,
# and dev/kernels/table.py makes the table (and the chart, where matplotlib is). Here a step's row
# from the emulator (not timed) and a timed row as a GPU writes it (the format of ladder_end)
tsv=build/kernels_break/ladder.tsv
rm -f $tsv
LADDER_TSV=$tsv ASAN_OPTIONS=detect_leaks=0 build/emu/kernels/17_layernorm_naive >/dev/null 2>&1 ||
  { echo "FAIL: build/emu/kernels/17_layernorm_naive with LADDER_TSV failed"; exit 1; }
printf '03\tmatmul\tshared-memory tiles\tPASS\t2.5000\t7.731\tTFLOP/s\t11.56\tfloat32 peak\n' >>$tsv
$PY dev/kernels/table.py $tsv "a test GPU" build/kernels_break/ladder.md build/kernels_break/ladder.png ||
  { echo "FAIL: dev/kernels/table.py could not read the rows"; exit 1; }
grep -q "^| 17 | layernorm | naive: one thread per row | PASS | - | - | - | memory bandwidth |$" build/kernels_break/ladder.md &&
  grep -q "^| 03 | matmul | shared-memory tiles | PASS | 2.500 | 7.73 TFLOP/s | 11.6% | float32 peak |$" build/kernels_break/ladder.md ||
  { echo "FAIL: build/kernels_break/ladder.md lacks the rows it was given"; exit 1; }
echo "ok: a step's row in LADDER_TSV and a timed row make dev/kernels/table.py's table, sorted by step"

#!/usr/bin/env bash
# The GPU kernels without a GPU: dev/gpu/gpu_check.cu built for the CPU emulator (dev/emu/cuda_emu.h),
# which runs every kernel's threads on the CPU, under AddressSanitizer and UBSan. It checks
# indexing, bounds, barriers and float4 alignment against the CPU reference at small sizes; it
# says nothing about speed or about what only a real GPU does.
#   1. dev/gpu/instruction_check.cu: the emulated bf16 conversion, mma.sync, ldmatrix and cp.async
#      against their definitions, which the bf16 kernels' checks rely on.
#   2. every kernel check in the default schedule (and the roofline's measuring mode on a tiny model,
#      which runs each launcher of a training step), then again with the warps interleaved otherwise
#      (CUDA_EMU_SCHEDULE: reverse, ahead, random), the cp.async copies landing at other times
#      (CUDA_EMU_ASYNC: at issue, at random) and the blocks shared out to 1 and to 3 workers
#      (CUDA_EMU_WORKERS): a kernel whose result depends on the order of its warps between two
#      barriers, or on which blocks run together, fails in some of them.
#   3. the race detector (build/emu/*_race): first against dev/emu/race_check.cu's kernels, one
#      without a race (it must pass in every mode) and one per kind of race (each must be reported
#      with the kernel and the two lines marked in the source), an index past a __shared__
#      array's end (reported by both builds) and a read of shared memory the block never wrote;
#      then Hopper's asynchronous copies and products: two kernels without a fault, one per fault
#      of TMA, mbarrier and wgmma (each reported with its two lines), and a descriptor whose
#      swizzle is not the tensor map's (a wrong result); then every kernel check under it.
#   4. the emulator's own checks (dev/emu/emu_check.cu): a kernel per rule of CUDA that it breaks
#      (lanes of a warp at different warp instructions, a warp instruction in a partial warp or
#      that some lanes never reach, a __syncthreads that some threads never reach, threads at
#      different barriers, misaligned cp.async and ldmatrix addresses, a cp.async into device
#      memory, copies never waited for, launches over CUDA's limits (dynamic shared memory too),
#      mbarrier waits that nothing will complete, a wgmma's A fragments changed in registers before
#      its wait, a misaligned float4, a write
#      past the end of device memory) must each stop the run with its message; launch after
#      launch of a few blocks each, shared out to 4 workers, must give the host's result;
#   5. dev/emu/nccl_check.cu under mpirun with 2 and 4 ranks: the emulator's NCCL (done with MPI)
#      against NCCL's results (all-reduce, reduce-scatter, all-gather, send/receive in and outside
#      groups, split communicators, the calls it must refuse), then a receive whose send has
#      another size, which must stop with a message. Skipped without MPI.
set -u
cd "$(dirname "$0")/.."
. test/lib.sh  # mpi_run
if ! command -v "${CXX:-g++}" >/dev/null; then echo "skipped: no C++ compiler (${CXX:-g++})"; exit 77; fi
make -s -j"$JOBS" gpu-emu race-emu || { echo "FAIL: the emulator's builds of gpu_check, instruction_check or race_check do not build"; exit 1; }
export ASAN_OPTIONS=detect_leaks=0
unset CUDA_VISIBLE_DEVICES  # the emulator honours it as CUDA does: a GPU machine's setting must not hide its GPU
status=0
# quiet RUN...: runs it, without ASan's note about fibers
quiet() { "$@" 2>&1 | grep -v "ASan doesn't fully support makecontext"; return "${PIPESTATUS[0]}"; }

echo "--- 1. the emulated tensor-core instructions against their definitions ---"
for async in wait issue random:7; do
  quiet env CUDA_EMU_ASYNC=$async build/emu/instruction_check ||
    { echo "FAIL: an emulated instruction disagrees with its definition (CUDA_EMU_ASYNC=$async)"; status=1; }
done

echo "--- 2. every kernel against the CPU, in several schedules ---"
# The kernels in the other schedules (one after the other) and every kernel check under the race
# detector (3) run in the background from here, beside the checks in the default schedule, so
# that the cores stay busy where a launch has fewer blocks than workers; each prints where it
# would have, from its log.
kernels=(encoder layernorm matmul attention attention_paged gelu residual classifier clip adamw matmul_bf16 attention_bf16
         attention_paged_bf16 adamw_bf16)
schedules() {
  local rc=0
  for mode in "CUDA_EMU_SCHEDULE=reverse CUDA_EMU_WORKERS=1" "CUDA_EMU_SCHEDULE=ahead CUDA_EMU_ASYNC=issue CUDA_EMU_WORKERS=3" \
              "CUDA_EMU_SCHEDULE=random:11 CUDA_EMU_ASYNC=random:12"; do
    echo "--- the kernels again, $mode ---"
    quiet env $mode build/emu/gpu_check --quick "${kernels[@]}" >build/emu/schedule.log ||
      { cat build/emu/schedule.log; echo "FAIL: emulated GPU kernels disagree with the CPU under $mode"; rc=1; }
    grep -c "^  ok" build/emu/schedule.log | sed 's/$/ checks ok/'
  done
  return $rc
}
schedules >build/emu/schedules.out 2>&1 &
schedules_pid=$!
build/emu/gpu_check_race --quick >build/emu/race_kernels.log 2>&1 &
race_kernels_pid=$!
quiet build/emu/gpu_check --quick || { echo "FAIL: emulated GPU kernels disagree with the CPU"; status=1; }
# the roofline's measuring mode (dev/gpu/roofline.h), on a tiny model: every row's launcher runs, in both precisions
quiet build/emu/gpu_check --quick roofline >build/emu/roofline.log &&
  [ "$(grep -c '^the whole step, measured' build/emu/roofline.log)" = 2 ] && echo "ok   roofline --quick: every row runs" ||
  { cat build/emu/roofline.log; echo "FAIL: build/emu/gpu_check --quick roofline did not run every row of both precisions"; status=1; }
wait $schedules_pid || status=1
cat build/emu/schedules.out

echo "--- 3. the race detector on kernels with planted races ---"
for mode in "" "CUDA_EMU_SCHEDULE=reverse" "CUDA_EMU_SCHEDULE=ahead CUDA_EMU_ASYNC=issue" \
            "CUDA_EMU_SCHEDULE=random:5 CUDA_EMU_ASYNC=random:6"; do
  for clean in clean clean_tma clean_stores; do
    env $mode build/emu/race_check $clean >build/emu/race.log 2>&1 ||
      { cat build/emu/race.log; echo "FAIL: the race-free kernel $clean fails under ${mode:-the default schedule}"; status=1; }
  done
done
echo "ok   clean, clean_tma, clean_stores: no race reported, right result, in 4 modes"
# (a line may be marked for several races: "// race: NAME NAME ...")
for race in missing_barrier reuse_before_barrier refill_before_barrier read_before_wait \
            tma_read_before_wait wrong_parity wgmma_write_before_wait shallow_wait release_before_wait missing_proxy_fence; do
  lines=$(grep -nE "// race: (.* )?$race( .*)?\$" dev/emu/race_check.cu | cut -d: -f1)
  case $race in
    missing_proxy_fence) kernel=stores_kernel ;;
    tma_*|wrong_parity|wgmma_*|shallow_wait|release_*) kernel=tma_kernel ;;
    *) kernel=${race}_kernel ;;
  esac
  mode=; [ $race = release_before_wait ] && mode=CUDA_EMU_SCHEDULE=reverse  # the producer between release and wait
  ( env $mode build/emu/race_check $race ) >build/emu/race.log 2>&1  # (in a subshell: its abort message goes to the log)
  rc=$?
  ok=1
  [ $rc -ne 0 ] && grep -q "race on shared memory in kernel $kernel" build/emu/race.log || ok=0
  for l in $lines; do grep -q "dev/emu/race_check.cu:$l " build/emu/race.log || ok=0; done
  if [ $ok = 1 ] && [ "$(echo $lines | wc -w)" = 2 ]; then
    echo "ok   $race: reported at lines $(echo $lines)"
  else
    echo "FAIL $race: expected a race report naming ${race}_kernel and lines $(echo $lines) (exit $rc):"
    cat build/emu/race.log; status=1
  fi
done
# expect_report BINARY KERNEL PATTERN WHAT: BINARY KERNEL must fail with a line matching PATTERN
expect_report() {
  ( "$1" "$2" ) >build/emu/race.log 2>&1
  if [ $? -ne 0 ] && grep -q "$3" build/emu/race.log; then
    echo "ok   $2: $4"
  else
    echo "FAIL $2: expected $4, got:"; head -5 build/emu/race.log; status=1
  fi
}
( build/emu/race_check swizzle_mismatch ) >build/emu/race.log 2>&1
if [ $? -eq 1 ] && grep -q "race_check swizzle_mismatch: wrong result" build/emu/race.log; then
  echo "ok   swizzle_mismatch: a 64B-swizzle descriptor on 128B-swizzled tiles gives a wrong product"
else
  echo "FAIL swizzle_mismatch: expected a wrong result (exit 1), got:"; head -5 build/emu/race.log; status=1
fi
line=$(grep -n "// past_the_end" dev/emu/race_check.cu | head -1 | cut -d: -f1)
expect_report build/emu/race_check past_the_end \
  "shared-memory write out of bounds in kernel past_the_end_kernel.*past the end of buf.*race_check.cu:$line " \
  "the write past buf's end reported by the race detector at line $line"
expect_report build/emu/race_check_asan past_the_end "race_check.cu:$line" \
  "the write past buf's end reported by the AddressSanitizer/UBSan build at line $line"
line=$(grep -n "// unwritten: " dev/emu/race_check.cu | cut -d: -f1)
expect_report build/emu/race_check unwritten \
  "read of shared memory that no thread of this block has written, in kernel unwritten_kernel, block (1,0,0), thread 0: buf+0 .*race_check.cu:$line " \
  "block 1's read of what only block 0 wrote, reported at line $line"

echo "--- every kernel check under the race detector ---"
wait $race_kernels_pid ||
  { tail -20 build/emu/race_kernels.log; echo "FAIL: a kernel races on shared memory, or disagrees with the CPU"; status=1; }
grep -c "^  ok" build/emu/race_kernels.log | sed 's/$/ checks ok, no race/'

echo "--- 4. the emulator's own checks: kernels that break a rule of CUDA ---"
# misuse CASE TEXT: build/emu/emu_check CASE must exit non-zero with TEXT on a line of its
# output (and AddressSanitizer must not have lost track of the stack on the way: see emu_fatal)
misuse() {
  ( build/emu/emu_check "$1" ) >build/emu/misuse.log 2>&1
  local rc=$?
  if [ $rc -ne 0 ] && grep -qF -- "$2" build/emu/misuse.log && ! grep -q "ASan is ignoring" build/emu/misuse.log; then
    echo "ok   $1: $(grep -m 1 -F -- "$2" build/emu/misuse.log)"
  else
    echo "FAIL $1: expected a non-zero exit and \"$2\"; got exit $rc:"; head -5 build/emu/misuse.log; status=1
  fi
}
misuse divergent_warp "lanes of a warp wait at different warp instructions (lane 0 at shuffle, lane 16 at ldmatrix_x4) (kernel divergent_warp_kernel"
misuse partial_warp "shuffle in a warp with fewer than 32 threads (kernel partial_warp_kernel"
misuse exited_lanes "a warp instruction (shuffle, mma, ldmatrix) that some lanes of the warp never reach (they exited) (kernel exited_lanes_kernel"
misuse exited_threads "__syncthreads that some threads of the block never reach (they exited) (kernel exited_threads_kernel"
misuse divergent_barriers "deadlock: threads wait at different barriers (divergent __syncthreads/shuffle) (kernel divergent_barriers_kernel"
misuse cp_async_misaligned "cp.async address not 16-byte aligned (kernel cp_async_misaligned_kernel"
misuse cp_async_not_shared "cp.async destination outside shared memory (kernel cp_async_not_shared_kernel"
misuse cp_async_unwaited "cp.async copies never waited for (the thread ended with copies in flight) (kernel cp_async_unwaited_kernel"
misuse ldmatrix_misaligned "ldmatrix row address not 16-byte aligned (kernel ldmatrix_misaligned_kernel"
at() { grep -n "// misuse: $1\$" dev/emu/emu_check.cu | cut -d: -f1; }  # the line marked for CASE
misuse big_block "kernel over_limits_kernel (dev/emu/emu_check.cu:$(at big_block)) failed: invalid configuration argument"
misuse big_grid "invalid launch of over_limits_kernel: grid (1,65536,1) block (32,1,1)"
misuse big_shared "launch of over_limits_kernel with 65536 bytes of dynamic shared memory: more than 48 KiB without cudaFuncSetAttribute"
misuse mbarrier_deadlock "deadlock: mbarrier waits that no arrival or copy will complete (a wrong parity or count?): the mbarrier at bar+0 (mbarrier_deadlock_kernel), 0 phases completed, 1 of 2 arrivals"
misuse wgmma_rs_changed "wgmma_bf16_rs: lane 0 of warp 0 changed its A fragments (registers) before the wgmma_wait that retires the wgmma (kernel wgmma_rs_changed_kernel"
misuse float4_misaligned "dev/emu/emu_check.cu:$(at float4_misaligned):17: runtime error: reference binding to misaligned address"
misuse past_device_end "in past_device_end_kernel(float*, int) dev/emu/emu_check.cu:$(at past_device_end)"
grep -q "AddressSanitizer: heap-buffer-overflow" build/emu/misuse.log ||
  { echo "FAIL past_device_end: not reported as a heap-buffer-overflow"; status=1; }
# and the blocks of launch after launch shared out to 4 workers on this machine's cores: the
# host's result, three times (a worker that ran a block of one launch while the next began
# gave another result in about one run in five)
for i in 1 2 3; do
  if CUDA_EMU_WORKERS=4 build/emu/emu_check workers >build/emu/misuse.log 2>&1 && grep -q "the host's result$" build/emu/misuse.log; then
    echo "ok   workers: $(cat build/emu/misuse.log)"
  else
    echo "FAIL workers (run $i):"; head -5 build/emu/misuse.log; status=1
  fi
done
# and a setting it cannot read: exit 2, one line saying what it expects
bad_setting() {  # VAR=VALUE EXPECTED
  env "$1" build/emu/race_check_asan clean >build/emu/misuse.log 2>&1
  local rc=$?
  if [ $rc -eq 2 ] && [ "$(wc -l <build/emu/misuse.log)" -eq 1 ] && grep -qF "cuda_emu: $1: $2" build/emu/misuse.log; then
    echo "ok   $1: $(cat build/emu/misuse.log)"
  else
    echo "FAIL $1: expected exit 2 and one line \"cuda_emu: $1: $2\"; got exit $rc:"; head -3 build/emu/misuse.log; status=1
  fi
}
bad_setting CUDA_EMU_SCHEDULE=lockstep "expected roundrobin, reverse, ahead or random[:SEED]"
bad_setting CUDA_EMU_ASYNC=random:x "expected wait, issue or random[:SEED]"
bad_setting CUDA_EMU_WORKERS=0 "expected a number of threads from 1 to 64"

echo "--- 5. the emulator's NCCL against NCCL's results, under mpirun ---"
if ! command -v mpirun >/dev/null; then
  echo "skipped: no mpirun (bash test/setup.sh installs openmpi-bin)"
elif ! make -s build/emu/nccl_check; then
  echo "FAIL: build/emu/nccl_check does not build"; status=1
elif ! ldd build/emu/nccl_check | grep -q libmpi; then
  echo "skipped: build/emu/nccl_check was built without MPI (no mpicc found), so is the emulator's NCCL"
else
  for np in 2 4; do
    CUDA_EMU_DEVICES=4 MPI_TIMEOUT=60 mpi_run $np build/emu/nccl_check >build/emu/nccl.log 2>&1 ||
      { cat build/emu/nccl.log; echo "FAIL: the emulator's NCCL with $np ranks (exit 124: a hang)"; status=1; }
    grep -c "^ok" build/emu/nccl.log | sed "s/$/ checks ok with $np ranks/"
  done
  CUDA_EMU_DEVICES=2 MPI_TIMEOUT=60 mpi_run 2 build/emu/nccl_check mismatch >build/emu/nccl.log 2>&1
  rc=$?
  if [ $rc -ne 0 ] && [ $rc -ne 124 ] && grep -q "ncclRecv of 4 elements from rank 0 met a send of another size" build/emu/nccl.log; then
    echo "ok   mismatch: a receive of 4 elements from a send of 3 stops with a message"
  else
    cat build/emu/nccl.log; echo "FAIL mismatch: a receive of 4 elements from a send of 3 should stop with a message (exit $rc)"; status=1
  fi
fi

[ $status -eq 0 ] && echo "ok: every kernel agrees with the CPU under emulation, in every schedule, with no shared-memory race; the emulator's NCCL gives NCCL's results"
exit $status

#!/usr/bin/env bash
# train_gpu on a real GPU. Skipped only where there is no GPU (nvidia-smi missing, or listing
# none); where nvidia-smi lists one, everything below must run and pass, and a train_gpu that
# cannot use the GPU fails the test. Without a GPU, the ./train_gpu that nvcc builds (when nvcc is
# here) must say so in one line and exit 1.
# With a GPU (dev/gpu_all.sh runs this as part of its measurements):
#   1. build/instruction_check: mma.sync, ldmatrix, cp.async and bf16 rounding as the hardware
#      does them, against the definitions the emulator implements; build/gpu_check: every kernel
#      and the whole model against the CPU (fp32 and bf16), then timings;
#   2. compute-sanitizer memcheck, racecheck, synccheck and initcheck on build/gpu_check --quick,
#      each with 0 errors: what the emulator cannot see (doc/gpu.md, "What the emulator misses");
#   3. ./train_gpu against train_cpu with the same flags, and resumed against uninterrupted
#      (test/train_gpu_checks.sh);
#   4. three steps of a d2 model on Tiny Shakespeare, the program as users run it.
set -u
. "$(dirname "$0")/lib.sh"
NVCC=${NVCC:-$(command -v nvcc 2>/dev/null || ls /usr/local/cuda/bin/nvcc 2>/dev/null)}
gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU [0-9]')

if [ "$gpus" -eq 0 ]; then
  if [ -n "$NVCC" ]; then
    make -s train_gpu NVCC="$NVCC" || { echo "FAIL: train_gpu does not build"; exit 1; }
    out=$(./train_gpu 2>&1)
    rc=$?
    echo "./train_gpu said: $out"
    if [ $rc -ne 1 ]; then echo "FAIL: ./train_gpu exited $rc without a GPU, expected 1"; exit 1; fi
    if [ "$(printf '%s\n' "$out" | wc -l)" -ne 1 ]; then echo "FAIL: expected exactly one line"; exit 1; fi
    if ! grep -q "no CUDA device found" <<<"$out" || ! grep -q "./train_cpu" <<<"$out"; then
      echo "FAIL: the line should say that no CUDA device was found and suggest ./train_cpu"
      exit 1
    fi
    echo "ok: without a GPU, ./train_gpu says so in one line and exits 1"
  fi
  # dev/gpu_all.sh, the GPU machine's one command, must stop at once here, having done nothing
  rm -rf build/gpu_all_test
  out=$(bash dev/gpu_all.sh build/gpu_all_test/out 2>&1)
  rc=$?
  if [ $rc -ne 1 ] || [ "$(printf '%s\n' "$out" | wc -l)" -ne 1 ] || ! grep -q "no NVIDIA GPU here" <<<"$out" ||
     [ -e build/gpu_all_test/out ]; then
    echo "FAIL: without a GPU, dev/gpu_all.sh should exit 1 with one line and write nothing; exit $rc: $out"
    exit 1
  fi
  echo "ok: without a GPU, dev/gpu_all.sh says: $out"
  # its stage machinery, with a stand-in nvidia-smi that lists a GPU, on the one stage that
  # needs no GPU (env: what the machine is)
  mkdir -p build/gpu_all_test/bin
  printf '#!/bin/sh\n[ "$1" = -L ] && echo "GPU 0: stand-in (UUID: GPU-0)"\nexit 0\n' >build/gpu_all_test/bin/nvidia-smi
  chmod +x build/gpu_all_test/bin/nvidia-smi
  PATH="$PWD/build/gpu_all_test/bin:$PATH" NVCC=${NVCC:-true} bash dev/gpu_all.sh build/gpu_all_test/out env >/dev/null 2>&1
  if ! grep -q "^env: exit 0, " build/gpu_all_test/out/summary.txt 2>/dev/null ||
     ! grep -q "^GPU 0: stand-in" build/gpu_all_test/out/env.txt; then
    echo "FAIL: dev/gpu_all.sh OUT env did not write env.txt and its summary line"; exit 1
  fi
  echo "ok: dev/gpu_all.sh OUT env wrote env.txt and summary.txt"
  PATH="$PWD/build/gpu_all_test/bin:$PATH" NVCC=${NVCC:-true} GPU_ALL_PACK=1 bash dev/gpu_all.sh build/gpu_all_test/packed env >/dev/null 2>&1
  if [ "$(ls build/gpu_all_test/packed 2>/dev/null | tr '\n' ' ')" != "gpu_all.tar.gz summary.txt " ] ||
     [ "$(tar tzf build/gpu_all_test/packed/gpu_all.tar.gz 2>/dev/null)" != env.txt ]; then
    echo "FAIL: GPU_ALL_PACK=1 dev/gpu_all.sh OUT env should leave summary.txt and gpu_all.tar.gz holding env.txt"
    ls -l build/gpu_all_test/packed; exit 1
  fi
  echo "ok: GPU_ALL_PACK=1 packs the outputs into gpu_all.tar.gz beside summary.txt"
  echo "skipped: no GPU (nvidia-smi lists none); test_gpu_emu and test_train_gpu_emu check the GPU code on the CPU"
  exit 77
fi

nvidia-smi -L
[ -n "$NVCC" ] || { echo "FAIL: nvidia-smi lists a GPU, but nvcc is not found (set NVCC=)"; exit 1; }
make -s train_gpu gpu-checks NVCC="$NVCC" || { echo "FAIL: train_gpu, build/gpu_check or build/instruction_check does not build"; exit 1; }
SANITIZER=${SANITIZER:-$(command -v compute-sanitizer 2>/dev/null || ls "$(dirname "$NVCC")/compute-sanitizer" 2>/dev/null)}
status=0

echo "--- 1. build/instruction_check, build/gpu_check"
build/instruction_check || { echo "FAIL: a tensor-core instruction does not do what the kernels (and the emulator) assume"; status=1; }
build/gpu_check || { echo "FAIL: build/gpu_check failed: a kernel disagrees with the CPU, or it could not run"; status=1; }

echo "--- 2. compute-sanitizer on build/gpu_check --quick"
[ -n "$SANITIZER" ] || { echo "FAIL: compute-sanitizer is not found next to nvcc (set SANITIZER=)"; status=1; }
for tool in ${SANITIZER:+memcheck racecheck synccheck initcheck}; do
  log=build/sanitizer_$tool.log
  "$SANITIZER" --tool $tool --error-exitcode 99 build/gpu_check --quick >"$log" 2>&1
  rc=$?
  summary=$(grep -E "ERROR SUMMARY|RACECHECK SUMMARY" "$log" | tail -n 1)
  if [ $rc -eq 0 ] && grep -qE "SUMMARY: 0 (errors|hazards)" <<<"$summary"; then
    echo "ok   $tool: $summary"
  else
    echo "FAIL $tool: exit $rc, ${summary:-no summary}; the first reports:"
    grep -E "^=========" "$log" | head -20
    status=1
  fi
done

echo "--- 3. ./train_gpu against train_cpu, and resumed"
bash test/train_gpu_checks.sh ./train_gpu fp32 || status=1
bash test/train_gpu_checks.sh ./train_gpu bf16 || status=1

echo "--- 4. ./train_gpu on Tiny Shakespeare, d2, in each precision"
for p in fp32 bf16; do
  out=$(./train_gpu -e d2 -b 4 -t 64 -x 3 -v 0 -s 0 -p $p 2>&1)
  rc=$?
  echo "$out"
  if [ $rc -ne 0 ] || ! grep -q "^step    3/3 | loss" <<<"$out"; then
    echo "FAIL: three training steps of d2 on the GPU (-p $p) did not finish"; status=1
  fi
done
[ $status -eq 0 ] && echo "ok: GPU kernels, sanitizers, training against train_cpu, resume"
exit $status

#!/usr/bin/env bash
# The GPU version (train_gpu.cu). Without a CUDA device: ./train_gpu must print one line saying
# that no device was found (suggesting ./train_cpu) and exit 1; then the GPU checks are skipped
# (exit 77). With a device: every kernel and the whole model against the CPU, with timings
# (dev/gpu_check.cu), and three training steps of a small model.
set -u
cd "$(dirname "$0")/.."
NVCC=${NVCC:-$(command -v nvcc 2>/dev/null || ls /usr/local/cuda/bin/nvcc 2>/dev/null)}
if [ -z "$NVCC" ]; then
  echo "skipped: nvcc not found (the CUDA toolkit builds train_gpu)"
  exit 77
fi
make -s train_gpu gpu-checks NVCC="$NVCC" || { echo "FAIL: train_gpu or build/gpu_check does not build"; exit 1; }

if ! build/gpu_check --device; then
  out=$(./train_gpu 2>&1)
  rc=$?
  echo "./train_gpu said: $out"
  if [ $rc -ne 1 ]; then echo "FAIL: ./train_gpu exited $rc without a CUDA device, expected 1"; exit 1; fi
  if [ "$(printf '%s\n' "$out" | wc -l)" -ne 1 ]; then echo "FAIL: expected exactly one line"; exit 1; fi
  if ! grep -q "no CUDA device found" <<<"$out" || ! grep -q "./train_cpu" <<<"$out"; then
    echo "FAIL: the line should say that no CUDA device was found and suggest ./train_cpu"
    exit 1
  fi
  echo "ok: without a device, ./train_gpu says so in one line and exits 1"
  echo "skipped: no CUDA device (the kernel, model and training checks need one)"
  exit 77
fi

build/gpu_check || { echo "FAIL: GPU and CPU disagree (build/gpu_check)"; exit 1; }
out=$(./train_gpu -e d2 -b 4 -t 64 -x 3 -v 0 -s 0 2>&1)
rc=$?
echo "$out"
if [ $rc -ne 0 ] || ! grep -q "^step    3/3 | loss" <<<"$out"; then
  echo "FAIL: three training steps of d2 on the GPU did not finish"
  exit 1
fi
echo "ok: GPU kernels, model and training"

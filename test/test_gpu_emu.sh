#!/usr/bin/env bash
# The GPU kernels without a GPU: dev/gpu/gpu_check.cu built for the CPU emulator (dev/emu/cuda_emu.h),
# which runs every kernel's threads on the CPU, under AddressSanitizer and UBSan. It checks
# indexing, bounds, barriers and float4 alignment against the CPU reference at small sizes (the kernels
# in two thread schedules); it says nothing about speed or about what only a real GPU does. First,
# dev/gpu/instruction_check.cu: the emulated bf16 conversion, mma.sync, ldmatrix and cp.async against
# their definitions, which the bf16 kernels' checks rely on.
set -u
cd "$(dirname "$0")/.."
if ! command -v "${CXX:-g++}" >/dev/null; then echo "skipped: no C++ compiler (${CXX:-g++})"; exit 77; fi
make -s gpu-emu || { echo "FAIL: build/emu/gpu_check or build/emu/instruction_check does not build"; exit 1; }
export ASAN_OPTIONS=detect_leaks=0
echo "--- the emulated tensor-core instructions against their definitions ---"
build/emu/instruction_check 2>&1 | grep -v "ASan doesn't fully support makecontext"
[ "${PIPESTATUS[0]}" -eq 0 ] || { echo "FAIL: an emulated instruction disagrees with its definition"; exit 1; }
build/emu/gpu_check --quick 2>&1 | grep -v "ASan doesn't fully support makecontext"
[ "${PIPESTATUS[0]}" -eq 0 ] || { echo "FAIL: emulated GPU kernels disagree with the CPU"; exit 1; }
echo "--- the kernels again, the threads of each block in reverse order ---"
CUDA_EMU_REVERSE=1 build/emu/gpu_check --quick encoder layernorm matmul attention gelu residual classifier clip adamw \
  matmul_bf16 attention_bf16 adamw_bf16 2>&1 | grep -v "ASan doesn't fully support makecontext"
[ "${PIPESTATUS[0]}" -eq 0 ] || { echo "FAIL: emulated GPU kernels disagree with the CPU (reverse schedule)"; exit 1; }
echo "ok: every kernel and the model agree with the CPU under emulation"

#!/usr/bin/env bash
# test_train_gpu_emu.sh's checks of the whole train_gpu program on the CUDA emulator, against
# train_cpu, in mixed precision (-p bf16, 20 steps, within bf16's tolerances): a test of its own
# so that the two precisions run side by side.
set -u
. "$(dirname "$0")/lib.sh"
if ! command -v "${CXX:-g++}" >/dev/null; then echo "skipped: no C++ compiler (${CXX:-g++})"; exit 77; fi
need_python numpy
build_locked emu_train_gpu train_gpu_emu build/emu/train_gpu_race ||
  { echo "FAIL: build/emu/train_gpu or build/emu/train_gpu_race does not build"; exit 1; }
export ASAN_OPTIONS=detect_leaks=0
# the emulator honours CUDA_VISIBLE_DEVICES as CUDA does: a GPU machine's setting (a scheduler's)
# must not hide its emulated GPUs
unset CUDA_VISIBLE_DEVICES
bash test/train_gpu_checks.sh build/emu/train_gpu bf16

#!/usr/bin/env bash
# test_train_gpu_emu.sh's checks of the whole train_gpu program on the CUDA emulator, against
# train_cpu, in mixed precision (-p bf16, 20 steps, within bf16's tolerances): a test of its own
# so that the two precisions run side by side.
set -u
. "$(dirname "$0")/lib.sh"
emu_train_gpu_setup
bash test/train_gpu_checks.sh build/emu/train_gpu bf16

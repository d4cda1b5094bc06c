#!/usr/bin/env bash
# The whole train_gpu program without a GPU, against train_cpu, in fp32: build/emu/train_gpu
# (make train_gpu_emu) is train_gpu.cu with its kernels run on the CPU by the CUDA emulator
# (dev/emu/cuda_emu.h), under AddressSanitizer and UBSan, checked as a user runs it against
# train_cpu with the same flags, resumed against uninterrupted, with its batch split over
# micro-steps and processes and its model over 2 processes (test/train_gpu_checks.sh, which
# test/test_gpu.sh runs on a real GPU too). test_train_gpu_emu runs it in fp32,
# test_train_gpu_emu_bf16 in bf16; test_train_gpu_emu_modes checks the program's other modes
# (start-up, ranks and GPUs, faults, precision, schedules, the race detector).
set -u
. "$(dirname "$0")/lib.sh"
emu_train_gpu_setup
bash test/train_gpu_checks.sh build/emu/train_gpu fp32

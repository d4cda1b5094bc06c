#!/usr/bin/env bash
# Exercise 8 (README.md beside this file): softmax_forward_gpu and its kernel in
# gpt2/gpu/classifier.cuh, checked on the CPU emulator of CUDA: softmax_check.cu (beside this file)
# includes that header and gpt2/cpu_layers.h, dev/emu/cuda_emu.py translates it, and g++ builds it
# twice: for the emulator's race detector (a missing barrier stops it, naming both lines), and with
# AddressSanitizer and UBSan (out-of-bounds reads and writes, misaligned float4s), run in three
# schedules. The check also requires the softmax to run in kernels with whole warps per block, and
# the launcher not to touch the logits or the probabilities from the host (softmax_check.cu says how).
# Needs neither nvcc nor a GPU. Run from the root of the tree.
set -uo pipefail
here=doc/exercises/08-gpu-kernel
out=build/exercises/08
mkdir -p "$out"
py=${PYTHON:-/usr/bin/python3}
cxx=${CXX:-g++}

if ! grep -q 'softmax_forward_gpu *(' gpt2/gpu/classifier.cuh; then
    echo "softmax_forward_gpu not found in gpt2/gpu/classifier.cuh (see $here/README.md)"
    exit 1
fi
"$py" dev/emu/cuda_emu.py "$here/softmax_check.cu" "$out/softmax_check.cpp" >"$out/translate.log" 2>&1 || {
    echo "dev/emu/cuda_emu.py could not translate the check ($out/translate.log):"; tail -n 3 "$out/translate.log"; exit 1; }
"$cxx" -std=c++17 -O1 -g1 -fwhole-program -fopenmp -fsanitize=address,undefined -fno-sanitize=vptr -fno-sanitize-recover=undefined \
    -include dev/emu/cuda_emu.h -I. "$out/softmax_check.cpp" -o "$out/softmax_check" >"$out/compile.log" 2>&1 || {
    echo "the check does not compile with your gpt2/gpu/classifier.cuh ($out/compile.log); is the launcher"
    echo "  static void softmax_forward_gpu(float* probs, const float* logits, int B, int T, int V, int Vp)?"
    grep -m 3 "error" "$out/compile.log"; exit 1; }
# the shared-memory race detector (doc/gpu.md, "The race detector"), first: its report names the
# two lines of a race, where a wrong result in some schedule would only show its effect
"$cxx" -std=c++17 -O1 -g1 -fwhole-program -fopenmp -DCUDA_EMU_RACE -fsanitize=thread --param=tsan-instrument-func-entry-exit=0 \
    -include dev/emu/cuda_emu.h -I. -c "$out/softmax_check.cpp" -o "$out/softmax_check_race.o" >"$out/compile_race.log" 2>&1 &&
    "$cxx" -fopenmp "$out/softmax_check_race.o" -o "$out/softmax_check_race" >>"$out/compile_race.log" 2>&1 || {
    echo "the check does not build for the race detector ($out/compile_race.log)"; grep -m 3 "error" "$out/compile_race.log"; exit 1; }
race_ok=1
( "$out/softmax_check_race" ) >"$out/race.txt" 2>&1 || race_ok=0  # a subshell: bash does not report the abort
if [ $race_ok = 0 ] && grep -q "^cuda_emu: " "$out/race.txt"; then
    echo "softmax_forward_gpu stopped by the emulator's race detector (all of it: $out/race.txt):"
    grep -v "^ok" "$out/race.txt" | head -n 8
    exit 1
fi
# with AddressSanitizer, in the default schedule, then with the warps interleaved otherwise
# (doc/gpu.md, "Schedules")
for schedule in roundrobin ahead random:8; do
    if ! CUDA_EMU_SCHEDULE=$schedule "$out/softmax_check" >"$out/check.txt" 2>&1; then
        echo "softmax_forward_gpu fails the check with CUDA_EMU_SCHEDULE=$schedule (all of it: $out/check.txt):"
        grep -v "^ok" "$out/check.txt" | head -n 6
        exit 1
    fi
done
if [ $race_ok = 0 ]; then
    echo "softmax_forward_gpu fails the check in the race detector's build (all of it: $out/race.txt):"
    grep -v "^ok" "$out/race.txt" | head -n 8
    exit 1
fi
cat "$out/check.txt"
echo "exercise 8: solved (softmax_forward_gpu equals softmax_forward on every shape, on the emulator, in 3 schedules, with no shared-memory race, in kernels that never leave the device)"

#!/usr/bin/env bash
# Builds one .cu file for the CPU emulator of CUDA (dev/emu/cuda_emu.h) and runs it, as the
# Makefile's build/emu/ programs are built: dev/emu/cuda_emu.py translates it to C++, g++ compiles
# it with AddressSanitizer and UBSan, or with --race for the emulator's shared-memory race detector.
# Needs neither nvcc nor a GPU. Run from the root of the tree.
#   bash doc/lessons/emu.sh [--race] FILE.cu [ARGS...]
set -euo pipefail
race=0
if [ "${1:-}" = "--race" ]; then race=1; shift; fi
src=$1; shift
name=$(basename "$src" .cu)
out=build/lessons/emu
mkdir -p "$out"
py=${PYTHON:-python3}
cxx=${CXX:-g++}
"$py" dev/emu/cuda_emu.py "$src" "$out/$name.cpp"
if [ $race = 1 ]; then
    "$cxx" -std=c++17 -O1 -g -fopenmp -DCUDA_EMU_RACE -fsanitize=thread --param=tsan-instrument-func-entry-exit=0 \
        -include dev/emu/cuda_emu.h -I. -c "$out/$name.cpp" -o "$out/${name}_race.o"
    "$cxx" -fopenmp "$out/${name}_race.o" -o "$out/${name}_race"
    prog=$out/${name}_race
else
    "$cxx" -std=c++17 -O1 -g -fopenmp -fsanitize=address,undefined -fno-sanitize-recover=undefined \
        -include dev/emu/cuda_emu.h -I. "$out/$name.cpp" -o "$out/$name"
    prog=$out/$name
fi
# The emulator names source files by their absolute paths: shown from the root of the tree. The
# subshell's own stderr is dropped: only its "Aborted" line for a program the emulator stopped.
( "$prog" "$@" 2>&1; exit $? ) 2>/dev/null | sed "s|$(pwd)/||g"

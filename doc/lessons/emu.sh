#!/usr/bin/env bash
# Builds one of the lessons' demonstration kernels (doc/lessons/NAME.cu) for the CPU emulator of
# CUDA (dev/emu/cuda_emu.h) with the Makefile's rules (build/emu/lessons/NAME: AddressSanitizer and
# UBSan; NAME_race with --race: the emulator's shared-memory race detector) and runs it. Needs
# neither nvcc nor a GPU. Run from the root of the tree.
#   bash doc/lessons/emu.sh [--race] doc/lessons/NAME.cu [ARGS...]
set -euo pipefail
suffix=""
if [ "${1:-}" = "--race" ]; then suffix=_race; shift; fi
prog=build/emu/lessons/$(basename "$1" .cu)$suffix; shift
make -s --no-print-directory "$prog" >/dev/null
# The emulator names source files by their absolute paths: shown from the root of the tree. The
# subshell's own stderr is dropped: only its "Aborted" line for a program the emulator stopped.
( "$prog" "$@" 2>&1; exit $? ) 2>/dev/null | sed "s|$(pwd)/||g"

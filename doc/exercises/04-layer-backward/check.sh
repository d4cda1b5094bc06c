#!/usr/bin/env bash
# Exercise 4 (README.md beside this file): rmsnorm_forward and rmsnorm_backward in
# gpt2/cpu_layers.h. Compiles rms_check.c against the header and runs it on 4 threads and on 1:
# the forward against its definition, the backward against finite differences in double, on
# shapes that are no multiple of anything, and the two runs' results bit for bit against each
# other. Run from the root of the tree.
set -uo pipefail
here=doc/exercises/04-layer-backward
out=build/exercises/04
mkdir -p "$out"

if ! grep -q 'rmsnorm_forward *(' gpt2/cpu_layers.h || ! grep -q 'rmsnorm_backward *(' gpt2/cpu_layers.h; then
    echo "rmsnorm_forward/backward not found in gpt2/cpu_layers.h (see $here/README.md)"
    exit 1
fi
"${CC:-gcc}" -O2 -fopenmp -I. "$here/rms_check.c" -o "$out/rms_check" -lm >"$out/compile.log" 2>&1 || {
    echo "$here/rms_check.c does not compile against gpt2/cpu_layers.h: are the prototypes those of the README? ($out/compile.log)"
    grep -m 2 -E 'error|note' "$out/compile.log"; exit 1; }
# 4 threads, more than this machine may have cores: a backward whose threads add into one
# dweight then gets other bits from run to run. And 1 thread: a sum split over the threads (an
# OpenMP reduction, per-thread partial sums) has an order that depends on their number, so its
# bits differ from the 4 threads' even where each count alone gives the same bits every run.
OMP_NUM_THREADS=4 "$out/rms_check" "$out/threads4" || exit 1
OMP_NUM_THREADS=1 "$out/rms_check" "$out/threads1" || exit 1
for pass in forward backward; do
    if ! cmp -s "$out/threads1.$pass" "$out/threads4.$pass"; then
        echo "rmsnorm_$pass gives other bits on 1 thread than on 4: split the work over outputs (rows, and channels for sums over rows such as dweight), as layernorm_$pass does, so that every sum has one order whatever the threads"
        exit 1
    fi
done
echo "exercise 4: solved (forward as defined, backward as finite differences, added, the same bits every run and on 1 thread as on 4)"

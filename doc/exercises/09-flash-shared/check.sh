#!/usr/bin/env bash
# Exercise 9 (README.md beside this file): a new rung of the kernel ladder,
# dev/kernels/20_attention_flash_shared.cu, flash attention whose block of query rows shares K and
# V tiles staged in shared memory. Built for the CPU emulator of CUDA as make kernels-emu builds
# every step (under AddressSanitizer and UBSan, and again for the race detector), then run by
# dev/kernels/run.sh in the plain order of the warps, in a random one and under the race detector,
# against the CPU's attention_forward on the shapes of dev/kernels/attention.cuh. Before that, a
# look at the source: its kernel must declare __shared__ storage and use it, with barriers.
# Needs neither nvcc nor a GPU. Run from the root of the tree.
set -uo pipefail
here=doc/exercises/09-flash-shared
step=20_attention_flash_shared
src=dev/kernels/$step.cu
out=build/exercises/09
mkdir -p "$out"

if [ ! -f "$src" ]; then
    echo "$src not found: write it, starting from a copy of dev/kernels/15_attention_flash.cu (see $here/README.md)"
    exit 1
fi
code=$(sed -e 's://.*$::' "$src")  # the source without its line comments
if ! grep -q 'attention_step_main *(' <<<"$code" || ! grep -q 'STORES_NOTHING' <<<"$code"; then
    echo "$src: its main must call attention_step_main(..., STORES_NOTHING), as step 15's does (the same driver)"
    exit 1
fi
# the arrays declared __shared__, each of which must be used beyond its declaration
shared=$(grep -E '__shared__' <<<"$code" | grep -oE '[A-Za-z_][A-Za-z0-9_]* *\[' | tr -d ' [' | sort -u)
if [ -z "$shared" ]; then
    echo "$src: no __shared__ array: the K and V tiles must be staged in shared memory (see $here/README.md)"
    exit 1
fi
for name in $shared; do
    uses=$(grep -oE "\\b$name\\b" <<<"$code" | wc -l)
    if [ "$uses" -lt 3 ]; then
        echo "$src: the __shared__ array $name is declared but hardly used (written once and read: at least twice more)"
        exit 1
    fi
done
if [ "$(grep -oE '__syncthreads *\(' <<<"$code" | wc -l)" -lt 2 ]; then
    echo "$src: fewer than two __syncthreads: one after a tile is loaded, one before the next overwrites it"
    exit 1
fi

if ! make -s "build/emu/kernels/$step" "build/emu/kernels/${step}_race" >"$out/build.log" 2>&1; then
    echo "$src does not build for the emulator ($out/build.log):"
    grep -m 5 -E "error|Error" "$out/build.log"
    exit 1
fi
if ! bash dev/kernels/run.sh emu "$step" >"$out/run.txt" 2>&1; then
    echo "$step fails on the emulator:"
    cat "$out/run.txt"
    echo "the step's own output: build/kernels/logs/$step.emu*.log"
    grep -h -m 3 -E "^  FAIL|race|ERROR" build/kernels/logs/$step.emu*.log 2>/dev/null | head -n 6
    exit 1
fi
cat build/kernels/logs/$step.emu.log
echo "exercise 9: solved ($step equals attention_forward on every shape, on the emulator, in two orders of the warps, with no shared-memory race)"

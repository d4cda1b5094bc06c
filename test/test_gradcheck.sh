#!/usr/bin/env bash
# Every layer's backward (gpt2/cpu_layers.h), and the whole model's (train_cpu.c), against central
# finite differences in double precision (test/gradcheck.c compiles them again in double).
set -u
. "$(dirname "$0")/lib.sh"
$CC $CFLAGS -o build/gradcheck test/gradcheck.c -lm || { echo "FAIL: gradcheck does not build"; exit 1; }
./build/gradcheck

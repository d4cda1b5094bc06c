#!/usr/bin/env bash
# Every layer's backward in train_cpu.c, and the whole model's, against central finite
# differences in double precision (test/gradcheck.c compiles train_cpu.c's layers in double).
set -u
cd "$(dirname "$0")/.."
CC=${CC:-gcc}
CFLAGS=${CFLAGS:--O2 -fopenmp}
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}   # see test_train_resume.sh
mkdir -p build
$CC $CFLAGS -o build/gradcheck test/gradcheck.c -lm || { echo "FAIL: gradcheck does not build"; exit 1; }
./build/gradcheck

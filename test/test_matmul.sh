#!/usr/bin/env bash
# The fast matmul (gpt2/cpu_layers.h on gpt2/cpu_math.h) against the naive loops
# (test/matmul_check.c), built three ways so that every code path the build can pick is checked
# on this machine: the normal build (-march=native where the compiler takes it: AVX-512 or AVX2
# tiles), the portable x86-64 baseline (16-byte vectors), and the plain-C fallback
# (-DMATMUL_PLAIN_C, scalar register tile, what compilers without GCC vector extensions get),
# and the naive build (-DMATMUL_NAIVE, make MATMUL=naive: matmul_forward_packed on the naive
# loops). Also compiles it as C++, as nvcc does.
set -u
cd "$(dirname "$0")/.."
CC=${CC:-gcc}
CXX=${CXX:-g++}
CFLAGS=${CFLAGS:--O3 -Wall -Wextra -Wno-unused-parameter -fopenmp}
mkdir -p build
native=""
echo 'int main(void){return 0;}' | $CC -march=native -x c - -o /dev/null 2>/dev/null && native="-march=native"
base_flags=$(echo "$CFLAGS" | sed 's/-march=native//g')
status=0
for variant in "native:$base_flags $native" "baseline:$base_flags" "plain-c:$base_flags -DMATMUL_PLAIN_C" \
               "naive:$base_flags $native -DMATMUL_NAIVE"; do
  name=${variant%%:*}
  flags=${variant#*:}
  echo "== $name ($flags)"
  $CC $flags -o build/matmul_check_$name test/matmul_check.c -lm || { echo "FAIL: matmul_check ($name) does not build"; exit 1; }
  ./build/matmul_check_$name || status=1
done
echo "== as C++"
if command -v "$CXX" > /dev/null; then
  $CXX -x c++ $base_flags $native -fsyntax-only test/matmul_check.c || { echo "FAIL: does not compile as C++"; status=1; }
else
  echo "no C++ compiler ($CXX): C++ check not run"
fi
[ $status -eq 0 ] && echo "test_matmul: passed" || echo "test_matmul: FAILED"
exit $status

#!/usr/bin/env bash
# The fast matmul (gpt2/cpu_layers.h on gpt2/cpu_math.h and gpt2/cpu_bf16.h) against the naive
# loops and, in bf16, against the product in double (test/matmul_check.c), built several ways so
# that every code path the build can pick is checked on this machine: the normal build
# (-march=native where the compiler takes it: AVX-512 or AVX2 tiles, vdpbf16ps with AVX512_BF16),
# the same without AVX512_BF16 (-mno-avx512bf16, where -march=native gives it: the bf16 products
# on float32 FMAs with AVX-512 vectors), the portable x86-64 baseline (16-byte vectors), the
# plain-C fallback (-DMATMUL_PLAIN_C, scalar register tile, what compilers without GCC vector
# extensions get), and the naive build (-DLAYERS_NAIVE, make LAYERS=naive: matmul_forward_packed
# on the naive loops). Every build sums the bf16 products in the same order, so their bf16
# fingerprints (a hash of one layer's products) must agree; where the machine has AMX the native
# build runs once more with its bf16 products on AMX's tiles (their own bits: every check but the
# fingerprint). Also compiles it as C++, as nvcc does.
set -u
cd "$(dirname "$0")/.."
CC=${CC:-gcc}
CXX=${CXX:-g++}
CFLAGS=${CFLAGS:--O3 -Wall -Wextra -Wno-unused-parameter -fopenmp}
mkdir -p build
native=""
echo 'int main(void){return 0;}' | $CC -march=native -x c - -o /dev/null 2>/dev/null && native="-march=native"
base_flags=$(echo "$CFLAGS" | sed 's/-march=native//g')
no_bf16=""
[ -n "$native" ] && echo 'int main(void){return 0;}' | $CC -march=native -mno-avx512bf16 -x c - -o /dev/null 2>/dev/null \
  && $CC -march=native -dM -E -x c /dev/null | grep -q __AVX512BF16__ && no_bf16="$native -mno-avx512bf16"
variants=("native:$base_flags $native")
[ -n "$no_bf16" ] && variants+=("native-no-bf16:$base_flags $no_bf16")
variants+=("baseline:$base_flags" "plain-c:$base_flags -DMATMUL_PLAIN_C" "naive:$base_flags $native -DLAYERS_NAIVE")
status=0
fingerprints=""
for variant in "${variants[@]}"; do
  name=${variant%%:*}
  flags=${variant#*:}
  echo "== $name ($flags)"
  $CC $flags -o build/matmul_check_$name test/matmul_check.c -lm || { echo "FAIL: matmul_check ($name) does not build"; exit 1; }
  # the vector products (GPT2_AMX=0): the ones every build shares
  GPT2_AMX=0 ./build/matmul_check_$name | tee build/matmul_check_$name.log
  [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
  fingerprints+="$name $(grep '^bf16 fingerprint:' build/matmul_check_$name.log | awk '{print $3}')"$'\n'
  # where this build's bf16 products run on AMX (gpt2/cpu_amx.h): every check again on its tiles,
  # whose sums have bits of their own (no fingerprint to share)
  if [ "$name" = native ] && ./build/matmul_check_$name --bf16-arith | grep -q AMX; then
    echo "== native on AMX"
    ./build/matmul_check_$name | tee build/matmul_check_amx.log
    [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
    grep -q "^bf16 products: AMX" build/matmul_check_amx.log || { echo "FAIL: the AMX run's bf16 products are not on AMX"; status=1; }
  fi
done
echo "== bf16 fingerprints"
printf "%s" "$fingerprints"
if [ "$(printf "%s" "$fingerprints" | awk 'NF != 2 { print "missing" } NF == 2 { print $2 }' | sort -u | wc -l)" -ne 1 ]; then
  echo "FAIL: the builds' bf16 products differ (or one printed no fingerprint)"
  status=1
fi
echo "== as C++"
if command -v "$CXX" > /dev/null; then
  $CXX -x c++ $base_flags $native -fsyntax-only test/matmul_check.c || { echo "FAIL: does not compile as C++"; status=1; }
else
  echo "no C++ compiler ($CXX): C++ check not run"
fi
[ $status -eq 0 ] && echo "test_matmul: passed" || echo "test_matmul: FAILED"
exit $status

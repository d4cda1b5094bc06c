#!/usr/bin/env bash
# Exercise 5 (README.md beside this file): the register tile of the packed GEMM as a build knob,
# -DMM_TILE_MR=R -DMM_TILE_NR_VECS=V. Builds test/matmul_check.c (the fast matmul against the
# naive loops, on shapes that hit every edge of the blocking) with several tiles, on this machine's
# vectors and on the plain-C fallback: each build must report the tile it was given and pass; a
# build without the knobs must keep the default tile. Run from the root of the tree.
set -uo pipefail
out=build/exercises/05
mkdir -p "$out"
cc=${CC:-gcc}
native=""
echo 'int main(void){return 0;}' | "$cc" -march=native -x c - -o /dev/null 2>/dev/null && native="-march=native"

# build NAME FLAGS...: test/matmul_check.c as $out/NAME; prints its "register tile R x N" line
build() {
    local name=$1; shift
    "$cc" -O2 -fopenmp "$@" -o "$out/$name" test/matmul_check.c -lm >"$out/$name.compile.log" 2>&1 || {
        echo "test/matmul_check.c does not compile with $* ($out/$name.compile.log):"
        grep -m 3 error "$out/$name.compile.log"; exit 1; }
}
tile_of() { sed -n 's/.*register tile \([0-9]*\) x \([0-9]*\).*/\1 \2/p' "$1"; }
lanes_of() { sed -n 's/^fast matmul: \([0-9]*\)-float vectors.*/\1/p' "$1"; }

build default $native
OMP_NUM_THREADS=2 "$out/default" >"$out/default.txt" 2>&1 || { echo "the default build fails test/matmul_check.c ($out/default.txt)"; exit 1; }
read -r def_mr def_nr < <(tile_of "$out/default.txt")

# MR, vectors per row of the tile, extra flags
cases=("3 1" "5 3" "7 2" "1 1" "4 2 -DMATMUL_PLAIN_C" "9 3 -DMATMUL_PLAIN_C")
for c in "${cases[@]}"; do
    read -r mr nv extra <<<"$c"
    name="tile_${mr}_${nv}${extra:+_plain}"
    # shellcheck disable=SC2086  # extra is empty or one flag
    build "$name" $native $extra "-DMM_TILE_MR=$mr" "-DMM_TILE_NR_VECS=$nv"
    if ! OMP_NUM_THREADS=2 "$out/$name" >"$out/$name.txt" 2>&1; then
        echo "with -DMM_TILE_MR=$mr -DMM_TILE_NR_VECS=$nv $extra the fast matmul is wrong:"
        grep -m 3 -i "fail\|mismatch" "$out/$name.txt"; exit 1
    fi
    lanes=$(lanes_of "$out/$name.txt")
    read -r got_mr got_nr < <(tile_of "$out/$name.txt")
    if [ "$got_mr $got_nr" != "$mr $((nv * lanes))" ]; then
        echo "-DMM_TILE_MR=$mr -DMM_TILE_NR_VECS=$nv $extra: the GEMM reports a register tile of $got_mr x $got_nr," \
             "expected $mr x $((nv * lanes)) ($nv vectors of $lanes floats): the knobs are not used (gpt2/cpu_math.h)"
        exit 1
    fi
done
# the knobs change nothing when they are not given
"$cc" -O2 -fopenmp $native -E -dM -x c gpt2/cpu_math.h 2>/dev/null | grep -q "define MM_TILE_MR" &&
    { echo "gpt2/cpu_math.h defines MM_TILE_MR itself: a build without the knob must keep the ISA's tile"; exit 1; }
echo "exercise 5: solved (tiles 3x1, 5x3, 7x2, 1x1 vectors and two plain-C tiles pass; default $def_mr x $def_nr)"

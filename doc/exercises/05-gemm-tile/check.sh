#!/usr/bin/env bash
# Exercise 5 (README.md beside this file): the register tile of the packed GEMM as a build knob,
# -DMM_TILE_MR=R -DMM_TILE_NR_VECS=V. Builds test/matmul_check.c (the fast matmul against the
# naive loops, on shapes that hit every edge of the blocking) with several tiles, on this machine's
# vectors and on the plain-C fallback: each build must report the tile it was given and pass; a
# build without the knobs must keep the default tile. A tile of 0 rows or 0 vectors must stop the
# build (#error); a tile that needs more vector registers than this machine's ISA has (R x V
# accumulators + V vectors of B + 1 broadcast of A) must build with a #warning, and one that fits
# without. Run from the root of the tree.
set -uo pipefail
out=build/exercises/05
mkdir -p "$out"
cc=${CC:-gcc}
native=""
echo 'int main(void){return 0;}' | "$cc" -march=native -x c - -o /dev/null 2>/dev/null && native="-march=native"

# build NAME FLAGS...: test/matmul_check.c as $out/NAME, its compiler messages in $out/NAME.compile.log
build() {
    local name=$1; shift
    "$cc" -O2 -fopenmp "$@" -o "$out/$name" test/matmul_check.c -lm >"$out/$name.compile.log" 2>&1 || {
        echo "test/matmul_check.c does not compile with $* ($out/$name.compile.log):"
        grep -m 3 error "$out/$name.compile.log"; exit 1; }
}
# compiles only (no program): the tile's #error or #warning comes from the preprocessor
syntax() {  # NAME FLAGS...
    local name=$1; shift
    "$cc" -fsyntax-only -fopenmp "$@" test/matmul_check.c >"$out/$name.compile.log" 2>&1
}
warns() { grep -qE '#warning|-W#warnings' "$1"; }
tile_of() { sed -n 's/.*register tile \([0-9]*\) x \([0-9]*\).*/\1 \2/p' "$1"; }
lanes_of() { sed -n 's/^fast matmul: \([0-9]*\)-float vectors.*/\1/p' "$1"; }

build default $native
OMP_NUM_THREADS=2 "$out/default" >"$out/default.txt" 2>&1 || { echo "the default build fails test/matmul_check.c ($out/default.txt)"; exit 1; }
read -r def_mr def_nr < <(tile_of "$out/default.txt")
warns "$out/default.compile.log" && { echo "the default build warns ($out/default.compile.log): the ISA's own tile fits its registers"; exit 1; }
# the vector registers of this machine's ISA, from the default build's vector width: 32 on
# AVX-512 (16 floats) and on AArch64 (4), 16 on x86-64's AVX and AVX2 (8) and SSE (4)
case "$(uname -m):$(lanes_of "$out/default.txt")" in
    x86_64:16 | aarch64:4) regs=32 ;;
    x86_64:8 | x86_64:4) regs=16 ;;
    *) regs="" ;;
esac
# expect_warning LOG MR V FLAGS: the build warned if and only if the tile does not fit
expect_warning() {
    local log=$1 mr=$2 nv=$3 extra=$4 need=$(($2 * $3 + $3 + 1))
    if [ -n "$extra" ]; then  # the plain-C fallback or AVX2 on AVX-512: no count against this ISA
        warns "$log" && { echo "-DMM_TILE_MR=$mr -DMM_TILE_NR_VECS=$nv $extra warns ($log): the plain-C fallback has no vector registers to count"; exit 1; }
        return 0
    fi
    [ -n "$regs" ] || return 0
    if [ "$need" -gt "$regs" ] && ! warns "$log"; then
        echo "-DMM_TILE_MR=$mr -DMM_TILE_NR_VECS=$nv needs $mr x $nv + $nv + 1 = $need vector registers, more than the" \
             "$regs of this ISA, and the build does not warn (#warning in gpt2/cpu_math.h)"; exit 1
    fi
    if [ "$need" -le "$regs" ] && warns "$log"; then
        echo "-DMM_TILE_MR=$mr -DMM_TILE_NR_VECS=$nv needs $mr x $nv + $nv + 1 = $need vector registers of the $regs of" \
             "this ISA, and the build warns that it does not fit ($log)"; exit 1
    fi
}

# a tile of 0 stops the build with the tile's own #error
for c in "0 2" "3 0" "0 8 -DMATMUL_PLAIN_C"; do
    read -r mr nv extra <<<"$c"
    # shellcheck disable=SC2086  # extra is empty or one flag
    if syntax "zero_${mr}_${nv}" $native $extra "-DMM_TILE_MR=$mr" "-DMM_TILE_NR_VECS=$nv" ||
        ! grep -qE '#error|error: "' "$out/zero_${mr}_${nv}.compile.log"; then
        echo "-DMM_TILE_MR=$mr -DMM_TILE_NR_VECS=$nv${extra:+ $extra}: a tile of 0 must stop the build with an #error that says why" \
             "($out/zero_${mr}_${nv}.compile.log)"
        exit 1
    fi
done

# MR, vectors per row of the tile, extra flags
cases=("3 1" "5 3" "7 2" "1 1" "16 1" "4 2 -DMATMUL_PLAIN_C" "9 3 -DMATMUL_PLAIN_C")
# on an AVX-512 machine, also AVX2's 8-float vectors: where GCC left some of a one-vector tile's
# products unfused, a row's bits depended on how many rows shared its tile
[ "$(uname -m):$(lanes_of "$out/default.txt")" = x86_64:16 ] && cases+=("3 1 -mno-avx512f")
for c in "${cases[@]}"; do
    read -r mr nv extra <<<"$c"
    name="tile_${mr}_${nv}${extra//[^a-z0-9]/_}"
    # shellcheck disable=SC2086  # extra is empty or one flag
    build "$name" $native $extra "-DMM_TILE_MR=$mr" "-DMM_TILE_NR_VECS=$nv"
    expect_warning "$out/$name.compile.log" "$mr" "$nv" "$extra"
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
# the tiles on either side of the register file's edge, with 2 vectors and with 1
if [ -n "$regs" ]; then
    for c in "$(((regs - 3) / 2)) 2" "$(((regs - 3) / 2 + 1)) 2" "$((regs - 2)) 1" "$((regs - 1)) 1"; do
        read -r mr nv <<<"$c"
        syntax "edge_${mr}_${nv}" $native "-DMM_TILE_MR=$mr" "-DMM_TILE_NR_VECS=$nv" ||
            { echo "-DMM_TILE_MR=$mr -DMM_TILE_NR_VECS=$nv does not compile ($out/edge_${mr}_${nv}.compile.log)"; exit 1; }
        expect_warning "$out/edge_${mr}_${nv}.compile.log" "$mr" "$nv" ""
    done
else
    echo "note: $(uname -m) with $(lanes_of "$out/default.txt")-float vectors: the register count is not checked here"
fi
# the knobs change nothing when they are not given
"$cc" -O2 -fopenmp $native -E -dM -x c gpt2/cpu_math.h 2>/dev/null | grep -q "define MM_TILE_MR" &&
    { echo "gpt2/cpu_math.h defines MM_TILE_MR itself: a build without the knob must keep the ISA's tile"; exit 1; }
echo "exercise 5: solved (tiles 3x1, 5x3, 7x2, 1x1, 16x1 vectors, two plain-C tiles and on AVX-512 an AVX2 3x1 pass; default $def_mr x $def_nr;" \
     "a tile of 0 stops the build; a tile of more than ${regs:-the} vector registers warns)"

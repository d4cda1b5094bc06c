#!/usr/bin/env bash
# Exercise 3 (README.md beside this file): the attention scale as a compile-time knob,
# -DATTN_SCALE=EXPR. Builds att_check.c with gpt2/cpu_layers.h three times: GPT-2's scale (no
# -D), 1.0f and 0.5f/hs; each build checks, at the scale it was built with, attention_scale (where
# every attention gets its scale), the forward and generation's attention against the cache
# against the definition, and the backward against finite differences. Run from the root of the tree.
set -uo pipefail
here=doc/exercises/03-attention-scale
out=build/exercises/03
mkdir -p "$out"
cc=${CC:-gcc}

# ATTN_SCALE for the layers (none: the default) | the same scale for the reference, in double
builds=(
    "1.0f|1.0"
    "0.5f/hs|0.5 / hs"
    "|1.0 / sqrt(hs)"
)
for b in "${builds[@]}"; do
    knob=${b%%|*} expect=${b#*|}
    flags=(-O1 -fopenmp -I. "-DEXPECTED_SCALE=$expect")
    what="the default build (no ATTN_SCALE)"
    if [ -n "$knob" ]; then flags+=("-DATTN_SCALE=$knob"); what="-DATTN_SCALE=$knob"; fi
    "$cc" "${flags[@]}" "$here/att_check.c" -o "$out/att_check" -lm >"$out/compile.log" 2>&1 || {
        echo "$here/att_check.c does not compile with $what ($out/compile.log):"; head -n 3 "$out/compile.log"; exit 1; }
    if ! OMP_NUM_THREADS=2 "$out/att_check" >"$out/att_check.txt" 2>&1; then
        echo "with $what:"; head -n 3 "$out/att_check.txt"; exit 1
    fi
done
echo "exercise 3: solved (attention_scale, the forward, generation's attention and the backward follow ATTN_SCALE," \
     "and its default is 1/sqrt(hs))"

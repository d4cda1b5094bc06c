#!/usr/bin/env bash
# infer.c's KV-cache path against train_cpu.c's full forward, on a random model (L=3 NH=4 C=64
# V=211 maxT=40, every parameter random): logits at every position within 1e-5 relative for a
# whole-sequence prefill, for prefill + single-token steps and for uneven chunks, the last two
# bit for bit the whole prefill's; in bf16 (-w bf16) the same, within 1e-2 of the full forward
# with its products in bf16 (the two attentions' float32 roundings differ, which bf16 can turn
# into a rounding of 2^-8 that the later layers carry) and bit for bit the prefill's, the pool's
# keys and values set to NaN before each sequence (a cached value a step reads but did not write,
# left there by the prefill before, would otherwise still give the right logits); greedy
# generation deterministic and equal to the full forward's argmax at each step; seeded sampling
# reproducible; top-k 1 = greedy; the top-k / top-p filter on hand-made and brute-force cases.
set -u
cd "$(dirname "$0")/.."
CC=${CC:-gcc}
CFLAGS=${CFLAGS:--O2 -fopenmp -march=native}
mkdir -p build
$CC $CFLAGS -o build/infer_check test/infer_check.c -lm || { echo "FAIL: infer_check does not build"; exit 1; }
./build/infer_check kv

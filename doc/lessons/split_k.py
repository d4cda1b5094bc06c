#!/usr/bin/env python3
"""Lesson 11: the same dot product in float32, summed in three orders, gives different bits.
One output element of a decode step's product: K = 768 products of an input row and a weight
column, added up (1) as gpt2/cpu_math.h does for every row whatever the batch: one chain of
multiply-adds per KC = 1024 block, the blocks added in turn (here one block: K < KC); (2) split-K, as a GPU library may
choose for a skinny product: four partial sums of 192 terms, added at the end; (3) as a
matrix-vector kernel may: 16 lanes, lane j summing the terms k = j mod 16, the lanes added in a
tree. Every step is rounded to float32 (a product of two float32 is exact in a double, so each
multiply-add is rounded once, as a fused multiply-add is, up to a rare double rounding)."""
import random
import struct

K, KC, ROWS = 768, 1024, 200


def f32(x):
    return struct.unpack('f', struct.pack('f', x))[0]


def bits(x):
    return struct.unpack('I', struct.pack('f', x))[0]


def chain(x, w, ks, acc=0.0):
    for k in ks:
        acc = f32(acc + x[k] * w[k])
    return acc


def kc_blocks(x, w):      # (1) the CPU kernel's order: a chain per KC block, then added into C
    c = 0.0
    for k0 in range(0, K, KC):
        c = f32(c + chain(x, w, range(k0, min(k0 + KC, K))))
    return c


def split_k(x, w, parts=4):  # (2) partial sums over K / parts terms each, added at the end
    n = K // parts
    c = 0.0
    for p in range(parts):
        c = f32(c + chain(x, w, range(p * n, (p + 1) * n)))
    return c


def lanes(x, w, n=16):    # (3) n lanes, lane j takes k = j, j+n, ..., then a tree of adds
    acc = [chain(x, w, range(j, K, n)) for j in range(n)]
    while len(acc) > 1:
        acc = [f32(acc[i] + acc[i + len(acc) // 2]) for i in range(len(acc) // 2)]
    return acc[0]


random.seed(10)
differ = [0, 0]
for r in range(ROWS):
    x = [f32(random.gauss(0, 1)) for _ in range(K)]
    w = [f32(random.gauss(0, 0.02)) for _ in range(K)]
    a, b, c = kc_blocks(x, w), split_k(x, w), lanes(x, w)
    differ[0] += bits(a) != bits(b)
    differ[1] += bits(a) != bits(c)
    if r == 0:
        for name, v in (("KC blocks", a), ("split-K 4", b), ("16 lanes ", c)):
            print(f"{name}  {v:+.9f}  bits {bits(v):08x}")
print(f"of {ROWS} random rows, split-K differs from the KC blocks in {differ[0]}, "
      f"16 lanes in {differ[1]}")

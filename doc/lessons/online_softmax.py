#!/usr/bin/env python3
"""Lesson 8: the online softmax equals the plain one. Attention output of one query row over n
keys, computed (1) plainly: all scores, their max, the softmax, the weighted sum; (2) online:
blocks of keys, a running max m, denominator l and unnormalised output a, rescaled when m grows."""
import math
import random

random.seed(7)
n, hs, block = 100, 8, 16
scores = [random.gauss(0, 3) for _ in range(n)]
values = [[random.gauss(0, 1) for _ in range(hs)] for _ in range(n)]

# (1) plain: needs every score at once
mx = max(scores)
w = [math.exp(s - mx) for s in scores]
plain = [sum(w[j] * values[j][i] for j in range(n)) / sum(w) for i in range(hs)]

# (2) online: one block of keys at a time
m, l, a = -math.inf, 0.0, [0.0] * hs
for k0 in range(0, n, block):
    blk = range(k0, min(k0 + block, n))
    m_new = max([m] + [scores[j] for j in blk])
    r = math.exp(m - m_new)          # rescale what was summed with the old maximum
    l *= r
    a = [x * r for x in a]
    for j in blk:
        p = math.exp(scores[j] - m_new)
        l += p
        a = [x + p * v for x, v in zip(a, values[j])]
    m = m_new
online = [x / l for x in a]

print("plain  ", " ".join(f"{x:+.6f}" for x in plain))
print("online ", " ".join(f"{x:+.6f}" for x in online))
print(f"largest difference {max(abs(p - o) for p, o in zip(plain, online)):.1e}; "
      f"lse = m + log(l) = {m + math.log(l):.6f}, plain {mx + math.log(sum(w)):.6f}")

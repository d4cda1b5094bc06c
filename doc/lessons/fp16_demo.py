#!/usr/bin/env python3
"""Lesson 7: why float16 training needs loss scaling and bf16 does not. Rounds numbers to
float16 (1 sign, 5 exponent, 10 mantissa bits: what CUDA's __float2half does, overflow to
infinity included), to bf16 (the same rounding as bf16.py) and to TF32 (float32's 8 exponent bits,
float16's 10 mantissa bits), and runs a small dynamic loss scaler."""
import math
import struct


def to_fp16(x):
    try:
        return struct.unpack('<e', struct.pack('<e', x))[0]   # round to nearest, ties to even
    except OverflowError:                                     # past 65504 + half a spacing
        return math.copysign(math.inf, x)


def f32_bits(x):
    return struct.unpack('<I', struct.pack('<f', x))[0]


def from_bits(b):
    return struct.unpack('<f', struct.pack('<I', b))[0]


def to_bf16(x):                        # keep 7 of float32's 23 mantissa bits, nearest, ties to even
    b = f32_bits(x)
    return from_bits(((b + 0x7FFF + ((b >> 16) & 1)) >> 16) << 16)


def to_tf32(x):                        # keep 10 of the 23, nearest, ties to even
    b = f32_bits(x)
    return from_bits(((b + 0xFFF + ((b >> 13) & 1)) >> 13) << 13)


print("float16: largest 65504, smallest normal 2^-14 =", f"{2**-14:.3g},", "smallest subnormal 2^-24 =",
      f"{2**-24:.3g}")
for x in [60000.0, 65504.0, 65520.0, 300.0 * 300.0]:
    print(f"  {x:>9g} -> float16 {to_fp16(x):g}")

print("gradients in float16, then with the loss scaled by S = 2^16 (unscaled in float32 after):")
S = 2.0**16
for g in [1e-3, 1e-5, 1e-7, 3e-8, 1e-8, 1e-9]:
    plain = to_fp16(g)
    scaled = to_fp16(g * S) / S
    print(f"  {g:7.0e}: float16 {plain:<9.4g} (relative error {abs(plain - g) / g:.1e})   "
          f"scaled {scaled:<9.4g} (error {abs(scaled - g) / g:.1e})   bf16 {to_bf16(g):.4g}")
print(f"  but a gradient of 2.0 times S is {to_fp16(2.0 * S):g} in float16: too large a scale overflows")

# Dynamic scaling as frameworks do it (PyTorch's GradScaler: start at 2^16, halve on inf or NaN and
# skip that step, double after growth_interval clean steps; its default interval is 2000, 3 here).
print("dynamic loss scaling (halve and skip on inf; double after 3 clean steps):")
scale, clean = 2.0**16, 0
for step, gmax in enumerate([0.5, 2.0, 0.7, 0.3, 0.2, 0.4, 0.3, 0.2, 0.1], start=1):
    used, scaled = scale, to_fp16(gmax * scale)
    if math.isinf(scaled):
        action = f"skip the update, halve the scale -> {scale / 2:g}"
        scale, clean = scale / 2, 0
    else:
        clean += 1
        action = "update with the gradients / scale"
        if clean == 3:
            action += f"; 3 clean steps: scale -> {scale * 2:g}"
            scale, clean = scale * 2, 0
    print(f"  step {step}: largest gradient {gmax:3.1f} x scale {used:>6g} = {scaled:>5g} in float16: {action}")

print("bf16 has float32's exponent: 1e-20 ->", f"{to_bf16(1e-20):.4g},", "1e20 ->", f"{to_bf16(1e20):.4g}")
print("the residual stream in bf16: 4.0 + 0.007 ->", to_bf16(4.0 + 0.007), "(spacing of bf16 at 4: 2^-5 = 0.03125)")
print("TF32 keeps float32's range and float16's digits:")
for x in [1.0 / 3.0, 1e-20, 1e20]:
    print(f"  {x:.8g}: float32 {from_bits(f32_bits(x)):.8g}  tf32 {to_tf32(x):.8g}  bf16 {to_bf16(x):.8g}  "
          f"float16 {to_fp16(x):.8g}")

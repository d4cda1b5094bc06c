#!/usr/bin/env python3
"""Lesson 7: what bf16 keeps of a float32. A bf16 is the top 16 bits of a float32 (sign, 8
exponent bits, 7 stored mantissa bits); rounding to it keeps the nearest such value, ties to the
even one, as CUDA's __float2bfloat16 does. Prints a few numbers before and after."""
import struct


def f32_bits(x):
    return struct.unpack('<I', struct.pack('<f', x))[0]


def to_bf16(x):
    b = f32_bits(x)
    b += 0x7FFF + ((b >> 16) & 1)            # round to nearest, ties to even (finite values)
    return struct.unpack('<f', struct.pack('<I', (b >> 16) << 16))[0]


for x in [1.0, 1.0 + 2**-8, 1.0 + 3 * 2**-8, 3.14159265, 0.1, 1e-30, 3e38, 1.0 + 1e-4, 1000.0 + 1.0]:
    y = to_bf16(x)
    print(f"{x:>14.8g}  float32 {f32_bits(x):08x}  bf16 {f32_bits(y) >> 16:04x} = {y:<14.8g} "
          f"relative error {abs(y - x) / abs(x):.1e}")
print(f"spacing of bf16 next to 1: 2^-7 = {2**-7}; an update of 1e-4 to a weight of 1.0 rounds back to "
      f"{to_bf16(1.0 + 1e-4)}")

// gpt2/random.h: random numbers that are the same on every machine: a seed names one run.

#ifndef GPT2_RANDOM_H
#define GPT2_RANDOM_H

#include <stdint.h>

// xorshift*: a 64-bit state, 32 random bits per call. The state must not be 0.
static inline uint32_t random_u32(uint64_t* state) {
    *state ^= *state >> 12;
    *state ^= *state << 25;
    *state ^= *state >> 27;
    return (uint32_t)((*state * 0x2545F4914F6CDD1Dull) >> 32);
}

// Uniform in [0, 1), from 24 random bits (a float's mantissa).
static inline float random_f32(uint64_t* state) {
    return (float)(random_u32(state) >> 8) / 16777216.0f;
}

// A nonzero seed mixed from three integers (splitmix64's finaliser), for independent streams.
static inline uint64_t seed_mix(uint64_t a, uint64_t b, uint64_t c) {
    uint64_t z = a * 0x9E3779B97F4A7C15ull + b * 0xBF58476D1CE4E5B9ull + c * 0x94D049BB133111EBull + 1;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return z ? z : 1;
}

// Draws an index from probs[0..n-1] (summing to 1) with a uniform coin in [0, 1).
static inline int sample_mult(const float* probs, int n, float coin) {
    float cdf = 0.0f;
    for (int i = 0; i < n; i++) {
        cdf += probs[i];
        if (coin < cdf) return i;
    }
    return n - 1;  // rounding: the cdf ended just under 1
}

#endif // GPT2_RANDOM_H

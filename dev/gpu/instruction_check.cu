// dev/gpu/instruction_check.cu: the instructions that the bf16 matrix products are built from
// (gpt2/gpu/matmul_bf16.cuh, section "tensor-core instructions", and gpt2/gpu/hopper.cuh), each
// against a scalar definition written here from the PTX ISA:
//   bf16        float -> bf16 -> float: round to nearest, ties to even, overflow to infinity
//   mma         mma.sync m16n8k16, bf16 inputs, float32 accumulation: every lane's fragments
//   ldmatrix    ldmatrix x4 and x4.trans: every lane's four registers
//   cp.async    16-byte copies in commit groups, zero fill, wait_group 1 and 0
//   descriptor  wgmma_descriptor's bits, against values worked out by hand
//   tma         2D boxes with the 128-byte swizzle: every byte, edges and negative coordinates zero
//   mbarrier    count and expect_tx over four phases: try_wait of both parities at each step
//   wgmma       m64nNk16 for N = 64, 128, 256, all four transposes, scale_d 0 and 1, operands by TMA
//   wgmma_rs    the same with A from registers, for N = 64 and 128, B K-major and N-major
// The last four need compute capability 9.0 (wgmma an sm_90a build): elsewhere they print
// "skipped".
// On a GPU this checks the wrappers and our reading of the ISA; on the CPU emulator
// (dev/emu/cuda_emu.h) it checks the emulator's versions of the same functions, which every emulated
// kernel that uses them relies on. The elements of each input matrix are distinct (random, or
// distinct integers), so that one taken from the wrong lane, register or half shows.
//
//   nvcc -O3 -gencode arch=compute_90a,code=sm_90a -std=c++17 -o build/instruction_check dev/gpu/instruction_check.cu
//   python3 dev/emu/cuda_emu.py dev/gpu/instruction_check.cu build/emu/instruction_check.cpp   then g++ as
//   for build/emu/gpu_check (Makefile), and run build/emu/instruction_check
//
// Prints one line per instruction, "ok" or its first mismatches; exit status 1 on any mismatch.

#include "../../gpt2/random.h"
#include "../../gpt2/gpu/matmul_bf16.cuh"  // the wrappers; with cuda_utils.cuh: bf16, cuda_device_init, cuda_check
#include "../../gpt2/gpu/hopper.cuh"       // wgmma, TMA, mbarrier
#include <float.h>

// ---------- helpers ----------

static uint64_t rng_state = 4242;
static const int MAX_SHOWN = 5;  // mismatches printed per check; all are counted

static void* to_device(const void* host, size_t bytes) {
    void* d;
    cuda_check(cudaMalloc(&d, bytes));
    cuda_check(cudaMemcpy(d, host, bytes, cudaMemcpyHostToDevice));
    return d;
}
static void* device_alloc(size_t bytes) {
    void* d;
    cuda_check(cudaMalloc(&d, bytes));
    return d;
}
static void to_host(void* host, const void* d, size_t bytes) {
    cuda_check(cudaMemcpy(host, d, bytes, cudaMemcpyDeviceToHost));
}
static uint32_t float_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}
static float bits_float(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}
static int report(const char* name, int bad, const char* what) {
    if (bad == 0) printf("instructions: %s ok (%s)\n", name, what);
    else printf("instructions: %s FAILED, %d mismatches (%s)\n", name, bad, what);
    return bad;
}

// ---------- bf16 conversion ----------

__global__ void bf16_roundtrip_kernel(unsigned short* bits, float* back, const float* in, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    bf16 h = __float2bfloat16(in[i]);
    bits[i] = __bfloat16_as_ushort(h);
    back[i] = __bfloat162float(h);
}

// float -> bf16 by value, as IEEE 754 rounds to nearest. bf16 has float32's exponent range and 8
// significant bits, so between 2^e and 2^(e+1) its values are the multiples of 2^(e-7), and
// below 2^-126 (subnormal) the multiples of 2^-133. x lies between two such neighbours: the nearer
// wins, a tie goes to the even multiple (last mantissa bit 0), and a result of 2^128 or more is
// beyond the largest bf16, so infinity. Every step is exact in double. NaN stays NaN.
static double bf16_reference(float x) {
    if (isnan(x)) return NAN;
    if (isinf(x)) return x;
    double ax = fabs((double)x);
    int e = ax == 0.0 ? -126 : ilogb(ax);
    double ulp = ldexp(1.0, (e < -126 ? -126 : e) - 7);
    double below = floor(ax / ulp) * ulp, above = below + ulp;
    double r;
    if (ax - below != above - ax) r = ax - below < above - ax ? below : above;
    else r = fmod(below / ulp, 2.0) == 0.0 ? below : above;
    if (r >= ldexp(1.0, 128)) r = INFINITY;
    return signbit(x) ? -r : r;
}

static int check_bf16_conversion(void) {
    // Every bf16 (every upper half) with six lower halves: exact, just above, just below and at
    // the tie, and just above it, and the largest (so every NaN, infinity, zero, subnormal, and
    // ties with even and odd kept parts, and overflow to infinity, e.g. 3.4e38 and FLT_MAX), then
    // random bit patterns and a few named values.
    const uint32_t lows[] = {0x0000, 0x0001, 0x7fff, 0x8000, 0x8001, 0xffff};
    const int nlows = sizeof(lows) / sizeof(lows[0]), nrandom = 65536;
    const float named[] = {3.4e38f, -3.4e38f, FLT_MAX, -FLT_MAX, FLT_MIN, 1.0f, 1.00390625f /* 1 + 2^-8, tie, kept even */,
                           1.01171875f /* 1 + 3 2^-8, tie, kept odd */, 0.1f, -2.5e-40f};
    const int nnamed = sizeof(named) / sizeof(named[0]);
    int n = 65536 * nlows + nrandom + nnamed;
    float* x = (float*)malloc_check((size_t)n * sizeof(float));
    int m = 0;
    for (uint32_t hi = 0; hi < 65536; hi++)
        for (int l = 0; l < nlows; l++) x[m++] = bits_float(hi << 16 | lows[l]);
    for (int i = 0; i < nrandom; i++) x[m++] = bits_float(random_u32(&rng_state));
    for (int i = 0; i < nnamed; i++) x[m++] = named[i];

    float* d_in = (float*)to_device(x, (size_t)n * sizeof(float));
    unsigned short* d_bits = (unsigned short*)device_alloc((size_t)n * sizeof(unsigned short));
    float* d_back = (float*)device_alloc((size_t)n * sizeof(float));
    bf16_roundtrip_kernel<<<ceil_div(n, 256), 256>>>(d_bits, d_back, d_in, n);
    launch_check(bf16_roundtrip_kernel);
    unsigned short* bits = (unsigned short*)malloc_check((size_t)n * sizeof(unsigned short));
    float* back = (float*)malloc_check((size_t)n * sizeof(float));
    to_host(bits, d_bits, (size_t)n * sizeof(unsigned short));
    to_host(back, d_back, (size_t)n * sizeof(float));

    int bad = 0;
    for (int i = 0; i < n; i++) {
        double want = bf16_reference(x[i]);
        bool ok;
        uint32_t want_bits = 0;
        if (isnan(want)) {  // any NaN: exponent all ones, mantissa not zero
            ok = (bits[i] & 0x7f80) == 0x7f80 && (bits[i] & 0x7f) != 0 && isnan(back[i]);
        } else {
            want_bits = float_bits((float)want);  // a bf16 value: exact as a float, low half zero
            ok = bits[i] == want_bits >> 16 && float_bits(back[i]) == want_bits;
        }
        if (!ok && bad++ < MAX_SHOWN) {
            printf("instructions: bf16 mismatch: %.9g (0x%08x) -> 0x%04x, back %.9g; want 0x%04x (%.9g)\n", x[i],
                   float_bits(x[i]), bits[i], back[i], want_bits >> 16, want);
        }
    }
    cuda_check(cudaFree(d_in));
    cuda_check(cudaFree(d_bits));
    cuda_check(cudaFree(d_back));
    free(x);
    free(bits);
    free(back);
    char what[160];
    snprintf(what, sizeof what, "%d floats: every bf16 with 6 dropped halves incl. ties, NaN, inf, subnormals, "
             "overflow; %d random", n, nrandom);
    return report("bf16", bad, what);
}

// ---------- mma.sync m16n8k16 ----------

// Two bf16 in one register: the lower-numbered element in the low half.
__device__ uint32_t pack_bf16(bf16 lo, bf16 hi) {
    return (uint32_t)__bfloat16_as_ushort(lo) | (uint32_t)__bfloat16_as_ushort(hi) << 16;
}

// One warp: D = C + sum over p < count of A_p B_p, one mma per p. A_p (16x16) at a + 256p and
// B_p (16x8) at b + 128p, C and D (16x8), all row-major. Each lane loads its fragments straight
// from global memory by the PTX ISA's layout (g = lane / 4, q = lane % 4).
__global__ void mma_kernel(float* dout, const bf16* a, const bf16* b, const float* c, int count) {
    int lane = threadIdx.x, g = lane / 4, q = lane % 4;
    float d[4];
    for (int i = 0; i < 4; i++) d[i] = c[(g + 8 * (i / 2)) * 8 + 2 * q + i % 2];  // d[i]: row g + 8(i/2), column 2q + i%2
    for (int p = 0; p < count; p++) {
        const bf16* A = a + 256 * p;
        const bf16* B = b + 128 * p;
        uint32_t afrag[4], bfrag[2];
        for (int i = 0; i < 4; i++) {  // a[i]: row g + 8(i%2), columns 2q + 8(i/2) and the next
            int r = g + 8 * (i % 2), k = 2 * q + 8 * (i / 2);
            afrag[i] = pack_bf16(A[r * 16 + k], A[r * 16 + k + 1]);
        }
        for (int i = 0; i < 2; i++) {  // b[i]: rows 2q + 8i and the next, column g
            int k = 2 * q + 8 * i;
            bfrag[i] = pack_bf16(B[k * 8 + g], B[(k + 1) * 8 + g]);
        }
        mma_bf16_16816(d, afrag, bfrag);
    }
    for (int i = 0; i < 4; i++) dout[(g + 8 * (i / 2)) * 8 + 2 * q + i % 2] = d[i];
}

// kind 0: A, B, C uniform in [-1, 1] (A and B rounded to bf16). kind 1: distinct integers, exact
// in bf16 (at most 8 significant bits) and every sum exact in float32 (below 2^24):
// A_p[r][k] = (16r + k + 37p) % 256 - 128, B_p[k][n] = (8k + n + 5p) % 128 - 64, C[r][n] = r - n.
static int mma_case(int count, int kind, const char* what) {
    bf16* a = (bf16*)malloc_check(256 * (size_t)count * sizeof(bf16));
    bf16* b = (bf16*)malloc_check(128 * (size_t)count * sizeof(bf16));
    float c[128], d[128];
    for (int i = 0; i < 256 * count; i++) {
        int p = i / 256, r = i % 256 / 16, k = i % 16;
        a[i] = __float2bfloat16(kind == 0 ? 2.0f * random_f32(&rng_state) - 1.0f : (float)((16 * r + k + 37 * p) % 256 - 128));
    }
    for (int i = 0; i < 128 * count; i++) {
        int p = i / 128, k = i % 128 / 8, n = i % 8;
        b[i] = __float2bfloat16(kind == 0 ? 2.0f * random_f32(&rng_state) - 1.0f : (float)((8 * k + n + 5 * p) % 128 - 64));
    }
    for (int i = 0; i < 128; i++) c[i] = kind == 0 ? 2.0f * random_f32(&rng_state) - 1.0f : (float)(i / 8 - i % 8);
    bf16* d_a = (bf16*)to_device(a, 256 * (size_t)count * sizeof(bf16));
    bf16* d_b = (bf16*)to_device(b, 128 * (size_t)count * sizeof(bf16));
    float* d_c = (float*)to_device(c, sizeof(c));
    float* d_d = (float*)device_alloc(sizeof(d));
    cuda_check(cudaMemset(d_d, 0xff, sizeof(d)));  // NaN: an output never written fails
    mma_kernel<<<1, 32>>>(d_d, d_a, d_b, d_c, count);
    launch_check(mma_kernel);
    to_host(d, d_d, sizeof(d));
    // The products of two bf16 are exact in float32; the sum of its 16 * count + 1 terms is rounded,
    // in an order the ISA leaves open: an error of some float32 epsilons (6e-8) times the sum of
    // the terms' magnitudes, where a misplaced element is off by the size of a term.
    int bad = 0;
    for (int r = 0; r < 16; r++)
        for (int n = 0; n < 8; n++) {
            double want = c[r * 8 + n], size = fabs(want);
            for (int p = 0; p < count; p++)
                for (int k = 0; k < 16; k++) {
                    double term = (double)__bfloat162float(a[256 * p + r * 16 + k]) *
                                  (double)__bfloat162float(b[128 * p + k * 8 + n]);
                    want += term;
                    size += fabs(term);
                }
            float got = d[r * 8 + n];
            if (!(fabs(got - want) <= 1e-5 * size + 1e-30) && bad++ < MAX_SHOWN) {
                printf("instructions: mma mismatch (%s): D[%d][%d] = %.9g, want %.9g\n", what, r, n, got, want);
            }
        }
    cuda_check(cudaFree(d_a));
    cuda_check(cudaFree(d_b));
    cuda_check(cudaFree(d_c));
    cuda_check(cudaFree(d_d));
    free(a);
    free(b);
    return bad;
}

static int check_mma(void) {
    int bad = mma_case(1, 0, "one mma, random");
    bad += mma_case(2, 0, "two mmas accumulating, random");
    bad += mma_case(1, 1, "one mma, integers, exact");
    bad += mma_case(3, 1, "three mmas accumulating, integers, exact");
    return report("mma", bad, "16x16 by 16x8 bf16, float32 C: one mma and 2, 3 accumulating, random and exact integers");
}

// ---------- ldmatrix ----------

#define LDM_ROWS 16
#define LDM_STRIDE 40  // bf16 per tile row: 32 columns and 8 of padding (80 bytes, 16-byte aligned rows)

// Where row j of matrix i starts in the tile: the four 8x8 matrices at (8, 16), (0, 0), (8, 8),
// (0, 24), and each matrix's rows in the order 0, 3, 6, 1, 4, 7, 2, 5 (3j mod 8), since every lane
// gives the address of its own row.
static __host__ __device__ int ldm_offset(int i, int j) {
    const int r0[4] = {8, 0, 8, 0}, c0[4] = {16, 0, 8, 24};
    return (r0[i] + 3 * j % 8) * LDM_STRIDE + c0[i];
}

// One warp: the tile to shared memory, then ldmatrix x4 and x4.trans, lane l giving the address of
// row l % 8 of matrix l / 8; every lane's four registers out.
__global__ void ldmatrix_kernel(uint32_t* out, uint32_t* out_trans, const unsigned short* tile) {
    __shared__ __align__(16) unsigned short s[LDM_ROWS * LDM_STRIDE];
    int lane = threadIdx.x;
    for (int i = lane; i < LDM_ROWS * LDM_STRIDE; i += 32) s[i] = tile[i];
    __syncwarp();
    const unsigned short* row = s + ldm_offset(lane / 8, lane % 8);
    uint32_t r[4];
    ldmatrix_x4(r, row);
    for (int i = 0; i < 4; i++) out[lane * 4 + i] = r[i];
    ldmatrix_x4_trans(r, row);
    for (int i = 0; i < 4; i++) out_trans[lane * 4 + i] = r[i];
}

static int check_ldmatrix(void) {
    unsigned short tile[LDM_ROWS * LDM_STRIDE];
    // distinct 16-bit values: multiplying by an odd number is a permutation modulo 2^16
    for (int i = 0; i < LDM_ROWS * LDM_STRIDE; i++) tile[i] = (unsigned short)(40503u * (unsigned)i + 12345u);
    unsigned short* d_tile = (unsigned short*)to_device(tile, sizeof(tile));
    uint32_t* d_out = (uint32_t*)device_alloc(2 * 128 * sizeof(uint32_t));
    ldmatrix_kernel<<<1, 32>>>(d_out, d_out + 128, d_tile);
    launch_check(ldmatrix_kernel);
    uint32_t out[2 * 128];
    to_host(out, d_out, sizeof(out));
    int bad = 0;
    for (int lane = 0; lane < 32; lane++)
        for (int i = 0; i < 4; i++) {
            int g = lane / 4, q = lane % 4;
            // x4: row g of matrix i, columns 2q, 2q+1; .trans: column g of rows 2q, 2q+1
            uint32_t want = tile[ldm_offset(i, g) + 2 * q] | (uint32_t)tile[ldm_offset(i, g) + 2 * q + 1] << 16;
            uint32_t want_trans = tile[ldm_offset(i, 2 * q) + g] | (uint32_t)tile[ldm_offset(i, 2 * q + 1) + g] << 16;
            for (int trans = 0; trans < 2; trans++) {
                uint32_t got = out[trans * 128 + lane * 4 + i], w = trans ? want_trans : want;
                if (got != w && bad++ < MAX_SHOWN) {
                    printf("instructions: ldmatrix%s mismatch: lane %d r[%d] = 0x%08x, want 0x%08x\n",
                           trans ? "_trans" : "", lane, i, got, w);
                }
            }
        }
    cuda_check(cudaFree(d_tile));
    cuda_check(cudaFree(d_out));
    return report("ldmatrix", bad, "x4 and x4.trans, every lane's registers, four matrices and their rows in shuffled order");
}

// ---------- cp.async ----------

#define CPA_THREADS 128
#define CPA_COLS 32    // floats per tile row: 8 copies of 16 bytes
#define CPA_ROWS 64    // 512 copies, 4 per thread
#define CPA_VALID 50   // rows of the source: the tile's rows from here on are zero-filled (past a matrix's edge)
#define CPA_STALE -7.0f  // shared memory before the copies; not a value of the source

// Copy k of thread t: the 16 bytes at chunk t + CPA_THREADS k of the tile (row-major).
__device__ void cpa_issue(float* tile, const float* src, int k) {
    int chunk = threadIdx.x + CPA_THREADS * k, row = chunk / 8, col = chunk % 8 * 4;
    bool valid = row < CPA_VALID;
    cp_async16(tile + row * CPA_COLS + col, src + (valid ? row * CPA_COLS + col : 0), valid ? 16 : 0);
}
__device__ int cpa_stale(const float* tile, int k) {  // 1 if copy k has not landed
    int chunk = threadIdx.x + CPA_THREADS * k;
    return tile[chunk * 4] == CPA_STALE;
}

// One block copies the (CPA_ROWS, CPA_COLS) tile of src (CPA_VALID rows, then zeros) to shared
// memory, then out. Each thread's copies k = 0..3 form three commit groups: {0}, {1, 2}, {3}.
// After the first two groups and cp_async_wait<1>, group 0 must be complete: the thread reads
// copy 0 back into early (only its own copy: another thread's would need a barrier too).
// emu_bad counts, on the emulator only, copies that landed at the wrong time: after the wait that
// retires their group, or (in its default CUDA_EMU_ASYNC=wait, which performs each copy at that
// wait) before it. A GPU may land a copy at any time in between, so there a stale read is a race,
// not a definite result; the emulator's race detector reports these reads as races.
__global__ void cp_async_kernel(float* out, float* early, int* emu_bad, const float* src) {
    __shared__ __align__(16) float tile[CPA_ROWS * CPA_COLS];
    int t = threadIdx.x, bad = 0;
    for (int k = 0; k < 4; k++)
        for (int j = 0; j < 4; j++) tile[(t + CPA_THREADS * k) * 4 + j] = CPA_STALE;
    cpa_issue(tile, src, 0);
    cp_async_commit();
#ifdef CUDA_EMU
    bool at_wait = emu_cfg.async == EMU_AT_WAIT;  // CUDA_EMU_ASYNC=issue or random lands copies sooner
    bad += at_wait && !cpa_stale(tile, 0);        // committed, not waited for
#endif
    cpa_issue(tile, src, 1);
    cpa_issue(tile, src, 2);
    cp_async_commit();
    cp_async_wait<1>();
    for (int j = 0; j < 4; j++) early[t * 4 + j] = tile[t * 4 + j];
#ifdef CUDA_EMU
    bad += at_wait ? !cpa_stale(tile, 1) + !cpa_stale(tile, 2) : 0;  // the newest group may still be in flight
    cpa_issue(tile, src, 3);
    cp_async_wait<0>();  // completes group 1; copy 3 is in no group yet, so not waited for
    bad += cpa_stale(tile, 1) + cpa_stale(tile, 2) + (at_wait && !cpa_stale(tile, 3));
#else
    cpa_issue(tile, src, 3);
#endif
    cp_async_commit();
    cp_async_wait<0>();
    __syncthreads();  // every thread's copies are complete: now all of the tile is visible
    for (int i = t; i < CPA_ROWS * CPA_COLS; i += CPA_THREADS) out[i] = tile[i];
    emu_bad[t] = bad;
}

static int check_cp_async(void) {
    float src[CPA_VALID * CPA_COLS], out[CPA_ROWS * CPA_COLS], early[CPA_THREADS * 4];
    int emu_bad[CPA_THREADS];
    for (int i = 0; i < CPA_VALID * CPA_COLS; i++) src[i] = 1.0f + random_f32(&rng_state);  // never 0 or CPA_STALE
    float* d_src = (float*)to_device(src, sizeof(src));  // exactly the valid rows: a zero fill that reads faults
    float* d_out = (float*)device_alloc(sizeof(out));
    float* d_early = (float*)device_alloc(sizeof(early));
    int* d_emu_bad = (int*)device_alloc(sizeof(emu_bad));
    cp_async_kernel<<<1, CPA_THREADS>>>(d_out, d_early, d_emu_bad, d_src);
    launch_check(cp_async_kernel);
    to_host(out, d_out, sizeof(out));
    to_host(early, d_early, sizeof(early));
    to_host(emu_bad, d_emu_bad, sizeof(emu_bad));
    int bad = 0;
    for (int i = 0; i < CPA_ROWS * CPA_COLS; i++) {
        float want = i / CPA_COLS < CPA_VALID ? src[i] : 0.0f;
        if (float_bits(out[i]) != float_bits(want) && bad++ < MAX_SHOWN) {
            printf("instructions: cp_async mismatch: tile[%d][%d] = %.9g after wait<0>, want %.9g\n", i / CPA_COLS,
                   i % CPA_COLS, out[i], want);
        }
    }
    for (int i = 0; i < CPA_THREADS * 4; i++) {  // copy 0 of thread t is chunk t: floats 4t..4t+3
        float want = i / CPA_COLS < CPA_VALID ? src[i] : 0.0f;
        if (float_bits(early[i]) != float_bits(want) && bad++ < MAX_SHOWN) {
            printf("instructions: cp_async mismatch: thread %d after wait<1> reads %.9g of group 0, want %.9g\n",
                   i / 4, early[i], want);
        }
    }
    for (int t = 0; t < CPA_THREADS; t++) {
        if (emu_bad[t] != 0 && bad++ < MAX_SHOWN) {
            printf("instructions: cp_async mismatch: thread %d: %d copies landed before the wait that retires "
                   "them, or not at it\n", t, emu_bad[t]);
        }
    }
    cuda_check(cudaFree(d_src));
    cuda_check(cudaFree(d_out));
    cuda_check(cudaFree(d_early));
    cuda_check(cudaFree(d_emu_bad));
    return report("cp_async", bad,
#ifdef CUDA_EMU
                  "64x32 tile, 3 commit groups, 14 zero-filled rows, wait<1> then wait<0>; emulator: each copy lands at its wait"
#else
                  "64x32 tile, 3 commit groups, 14 zero-filled rows, wait<1> then wait<0>"
#endif
    );
}

// ---------- Hopper: wgmma descriptors, TMA, mbarrier, wgmma ----------

// Whether this device runs the Hopper instructions (sm_90; wgmma needs the sm_90a build).
static bool hopper_device(void) { return cuda_device.prop.major == 9 && cuda_device.prop.minor == 0; }
static int hopper_skipped(const char* name) {
    printf("instructions: %s skipped (compute capability %d.%d)\n", name, cuda_device.prop.major, cuda_device.prop.minor);
    return 0;
}
// The first 1024-byte aligned byte of shared memory at or after p (the 128-byte swizzle's unit).
__device__ unsigned char* align1024(unsigned char* p) {
    return p + (1024 - smem_address(p) % 1024) % 1024;
}

__global__ void descriptor_kernel(uint64_t* out) {
    out[0] = wgmma_descriptor(0x1000, 16, 1024, WGMMA_SWIZZLE_128B);
    out[1] = wgmma_descriptor(0x3fff0, 8192, 64, WGMMA_SWIZZLE_64B);
    out[2] = wgmma_descriptor(0x41230, 64, 256, WGMMA_SWIZZLE_32B);  // bit 18 of the address dropped
}

// The PTX ISA's matrix descriptor: address >> 4 in bits 0-13, LBO >> 4 in 16-29, SBO >> 4 in 32-45,
// the layout in 62-63 (1: 128B, 2: 64B, 3: 32B swizzle), worked out by hand.
static int check_descriptor(void) {
    const uint64_t want[3] = {0x4000004000010100ull, 0x8000000402003fffull, 0xc000001000040123ull};
    uint64_t* d_out = (uint64_t*)device_alloc(sizeof(want));
    descriptor_kernel<<<1, 1>>>(d_out);
    launch_check(descriptor_kernel);
    uint64_t got[3];
    to_host(got, d_out, sizeof(got));
    int bad = 0;
    for (int i = 0; i < 3; i++)
        if (got[i] != want[i] && bad++ < MAX_SHOWN)
            printf("instructions: descriptor mismatch: case %d = 0x%016llx, want 0x%016llx\n", i,
                   (unsigned long long)got[i], (unsigned long long)want[i]);
    cuda_check(cudaFree(d_out));
    return report("descriptor", bad, "wgmma_descriptor's bits: address, LBO, SBO, each swizzle, an address past 18 bits");
}

// TMA: block i loads the box at coords[2i] (column), coords[2i+1] (row) of the map into shared
// memory, waits on the mbarrier, and writes the box's raw bytes out.
__global__ void tma_kernel(unsigned char* out, const __grid_constant__ CUtensorMap map, const int* coords, int box_bytes) {
    extern __shared__ __align__(1024) unsigned char tma_smem[];
    __shared__ __align__(8) uint64_t bar;
    unsigned char* tile = align1024(tma_smem);
    if (threadIdx.x == 0) {
        mbarrier_init(&bar, 1);
        mbarrier_init_fence();
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        mbarrier_arrive_expect_tx(&bar, box_bytes);
        tma_load_2d(tile, &map, coords[2 * blockIdx.x], coords[2 * blockIdx.x + 1], &bar);
    }
    mbarrier_wait(&bar, 0);
    for (int i = threadIdx.x; i < box_bytes; i += blockDim.x) out[(size_t)blockIdx.x * box_bytes + i] = tile[i];
}

// Where the 128-byte swizzle puts byte b of a box (rows packed, from a 1024-byte aligned start):
// its 16-byte chunk (bits 4-6) XOR its 128-byte row's index within 1024 bytes (bits 7-9). For a
// 64-column box: element (r, c) at r * 128 + ((2c / 16) ^ (r % 8)) * 16 + 2c % 16.
static size_t swizzle128(size_t b) { return b ^ ((b >> 7) & 7) << 4; }

#define TMA_ROWS 100  // not a multiple of the boxes
#define TMA_COLS 136
#define TMA_LD 144    // elements from row to row (288 bytes: a multiple of 16)

static int tma_case(const unsigned short* m, const bf16* d_m, int box_rows, int box_cols, const int* coords, int n) {
    CUtensorMap map;
    if (!tensor_map_bf16(&map, d_m, TMA_ROWS, TMA_COLS, TMA_LD, box_rows, box_cols)) {
        printf("instructions: tma: tensor_map_bf16 refused a %dx%d box\n", box_rows, box_cols);
        return 1;
    }
    int box_bytes = box_rows * box_cols * 2;
    int* d_coords = (int*)to_device(coords, 2 * n * sizeof(int));
    unsigned char* d_out = (unsigned char*)device_alloc((size_t)n * box_bytes);
    tma_kernel<<<n, 64, box_bytes + 1024>>>(d_out, map, d_coords, box_bytes);
    launch_check(tma_kernel);
    unsigned char* out = (unsigned char*)malloc_check((size_t)n * box_bytes);
    to_host(out, d_out, (size_t)n * box_bytes);
    int bad = 0;
    for (int i = 0; i < n; i++)
        for (int r = 0; r < box_rows; r++)
            for (int c = 0; c < box_cols; c++) {
                int x = coords[2 * i] + c, y = coords[2 * i + 1] + r;
                unsigned short want = x >= 0 && x < TMA_COLS && y >= 0 && y < TMA_ROWS ? m[y * TMA_LD + x] : 0;
                size_t at = (size_t)i * box_bytes + swizzle128((size_t)(r * box_cols + c) * 2);
                unsigned short got = (unsigned short)(out[at] | out[at + 1] << 8);
                if (got != want && bad++ < MAX_SHOWN)
                    printf("instructions: tma mismatch: %dx%d box at (%d, %d), element (%d, %d) = 0x%04x, want 0x%04x\n",
                           box_rows, box_cols, coords[2 * i], coords[2 * i + 1], r, c, got, want);
            }
    cuda_check(cudaFree(d_coords));
    cuda_check(cudaFree(d_out));
    free(out);
    return bad;
}

static int check_tma(void) {
    if (!hopper_device()) return hopper_skipped("tma");
    // distinct nonzero 16-bit patterns (raw bits: TMA copies bytes), so a zero fill shows
    unsigned short* m = (unsigned short*)malloc_check(TMA_ROWS * TMA_LD * sizeof(unsigned short));
    for (int i = 0; i < TMA_ROWS * TMA_LD; i++) m[i] = (unsigned short)(40503u * (unsigned)i + 12345u) | 1;
    bf16* d_m = (bf16*)to_device(m, TMA_ROWS * TMA_LD * sizeof(unsigned short));
    // inside; over the right edge, the bottom, both; at negative coordinates; wholly outside
    const int big[] = {0, 0, 64, 0, 72, 0, 0, 64, 100, 70, -8, -3, -64, 40, 40, -60, 136, 100, -64, -64};
    const int small[] = {8, 5, 120, 97, -24, 90, 131, -7};
    int bad = tma_case(m, d_m, 64, 64, big, 10) + tma_case(m, d_m, 8, 32, small, 4);
    cuda_check(cudaFree(d_m));
    free(m);
    return report("tma", bad, "100x136 bf16, 64x64 and 8x32 boxes, 128B swizzle, over every edge, negative and outside");
}

// mbarrier: count 3 (threads 0, 32, 33 arrive), thread 0 announces two 64-byte copies with
// expect_tx and issues one, then the other; thread 64 records both parities' try_wait after each
// step, for four phases (parities 0, 1, 0, 1). out[(5p + s) * 2 + parity].
#define MB_STEPS 5
#define MB_PHASES 4
__global__ void mbarrier_kernel(int* out, const __grid_constant__ CUtensorMap map) {
    extern __shared__ __align__(1024) unsigned char mb_smem[];
    __shared__ __align__(8) uint64_t bar;
    unsigned char* tile = align1024(mb_smem);
    int t = threadIdx.x;
    if (t == 0) {
        mbarrier_init(&bar, 3);
        mbarrier_init_fence();
    }
    __syncthreads();
    for (int p = 0; p < MB_PHASES; p++)
        for (int s = 0; s < MB_STEPS; s++) {
            if (s == 1 && t == 0) {
                mbarrier_arrive_expect_tx(&bar, 2 * 64);
                tma_load_2d(tile, &map, 0, 0, &bar);
            }
            if (s == 2 && t == 32) mbarrier_arrive(&bar);
            if (s == 3 && t == 33) mbarrier_arrive(&bar);
            if (s == 4 && t == 0) tma_load_2d(tile + 1024, &map, 8, 4, &bar);
            if (t == 64) {
                if (s == 4) mbarrier_wait(&bar, p & 1);  // its copy may land at any time: wait for it
                out[(p * MB_STEPS + s) * 2] = mbarrier_try_wait(&bar, 0);
                out[(p * MB_STEPS + s) * 2 + 1] = mbarrier_try_wait(&bar, 1);
            }
            __syncthreads();
        }
}

static int check_mbarrier(void) {
    if (!hopper_device()) return hopper_skipped("mbarrier");
    unsigned short m[TMA_ROWS * TMA_LD] = {0};
    bf16* d_m = (bf16*)to_device(m, sizeof(m));
    CUtensorMap map;
    if (!tensor_map_bf16(&map, d_m, TMA_ROWS, TMA_COLS, TMA_LD, 4, 8)) {  // 4 x 8 bf16: 64 bytes
        printf("instructions: mbarrier: tensor_map_bf16 refused a 4x8 box\n");
        return report("mbarrier", 1, "tensor map");
    }
    int out[MB_PHASES * MB_STEPS * 2];
    int* d_out = (int*)device_alloc(sizeof(out));
    mbarrier_kernel<<<1, 96, 3 * 1024>>>(d_out, map);
    launch_check(mbarrier_kernel);
    to_host(out, d_out, sizeof(out));
    int bad = 0;
    for (int p = 0; p < MB_PHASES; p++)
        for (int s = 0; s < MB_STEPS; s++) {
            int completed = s == 4 ? p + 1 : p;  // phases completed by then
            for (int parity = 0; parity < 2; parity++) {
                int want = (completed & 1) != parity, got = out[(p * MB_STEPS + s) * 2 + parity];
                if (got != want && bad++ < MAX_SHOWN)
                    printf("instructions: mbarrier mismatch: phase %d step %d: try_wait(parity %d) = %d, want %d\n", p, s,
                           parity, got, want);
            }
        }
    cuda_check(cudaFree(d_m));
    cuda_check(cudaFree(d_out));
    return report("mbarrier", bad, "count 3 and expect_tx of two copies, four phases: try_wait of both parities at each step");
}

// wgmma: one warpgroup computes D (64 x N) = A (64 x WG_K) B (WG_K x N) + (scale_d ? C : 0) as
// WG_K / 16 wgmmas in two commit groups, A and B brought by TMA in 64-deep k tiles, 128B swizzle:
//   K-major (TRANS 0): a tile is R rows (m or n) of 64 k, 128 bytes each; 8-row groups SBO = 1024
//     apart; the k16 step s starts 32 s bytes in
//   MN-major (TRANS 1): a tile is 64 k rows of R, in strips of 64 (8 KiB each, LBO = 8192); 8 k
//     rows SBO = 1024 apart; the k16 step s starts 2048 s bytes in
// Global memory: A as 64 x WG_K (K-major) or WG_K x 64; B as N x WG_K (B^T, K-major) or WG_K x N.
#define WG_K 128
__device__ uint64_t wg_descriptor(const bf16* tile, int trans, int rows, int s) {
    uint32_t start = smem_address(tile) + s / 4 * rows * 128;
    return trans == 0 ? wgmma_descriptor(start + s % 4 * 32, 16, 1024, WGMMA_SWIZZLE_128B)
                      : wgmma_descriptor(start + s % 4 * 2048, 8192, 1024, WGMMA_SWIZZLE_128B);
}
template <int N, int TA, int TB>
__global__ void wgmma_kernel(float* dout, const float* c, const __grid_constant__ CUtensorMap map_a,
                             const __grid_constant__ CUtensorMap map_b, int scale_d) {
    extern __shared__ __align__(1024) unsigned char wg_smem[];
    __shared__ __align__(8) uint64_t bar;
    bf16* a = (bf16*)align1024(wg_smem);
    bf16* b = a + 64 * WG_K;
    int t = threadIdx.x, w = t / 32, g = t % 32 / 4, q = t % 4;
    if (t == 0) {
        mbarrier_init(&bar, 1);
        mbarrier_init_fence();
    }
    __syncthreads();
    if (t == 0) {
        mbarrier_arrive_expect_tx(&bar, (64 + N) * WG_K * 2);
        for (int kt = 0; kt < WG_K / 64; kt++) {
            tma_load_2d(a + kt * 64 * 64, &map_a, TA ? 0 : 64 * kt, TA ? 64 * kt : 0, &bar);
            if (TB == 0) tma_load_2d(b + kt * N * 64, &map_b, 64 * kt, 0, &bar);
            else
                for (int j = 0; j < N / 64; j++) tma_load_2d(b + kt * N * 64 + j * 64 * 64, &map_b, 64 * j, 64 * kt, &bar);
        }
    }
    // lane 4g + q: d[4j + e] is D's row 16w + g + 8 (e / 2), column 8j + 2q + e % 2
    float d[N / 2];
    for (int j = 0; j < N / 8; j++)
        for (int e = 0; e < 4; e++) d[4 * j + e] = c[(16 * w + g + 8 * (e / 2)) * N + 8 * j + 2 * q + e % 2];
    mbarrier_wait(&bar, 0);
    wgmma_fence();
    wgmma_hold<N / 2>(d);
    for (int s = 0; s < WG_K / 16; s++) {
        wgmma_bf16<N, TA, TB>(d, wg_descriptor(a, TA, 64, s), wg_descriptor(b, TB, N, s), s == 0 ? scale_d : 1);
        if (s == WG_K / 32 - 1) wgmma_commit();  // two groups: the first half of k, the second
    }
    wgmma_commit();
    wgmma_wait<1>();
    wgmma_wait<0>();
    wgmma_hold<N / 2>(d);
    for (int j = 0; j < N / 8; j++)
        for (int e = 0; e < 4; e++) dout[(16 * w + g + 8 * (e / 2)) * N + 8 * j + 2 * q + e % 2] = d[4 * j + e];
}

// The RS form: the same product with A (64 x WG_K, row-major in global memory) in registers, each
// lane loading the fragments the PTX ISA's figure for wgmma .m64nNk16's A gives it: warp w, lane
// 4g + q, k step s, register j holds row 16w + g + 8 (j % 2), columns 16s + 2q + 8 (j / 2) and
// the next (the lower column in the low half).
template <int N, int TB>
__global__ void wgmma_rs_kernel(float* dout, const float* c, const bf16* a, const __grid_constant__ CUtensorMap map_b,
                                int scale_d) {
    extern __shared__ __align__(1024) unsigned char wg_smem[];
    __shared__ __align__(8) uint64_t bar;
    bf16* b = (bf16*)align1024(wg_smem);
    int t = threadIdx.x, w = t / 32, g = t % 32 / 4, q = t % 4;
    if (t == 0) {
        mbarrier_init(&bar, 1);
        mbarrier_init_fence();
    }
    __syncthreads();
    if (t == 0) {
        mbarrier_arrive_expect_tx(&bar, N * WG_K * 2);
        for (int kt = 0; kt < WG_K / 64; kt++) {
            if (TB == 0) tma_load_2d(b + kt * N * 64, &map_b, 64 * kt, 0, &bar);
            else
                for (int j = 0; j < N / 64; j++) tma_load_2d(b + kt * N * 64 + j * 64 * 64, &map_b, 64 * j, 64 * kt, &bar);
        }
    }
    uint32_t frag[WG_K / 16][4];
    for (int s = 0; s < WG_K / 16; s++)
        for (int j = 0; j < 4; j++) {
            const bf16* e = a + (16 * w + g + 8 * (j % 2)) * WG_K + 16 * s + 2 * q + 8 * (j / 2);
            frag[s][j] = (uint32_t)__bfloat16_as_ushort(e[0]) | (uint32_t)__bfloat16_as_ushort(e[1]) << 16;
        }
    float d[N / 2];
    for (int j = 0; j < N / 8; j++)
        for (int e = 0; e < 4; e++) d[4 * j + e] = c[(16 * w + g + 8 * (e / 2)) * N + 8 * j + 2 * q + e % 2];
    mbarrier_wait(&bar, 0);
    wgmma_fence();
    wgmma_hold<N / 2>(d);
    wgmma_hold<WG_K / 4>(&frag[0][0]);
    for (int s = 0; s < WG_K / 16; s++) {
        wgmma_bf16_rs<N, TB>(d, frag[s], wg_descriptor(b, TB, N, s), s == 0 ? scale_d : 1);
        if (s == WG_K / 32 - 1) wgmma_commit();  // two groups, as above
    }
    wgmma_commit();
    wgmma_wait<1>();
    wgmma_wait<0>();
    wgmma_hold<N / 2>(d);
    wgmma_hold<WG_K / 4>(&frag[0][0]);
    for (int j = 0; j < N / 8; j++)
        for (int e = 0; e < 4; e++) dout[(16 * w + g + 8 * (e / 2)) * N + 8 * j + 2 * q + e % 2] = d[4 * j + e];
}

// Integers, so that every product and sum is exact in float32 (below 2^24) in any order:
// A[m][k] = (37m + 11k) % 256 - 128, B[k][n] = (13k + 29n + 7) % 251 - 125, C[m][n] = m - 3n.
// RS: A from registers (wgmma_rs_kernel; A row-major, TA 0).
template <int N, int TA, int TB, bool RS = false>
static int wgmma_case(int scale_d) {
    size_t na = 64 * WG_K, nb = (size_t)WG_K * N, nd = 64 * (size_t)N;
    bf16* a = (bf16*)malloc_check(na * sizeof(bf16));
    bf16* b = (bf16*)malloc_check(nb * sizeof(bf16));
    float* c = (float*)malloc_check(nd * sizeof(float));
    float* d = (float*)malloc_check(nd * sizeof(float));
    for (int m = 0; m < 64; m++)
        for (int k = 0; k < WG_K; k++) a[TA ? k * 64 + m : m * WG_K + k] = __float2bfloat16((float)((37 * m + 11 * k) % 256 - 128));
    for (int k = 0; k < WG_K; k++)
        for (int n = 0; n < N; n++) b[TB ? k * N + n : n * WG_K + k] = __float2bfloat16((float)((13 * k + 29 * n + 7) % 251 - 125));
    for (size_t i = 0; i < nd; i++) c[i] = (float)((int)(i / N) - 3 * (int)(i % N));
    bf16* d_a = (bf16*)to_device(a, na * sizeof(bf16));
    bf16* d_b = (bf16*)to_device(b, nb * sizeof(bf16));
    float* d_c = (float*)to_device(c, nd * sizeof(float));
    float* d_d = (float*)device_alloc(nd * sizeof(float));
    cuda_check(cudaMemset(d_d, 0xff, nd * sizeof(float)));  // NaN: an output never written fails
    CUtensorMap map_a, map_b;
    static_assert(!RS || TA == 0, "wgmma_rs_kernel reads A row-major");
    bool ok = (TA ? tensor_map_bf16(&map_a, d_a, WG_K, 64, 64, 64, 64) : tensor_map_bf16(&map_a, d_a, 64, WG_K, WG_K, 64, 64)) &&
              (TB ? tensor_map_bf16(&map_b, d_b, WG_K, N, N, 64, 64) : tensor_map_bf16(&map_b, d_b, N, WG_K, WG_K, N, 64));
    int bad = 0;
    if (!ok) {
        printf("instructions: wgmma: tensor_map_bf16 refused a map (N %d)\n", N);
        bad = 1;
    } else {
        if constexpr (RS) {
            int bytes = N * WG_K * 2 + 1024;
            cuda_check(cudaFuncSetAttribute(wgmma_rs_kernel<N, TB>, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
            wgmma_rs_kernel<N, TB><<<1, 128, bytes>>>(d_d, d_c, d_a, map_b, scale_d);
            launch_check(wgmma_rs_kernel);
        } else {
            int bytes = (64 + N) * WG_K * 2 + 1024;  // over 48 KiB from N = 128 on
            cuda_check(cudaFuncSetAttribute(wgmma_kernel<N, TA, TB>, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
            wgmma_kernel<N, TA, TB><<<1, 128, bytes>>>(d_d, d_c, map_a, map_b, scale_d);
            launch_check(wgmma_kernel);
        }
        to_host(d, d_d, nd * sizeof(float));
        for (int m = 0; m < 64; m++)
            for (int n = 0; n < N; n++) {
                double want = scale_d ? c[m * N + n] : 0.0;
                for (int k = 0; k < WG_K; k++)
                    want += (double)__bfloat162float(a[TA ? k * 64 + m : m * WG_K + k]) *
                            (double)__bfloat162float(b[TB ? k * N + n : n * WG_K + k]);
                if (d[m * N + n] != want && bad++ < MAX_SHOWN)
                    printf("instructions: %s mismatch: N %d, trans (%d, %d), scale_d %d: D[%d][%d] = %.9g, want %.9g\n",
                           RS ? "wgmma_rs" : "wgmma", N, TA, TB, scale_d, m, n, d[m * N + n], want);
            }
    }
    cuda_check(cudaFree(d_a));
    cuda_check(cudaFree(d_b));
    cuda_check(cudaFree(d_c));
    cuda_check(cudaFree(d_d));
    free(a);
    free(b);
    free(c);
    free(d);
    return bad;
}
template <int N>
static int wgmma_cases(void) {
    return wgmma_case<N, 0, 0>(0) + wgmma_case<N, 0, 0>(1) + wgmma_case<N, 0, 1>(1) + wgmma_case<N, 1, 0>(1) +
           wgmma_case<N, 1, 1>(0) + wgmma_case<N, 1, 1>(1);
}

static int check_wgmma(void) {
    if (!hopper_device()) return hopper_skipped("wgmma");
    int bad = wgmma_cases<64>() + wgmma_cases<128>() + wgmma_cases<256>();
    return report("wgmma", bad, "m64nNk16 for N 64, 128, 256, every (TRANS_A, TRANS_B), scale_d 0 and 1, 128 deep in "
                  "two commit groups, operands by TMA, 128B swizzle, exact integers");
}

template <int N>
static int wgmma_rs_cases(void) {
    return wgmma_case<N, 0, 0, true>(0) + wgmma_case<N, 0, 0, true>(1) + wgmma_case<N, 0, 1, true>(0) +
           wgmma_case<N, 0, 1, true>(1);
}

static int check_wgmma_rs(void) {
    if (!hopper_device()) return hopper_skipped("wgmma_rs");
    int bad = wgmma_rs_cases<64>() + wgmma_rs_cases<128>();
    return report("wgmma_rs", bad, "m64nNk16 with A from registers for N 64, 128, TRANS_B 0 and 1, scale_d 0 and 1, "
                  "128 deep in two commit groups, B by TMA, exact integers");
}

// ---------- main ----------

int main(void) {
    cuda_make_target = "build/instruction_check";  // named by the errors that say to rebuild
    cuda_device_init();  // no device: one line, exit 1
    printf("instructions: on %s\n", cuda_device.prop.name);
    int failed = (check_bf16_conversion() > 0) + (check_mma() > 0) + (check_ldmatrix() > 0) + (check_cp_async() > 0);
    failed += (check_descriptor() > 0) + (check_tma() > 0) + (check_mbarrier() > 0) + (check_wgmma() > 0);
    failed += check_wgmma_rs() > 0;
    printf("instructions: %d failed\n", failed);
    return failed > 0 ? 1 : 0;
}

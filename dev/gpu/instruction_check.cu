// dev/gpu/instruction_check.cu: the instructions that the bf16 matrix products are built from
// (gpt2/gpu/matmul_bf16.cuh, section "tensor-core instructions"), each against a scalar definition
// written here from the PTX ISA:
//   bf16       float -> bf16 -> float: round to nearest, ties to even, overflow to infinity
//   mma        mma.sync m16n8k16, bf16 inputs, float32 accumulation: every lane's fragments
//   ldmatrix   ldmatrix x4 and x4.trans: every lane's four registers
//   cp.async   16-byte copies in commit groups, zero fill, wait_group 1 and 0
// On a GPU this checks the wrappers and our reading of the ISA; on the CPU emulator
// (dev/emu/cuda_emu.h) it checks the emulator's versions of the same functions, which every emulated
// kernel that uses them relies on. The elements of each input matrix are distinct (random, or
// distinct integers), so that one taken from the wrong lane, register or half shows.
//
//   nvcc -O3 -arch=sm_90 -std=c++17 -o build/instruction_check dev/gpu/instruction_check.cu
//   python3 dev/emu/cuda_emu.py dev/gpu/instruction_check.cu build/emu/instruction_check.cpp   then g++ as
//   for build/emu/gpu_check (Makefile), and run build/emu/instruction_check
//
// Prints one line per instruction, "ok" or its first mismatches; exit status 1 on any mismatch.

#include "../../gpt2/random.h"
#include "../../gpt2/gpu/matmul_bf16.cuh"  // the wrappers; with cuda_utils.cuh: bf16, cuda_device_init, cuda_check
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

// ---------- main ----------

int main(void) {
    cuda_make_target = "build/instruction_check";  // named by the errors that say to rebuild
    cuda_device_init();  // no device: one line, exit 1
    printf("instructions: on %s\n", cuda_device.prop.name);
    int failed = (check_bf16_conversion() > 0) + (check_mma() > 0) + (check_ldmatrix() > 0) + (check_cp_async() > 0);
    printf("instructions: %d failed\n", failed);
    return failed > 0 ? 1 : 0;
}

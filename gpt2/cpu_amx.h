// gpt2/cpu_amx.h: Intel's AMX (Advanced Matrix Extensions), the matrix unit of Xeon cores since
// Sapphire Rapids, for the bf16 products (gpt2/cpu_bf16.h) and their peak (gpt2/cpu_peak.h).
//
// AMX adds eight tile registers, each up to 16 rows of 64 bytes, and one instruction that matters
// here: tdpbf16ps C, A, B. With 16-row tiles of 64 bytes it takes A as 16 rows of 32 bf16 (16 pairs
// of consecutive k), B as 16 rows of 16 pairs (row q holds, for each of 16 columns, the bf16 at k
// = 2q and 2q+1: the layout of cpu_bf16.h's packed B, a pair per 32-bit unit) and adds the 16 x 16
// x 32 products into C's 16 x 16 float32 sums: 16384 FLOPs in one instruction, where vdpbf16ps
// does 64. Each product of two bf16 is exact in float32, as in vdpbf16ps; the order and precision
// in which one instruction adds its 32 products into a sum is the hardware's own (not the
// sequential order of its documentation's pseudo-code: measured on a Xeon, fewer than a third of
// the sums of 512 products matched that order bit for bit). So the products on AMX give their own
// bits, fixed for a machine: the same for any number of threads and any batch (each sum depends
// on its row of A and column of B alone), within a float32 sum's rounding of the exact product.
//
// Linux hands the tiles' 8 KB of register state to a process only when asked (arch_prctl
// ARCH_REQ_XCOMP_PERM), once per process; a thread then loads a tile configuration (the shape of
// each tile) before its first tile instruction, and releases the tiles when done so that the
// kernel need not save them on every switch. cpu_amx_on() asks, once; GPT2_AMX=0 in the
// environment keeps the products on vdpbf16ps (to compare the two, or to get the bits of a
// machine without AMX).
//
// Compiled in where the build's target has AMX (-march=native on such a machine: __AMX_TILE__
// and __AMX_BF16__) and the compiler is GCC on Linux, in the builds whose bf16 products run on
// vectors (cpu_bf16.h: not -DMATMUL_PLAIN_C); everywhere else CPU_AMX is 0 and cpu_amx_on()
// says no.

#ifndef GPT2_CPU_AMX_H
#define GPT2_CPU_AMX_H

#if defined(__AMX_TILE__) && defined(__AMX_BF16__) && defined(__AVX512BF16__) && defined(__linux__) && \
    defined(__GNUC__) && !defined(__clang__) && !defined(__CUDACC__) && !defined(MATMUL_PLAIN_C) && !defined(float)
#define CPU_AMX 1
#include <immintrin.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#define CPU_AMX_REQ_PERM 0x1023   // arch_prctl's ARCH_REQ_XCOMP_PERM
#define CPU_AMX_TILEDATA 18       // XFEATURE_XTILEDATA: the tiles' register state

// 1 where the products may use AMX: this process was granted the tiles, and GPT2_AMX is not "0".
// Asked once; the answer is kept (a second caller racing the first asks again, harmlessly).
static inline int cpu_amx_on(void) {
    static int state = -1;   // -1: not asked yet
    int on = __atomic_load_n(&state, __ATOMIC_RELAXED);
    if (on < 0) {
        const char* env = getenv("GPT2_AMX");
        on = !(env != NULL && strcmp(env, "0") == 0) &&
             syscall(SYS_arch_prctl, CPU_AMX_REQ_PERM, CPU_AMX_TILEDATA) == 0;
        __atomic_store_n(&state, on, __ATOMIC_RELAXED);
    }
    return on;
}

// The tile configuration every user here loads: palette 1, all eight tiles 16 rows of 64 bytes.
typedef struct {
    uint8_t palette, start_row, reserved[14];
    uint16_t bytes_per_row[16];
    uint8_t rows[16];
} cpu_amx_config;

// Loads that configuration on the calling thread (after cpu_amx_on() said yes).
static inline void cpu_amx_configure(void) {
    cpu_amx_config config;
    memset(&config, 0, sizeof(config));
    config.palette = 1;
    for (int t = 0; t < 8; t++) {
        config.bytes_per_row[t] = 64;
        config.rows[t] = 16;
    }
    _tile_loadconfig(&config);
}

// The calling thread is done with its tiles.
static inline void cpu_amx_release(void) { _tile_release(); }

#else
#define CPU_AMX 0
static inline int cpu_amx_on(void) { return 0; }
#endif

#endif // GPT2_CPU_AMX_H

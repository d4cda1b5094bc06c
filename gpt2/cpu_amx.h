// gpt2/cpu_amx.h: Intel's AMX tiles (Xeon since Sapphire Rapids) for the bf16 products
// (gpt2/cpu_bf16.h) and their peak (gpt2/cpu_peak.h): tdpbf16ps adds a 16 x 32 bf16 tile times a
// 16-pair x 16 tile into 16 x 16 float32 sums, in its own order: its own bits, fixed for the
// machine. doc/cpu_speed.md, "bf16 on AMX". GPT2_AMX=0 keeps the products off AMX.

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

// 1 where Linux granted the tiles (arch_prctl) and GPT2_AMX is not "0". Asked once (a racing
// caller asks again, harmlessly).
static inline int cpu_amx_on(void) {
    static int state = -1;   // not asked yet
    int on = __atomic_load_n(&state, __ATOMIC_RELAXED);
    if (on < 0) {
        const char* env = getenv("GPT2_AMX");
        on = !(env != NULL && strcmp(env, "0") == 0) &&
             syscall(SYS_arch_prctl, CPU_AMX_REQ_PERM, CPU_AMX_TILEDATA) == 0;
        __atomic_store_n(&state, on, __ATOMIC_RELAXED);
    }
    return on;
}

// Palette 1, all eight tiles 16 rows of 64 bytes.
typedef struct {
    uint8_t palette, start_row, reserved[14];
    uint16_t bytes_per_row[16];
    uint8_t rows[16];
} cpu_amx_config;

// Loads it on the calling thread (after cpu_amx_on() said yes).
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

static inline void cpu_amx_release(void) { _tile_release(); }

#else
#define CPU_AMX 0
static inline int cpu_amx_on(void) { return 0; }
#endif

#endif // GPT2_CPU_AMX_H

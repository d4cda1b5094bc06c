// dev/emu/cuda_emu.h: runs our CUDA kernels on the CPU, so that their indexing, bounds, barriers and
// pipelines can be tested on a machine without a GPU (this one). It is a test tool, not a GPU: it
// says nothing about speed, and a kernel that passes here still has to be checked on a real device
// (doc/gpu.md lists what it cannot see, and what covers that on a GPU).
//
// How: dev/emu/cuda_emu.py rewrites every launch `kernel<<<grid, block>>>(args)` into
// `emu_launch("kernel", grid, block, [=]{ kernel(args); })` and every `__shared__` array into a
// piece of an arena (emu_shared_alloc), and this header (force-included) maps the CUDA runtime
// onto host memory. The blocks of a launch are shared out to workers, OS threads (CUDA_EMU_WORKERS
// below), each running one block at a time in a copy of the arena of its own, so that the arena
// is shared memory exactly. A block's threads are cooperative fibers: a thread runs until it
// reaches a barrier (__syncthreads, or a warp instruction: a shuffle, mma or ldmatrix, which is a
// barrier of its warp), then another runs. Which warp runs next is the schedule, chosen at run
// time (CUDA_EMU_SCHEDULE below). A GPU may interleave its warps in any order between two
// __syncthreads, so a correct kernel gives the same result under every schedule, and one that
// depends on the order (a missing or misplaced barrier) fails under some of them.
// Checked: launch limits (1024 threads, grid y/z <= 65535, 48 KiB static shared memory is up to
// the compiler; dynamic shared memory over 48 KiB needs cudaFuncSetAttribute, over 227 KiB fails), __syncthreads or warp instructions that not every thread of the block/warp
// reaches, or that the lanes of a warp reach at different instructions (undefined behaviour on a
// GPU: reported and aborted), ldmatrix and cp.async addresses that are not 16-byte aligned (a
// fault on a GPU), cp.async copies a thread never waits for, and, built with -fsanitize=address,
// undefined as the Makefile does: out-of-bounds "device" memory accesses (cudaMalloc is malloc),
// out-of-bounds shared-memory accesses (each array of the arena is followed by a poisoned gap) and
// misaligned float4 accesses (float4 is 16-byte aligned here as on a GPU).
//
// The race detector, built with -DCUDA_EMU_RACE and GCC's -fsanitize=thread instrumentation (whose
// call before every load and store this header answers itself, without ThreadSanitizer's
// runtime), in the spirit of compute-sanitizer's racecheck: every byte of the arena has a shadow
// that remembers its last write and its readers, each with its thread, its source line and the
// barrier interval (the epoch: __syncthreads to __syncthreads) it happened in. Two accesses to one
// byte from different warps in the same interval, at least one a write, are a race whatever order
// they ran in here: the run stops, naming the kernel, both source lines and the shared array. A
// cp.async copy is a write from its issue until the wait that retires it, and any access to its
// bytes in between, by any thread, is a race. It also stops at a read of a byte that the block
// never wrote (what an earlier block left, undefined on a GPU) and at an access past an array's
// end. Not checked: lanes of one warp against each other (they run together unless the code
// diverges), global memory, atomics.
//
// Tensor-core instructions: gpt2/gpu/matmul_bf16.cuh wraps each PTX instruction its bf16 GEMM needs
// in a function, and this header defines the same functions from the PTX ISA's definitions, so that
// the kernels that use them run here too (dev/gpu/instruction_check.cu checks each against a scalar
// definition):
//   mma_bf16_16816            a warp barrier, like a shuffle: the lanes leave their fragments in
//                             slots, and the last lane to arrive computes every lane's four
//                             outputs from the warp's A and B, adding the 16 products in float32
//                             in order;
//   ldmatrix_x4(_trans)       a warp barrier: the lanes leave their row addresses, and the last
//                             lane to arrive reads the four matrices for the whole warp at once, as
//                             the single instruction does;
//   cp_async16, cp_async_commit, cp_async_wait<N>
//                             each thread queues its copies; a copy lands (reads global memory and
//                             writes shared memory) at the latest at the wait that retires its
//                             group, and earlier if CUDA_EMU_ASYNC says so: a kernel that reads a
//                             tile before the wait (and the __syncthreads after it) reads stale
//                             data, as it may on a GPU, where the copy lands at some unknown time.
// And Hopper's, which gpt2/gpu/hopper.cuh wraps:
//   mbarrier_init, _arrive, _arrive_expect_tx, _try_wait
//                             the barrier's state lives beside shared memory, keyed by its address;
//                             a phase completes when its arrivals and announced bytes are in; a
//                             try_wait that says no yields, and its thread retries once a barrier
//                             has changed; if every live thread polls and nothing can change, the
//                             run stops ("deadlock: mbarrier waits that ..."); an arrive yields too,
//                             so that its waiters may run before the arriving thread goes on;
//   tma_load_2d               the box (zeros outside the tensor) into shared memory, swizzled by
//                             the address bits as the map says; it lands and counts its bytes off
//                             the barrier at the latest when a waiter needs it (CUDA_EMU_ASYNC);
//   wgmma_bf16(_rs), _fence, _commit, _wait<N>
//                             warp barriers; each warp of the warpgroup queues its 16 rows of D,
//                             computed from the descriptors' swizzled layouts (d, then k = 0..15,
//                             in float32) at the wait that retires its group (CUDA_EMU_ASYNC);
//                             the RS form's A from the lanes' registers, which must not change
//                             before that wait;
//   fence_proxy_async, setmaxnreg, wgmma_hold   nothing (setmaxnreg checks its value);
//   cudaGetDriverEntryPoint(ByVersion)          gives the emulator's cuTensorMapEncodeTiled, which
//                             checks what the driver checks and keeps the map's fields in CUtensorMap.
// `extern __shared__ T a[];` is the launch's dynamic shared memory (kernel<<<grid, block, bytes>>>),
// a 1024-byte aligned piece of the arena per kernel and size.
// Environment:
//   CUDA_EMU_SCHEDULE=roundrobin     (the default) every warp in turn runs one step, to its next
//                                    barrier or warp instruction; warps and lanes in order
//   CUDA_EMU_SCHEDULE=reverse        the same, warps and lanes in reverse order
//   CUDA_EMU_SCHEDULE=ahead          one warp at a time runs as far as it can (to a __syncthreads or
//                                    its end) before the next starts; after every __syncthreads a
//                                    different warp goes first
//   CUDA_EMU_SCHEDULE=random[:SEED]  a random warp runs one step at a time, its lanes in random order
//   CUDA_EMU_ASYNC=wait              (the default) a cp.async copy lands at the wait that retires it,
//                                    a TMA copy at a wait on its barrier, a wgmma at its wgmma_wait
//   CUDA_EMU_ASYNC=issue             when it is issued
//   CUDA_EMU_ASYNC=random[:SEED]     at a random point between the two
//   CUDA_EMU_WORKERS=N               the OS threads that run the blocks of a launch (default: as many
//                                    as OpenMP would use, OMP_NUM_THREADS or the cores; at most 64)
//   CUDA_EMU_DRIVER=none|nodevice|old|broken   the driver and GPU that start-up finds (cudaGetDeviceCount)
//   CUDA_EMU_DEVICES=N                         the machine's GPUs (default 1), each on its own PCI bus
//   CUDA_VISIBLE_DEVICES=I,J,...               those the process sees, as CUDA reads it: indices, cut at
//                                              the first invalid one (none left: cudaErrorNoDevice)
//   CUDA_EMU_FAULT=NAME                        kernel NAME faults as an out-of-bounds access does on a GPU

#ifndef CUDA_EMU_H
#define CUDA_EMU_H

#include <ucontext.h>
#include <sys/mman.h>
#include <dlfcn.h>
#include <elf.h>
#include <unistd.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <time.h>
#include <pthread.h>
#include <sched.h>
#ifdef _OPENMP
#include <omp.h>
#endif
#include <functional>
#include <algorithm>
using std::min;
using std::max;

#define CUDA_EMU 1
#define __global__ __attribute__((noinline))  // a kernel is entered, never inlined: reports end at it
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __align__(n) __attribute__((aligned(n)))
#define __restrict__ __restrict
#define __grid_constant__           // a kernel parameter in constant memory (a tensor map): a plain one here
#define CUDART_VERSION 13000
// (__shared__ is not defined: dev/emu/cuda_emu.py turns each declaration into a piece of the arena)

// EMU_UNROLL(n): what cuda_emu.py puts for nvcc's `#pragma unroll` before a loop that only computes.
// Where the build defines EMU_UNROLL_LOOPS (the Makefile's -O2 builds: gpu_check, train_gpu),
// GCC's own pragma: a loop of up to n trips unrolled whole, so that the small arrays of a thread
// that it indexes (a GEMM's register tile) become registers, which AddressSanitizer does not check
// at every use. Elsewhere nothing: at -O1 and -Og the pragma made builds slower and runs no faster.
#ifdef EMU_UNROLL_LOOPS
#define EMU_PRAGMA(x) _Pragma(#x)
#define EMU_UNROLL(n) EMU_PRAGMA(GCC unroll n)
#else
#define EMU_UNROLL(n)
#endif

// The emulator's own functions are not instrumented in the race detector's build: they move data
// for the kernels (an ldmatrix's read, a cp.async copy landing) and tell the detector themselves,
// as the thread and the source line the kernel's instruction has. EMU_INSTRUCTION: a function
// that stands for an instruction, never inlined, so that its return address is the kernel's line.
// EMU_BOOKKEEPING: the scheduler's and the warp instructions' own state, which runs at every
// barrier and is not the kernels' code: no sanitizer instruments it.
#ifdef CUDA_EMU_RACE
#define EMU_INTERNAL __attribute__((no_sanitize_thread))
#define EMU_INSTRUCTION __attribute__((no_sanitize_thread, noinline))
// the detector's answers to the instrumentation's calls, which the compiler inserts late: kept
// even where the program is compiled as a whole (-fwhole-program drops what nothing calls yet)
#define EMU_HOOK __attribute__((no_sanitize_thread, used, externally_visible))
#define EMU_BOOKKEEPING __attribute__((no_sanitize_thread))
#else
#define EMU_INTERNAL
#define EMU_INSTRUCTION
#define EMU_BOOKKEEPING __attribute__((no_sanitize("address", "undefined")))
#endif

// ---------- vector types ----------
struct dim3 {
    unsigned int x, y, z;
    dim3(unsigned int x_ = 1, unsigned int y_ = 1, unsigned int z_ = 1) : x(x_), y(y_), z(z_) {}
};
typedef dim3 uint3;
struct alignas(16) float4 { float x, y, z, w; };
struct alignas(8) float2 { float x, y; };
struct alignas(16) uint4 { unsigned int x, y, z, w; };
static inline float4 make_float4(float x, float y, float z, float w) { float4 r = {x, y, z, w}; return r; }
static inline float2 make_float2(float x, float y) { float2 r = {x, y}; return r; }

// ---------- bfloat16 ----------
// The bits of a float32 with the low 16 mantissa bits dropped: 1 sign, 8 exponent, 7 mantissa
// bits. No implicit conversions (cuda_bf16.h has them): the code converts with the functions
// below, which behave the same here and under nvcc.
struct __nv_bfloat16 { unsigned short x; };
struct alignas(4) __nv_bfloat162 { __nv_bfloat16 x, y; };
// float -> bfloat16 rounded to nearest, ties to even, as cvt.rn.bf16.f32 does; every NaN becomes
// the canonical quiet NaN 0x7fff.
static inline __nv_bfloat16 __float2bfloat16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    __nv_bfloat16 r;
    if ((u & 0x7fffffffu) > 0x7f800000u) { r.x = 0x7fff; return r; }
    u += 0x7fffu + ((u >> 16) & 1u);  // half of the dropped part, plus one more when the kept part is odd
    r.x = (unsigned short)(u >> 16);
    return r;
}
static inline __nv_bfloat16 __float2bfloat16_rn(float f) { return __float2bfloat16(f); }
static inline float __bfloat162float(__nv_bfloat16 h) {
    uint32_t u = (uint32_t)h.x << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}
static inline __nv_bfloat162 __floats2bfloat162_rn(float a, float b) {
    __nv_bfloat162 r = {__float2bfloat16(a), __float2bfloat16(b)};
    return r;
}
static inline unsigned short __bfloat16_as_ushort(__nv_bfloat16 h) { return h.x; }
static inline __nv_bfloat16 __ushort_as_bfloat16(unsigned short u) { __nv_bfloat16 r = {u}; return r; }

// ---------- device math ----------
// fmaf, rounded once as the GPU's FFMA is, and inline. These builds do not assume the CPU has an
// FMA instruction (no -mfma), so libm's fmaf is a call, and a call clobbers every vector register:
// a kernel's register tile (acc[i][j] = fmaf(a[i], b[j], acc[i][j])) then lives on the stack,
// stored and reloaded around each product. Here the instruction is used where the CPU has it.
#if defined(__x86_64__) && !defined(__FMA__)
static const int emu_cpu_fma = (__builtin_cpu_init(), __builtin_cpu_supports("fma"));
#endif
static inline float emu_fmaf(float a, float b, float c) {
#if defined(__FMA__) || defined(__aarch64__)
    return __builtin_fmaf(a, b, c);
#elif defined(__x86_64__)
    if (__builtin_expect(emu_cpu_fma, 1)) {
        asm("vfmadd231ss %2, %1, %0" : "+x"(c) : "x"(a), "x"(b));  // c = a * b + c
        return c;
    }
    return fmaf(a, b, c);
#else
    return fmaf(a, b, c);
#endif
}
#define fmaf emu_fmaf
static inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
static inline float __fdividef(float a, float b) { return a / b; }
static inline int __float_as_int(float f) { int i; memcpy(&i, &f, 4); return i; }
static inline float __int_as_float(int i) { float f; memcpy(&f, &i, 4); return f; }
template <typename T> static inline T __ldg(const T* p) { return *p; }
// Atomic, as blocks may run at once on several workers (below). The race detector does not watch
// atomics.
EMU_INTERNAL static inline float atomicAdd(float* p, float v) {
    float old, sum;
    __atomic_load(p, &old, __ATOMIC_RELAXED);
    do sum = old + v;
    while (!__atomic_compare_exchange(p, &old, &sum, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED));
    return old;
}
EMU_INTERNAL static inline int atomicAdd(int* p, int v) { return __atomic_fetch_add(p, v, __ATOMIC_RELAXED); }

// ---------- the configuration: schedule, cp.async landing, workers ----------
enum { EMU_ROUND_ROBIN, EMU_REVERSE, EMU_AHEAD, EMU_RANDOM };  // CUDA_EMU_SCHEDULE
enum { EMU_AT_WAIT, EMU_AT_ISSUE, EMU_AT_RANDOM };            // CUDA_EMU_ASYNC
struct EmuConfig {
    bool read;
    int schedule, async;
    unsigned long long schedule_seed, async_seed;  // of the random choices (each block draws its own)
    int workers;                                   // CUDA_EMU_WORKERS
};
static EmuConfig emu_cfg;

// The environment variable `var` as the index of one of names[n] (0 when unset). The last name
// may take a seed, NAME:SEED, returned in *seed (1 when not given). Anything else stops the run.
static int emu_env_choice(const char* var, const char* const* names, int n, unsigned long long* seed) {
    const char* v = getenv(var);
    *seed = 1;
    if (v == NULL || v[0] == '\0') return 0;
    for (int i = 0; i < n; i++) {
        size_t len = strlen(names[i]);
        if (strncmp(v, names[i], len) != 0) continue;
        if (v[len] == '\0') return i;
        if (v[len] == ':' && i == n - 1 && v[len + 1] >= '0' && v[len + 1] <= '9') {
            char* end;
            *seed = strtoull(v + len + 1, &end, 10);
            if (*end == '\0') return i;
        }
    }
    fprintf(stderr, "cuda_emu: %s=%s: expected ", var, v);
    for (int i = 0; i < n; i++) fprintf(stderr, "%s%s", names[i], i + 2 < n ? ", " : i + 1 < n ? " or " : "");
    fprintf(stderr, "[:SEED]\n");
    exit(2);
}

// How many workers run the blocks of a launch (below): CUDA_EMU_WORKERS, else as many threads as
// OpenMP would use (OMP_NUM_THREADS, else the cores this process may run on), at most 64.
static int emu_env_workers(void) {
    const char* v = getenv("CUDA_EMU_WORKERS");
    if (v != NULL && v[0] != '\0') {
        char* end;
        long n = strtol(v, &end, 10);
        if (*end != '\0' || n < 1 || n > 64) {
            fprintf(stderr, "cuda_emu: CUDA_EMU_WORKERS=%s: expected a number of threads from 1 to 64\n", v);
            exit(2);
        }
        return (int)n;
    }
#ifdef _OPENMP
    int n = omp_get_max_threads();
#else
    cpu_set_t cpus;
    int n = sched_getaffinity(0, sizeof cpus, &cpus) == 0 ? CPU_COUNT(&cpus) : 1;
#endif
    return n < 1 ? 1 : n > 64 ? 64 : n;
}

static void emu_read_config(void) {
    if (emu_cfg.read) return;
    static const char* const schedules[] = {"roundrobin", "reverse", "ahead", "random"};
    static const char* const landings[] = {"wait", "issue", "random"};
    emu_cfg.schedule = emu_env_choice("CUDA_EMU_SCHEDULE", schedules, 4, &emu_cfg.schedule_seed);
    emu_cfg.async = emu_env_choice("CUDA_EMU_ASYNC", landings, 3, &emu_cfg.async_seed);
    emu_cfg.workers = emu_env_workers();
    emu_cfg.read = true;
}

// 64 random bits from *state (splitmix64: every seed, 0 included, gives a good sequence).
EMU_BOOKKEEPING static inline unsigned long long emu_random_bits(unsigned long long* state) {
    unsigned long long z = (*state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
// A number in [0, n) from 32 random bits, as their product with n over 2^32: a multiply, where a
// remainder would be a division, which the random schedule's orders of lanes need 31 of a step.
EMU_BOOKKEEPING static inline unsigned emu_below(unsigned long long bits32, unsigned n) {
    return (unsigned)(((bits32 & 0xffffffffu) * n) >> 32);
}
EMU_BOOKKEEPING static inline unsigned emu_random(unsigned long long* state, unsigned n) {
    return emu_below(emu_random_bits(state) >> 32, n);
}

// ---------- the scheduler ----------
// Each thread of a block is a fiber: a stack of its own and a saved stack pointer. Fibers are
// made once and reused by every block of every launch: a fiber runs the kernel body, marks
// itself done, and when resumed runs the body again (for the next block). A step of a warp runs
// its lanes one after another, each to its next barrier: the scheduler switches to the first
// lane, each lane to the next, the last back to the scheduler, so that a warp instruction costs
// one switch per lane. A switch saves and restores only the registers a function call must
// preserve, a few nanoseconds, where ucontext's swapcontext makes a system call to save the
// signal mask: on x86-64 it is the assembly below, elsewhere ucontext.
enum { EMU_RUNNABLE, EMU_BLOCK_WAIT, EMU_WARP_WAIT, EMU_DONE, EMU_POLL };  // EMU_POLL: a try_wait that said no
// A cp.async copy that its thread has issued and no wait has retired yet.
struct EmuCopy {
    void* dst;
    const void* src;
    int zero;                       // src_bytes 0: 16 zero bytes, src not read
    int group;                      // its commit group: the cp_async_commit calls before it
    int landed;                     // already in shared memory (CUDA_EMU_ASYNC=issue or random)
    const void* pc;                 // where the kernel issued it, for the race detector
};
enum { EMU_MAX_COPIES = 64 };       // in flight per thread; a multi-stage tile loader needs a few
struct EmuContext {                 // where a switched-out fiber (or the scheduler) resumes
#if defined(__x86_64__)
    void* sp;                       // its saved stack pointer
#else
    ucontext_t uc;
#endif
};
// What a switch reads of a thread comes first, and a thread is 72 bytes (its cp.async queue is
// elsewhere), so that a block's threads lie in a few kilobytes, which stay in the cache: with the
// queue inside, each thread took 2.6 KB and a switch to it missed the cache.
struct EmuThread {
    EmuContext ctx;
    EmuThread* next;                // the lane this one switches to at its next barrier (NULL: the scheduler)
    uint3 tid;
    int linear, warp, lane;
    int ncopies;
    int groups_committed;           // its cp_async_commit calls in this block
    EmuCopy* copies;                // its cp.async copies in flight, in issue order (EMU_MAX_COPIES)
    char* stack;                    // its lowest byte, above a guard page
    size_t stack_size;              // EMU_STACK and a few cache lines (emu_launch)
};
struct EmuState {
    uint3 block_idx, block_dim, grid_dim;
    EmuThread threads[1024];        // the fibers, made when a launch first needs them
    EmuCopy copies[1024][EMU_MAX_COPIES];     // their cp.async queues: threads[i].copies = copies[i]
    int nthreads;
    EmuThread* cur;                 // the running thread (NULL: the scheduler)
    EmuContext sched;
    std::function<void()>* body;
    long long block_gen;            // block barrier generation
    int block_acc[2];               // __syncthreads_count/or accumulators, by generation parity
    unsigned long long warp_slot[32][2][32];  // shuffle values, ldmatrix row addresses: [warp][parity][lane]
    const uint32_t* wgmma_a_slot[32][2][32];  // wgmma_bf16_rs's A fragments (NULL: wgmma_bf16's A by descriptor)
    uint32_t mma_slot[32][2][32][6];          // mma operands a[0..3], b[0..1]: [warp][parity][lane]
    float mma_d[32][2][32][4];                // mma accumulators d[0..3], in and out: [warp][parity][lane]
    uint32_t ldmatrix_slot[32][2][32][4];     // ldmatrix results r[0..3]: [warp][parity][lane]
    long long warp_gen[32];
    uint32_t runnable[32];          // each warp's lanes that can run: bit l for lane l
    uint32_t chained[32];           // the lanes whose chain (EmuThread.next) emu_step_warp built last
    EmuThread* chain[32];           // its first lane
    const char* warp_op[32];        // the warp instruction the warp's waiting lanes are at
    int warp_first[32];             // the lane that reached it first
    int count[32][5];               // how many lanes of each warp wait in each state (EMU_BLOCK_WAIT...)
    uint32_t polling[32];           // each warp's lanes whose mbarrier_try_wait said no, to be retried
    unsigned long long progress, progress_seen;  // mbarrier changes so far; when the pollers last retried
    size_t poll_bar;                // the last poller's barrier (offset) and parity, for a deadlock's report
    int poll_parity;
    unsigned long long stuck;       // where the block stood (barrier generations and counts) when its pollers last retried with nothing changed
    char* dynamic;                  // the launch's dynamic shared memory in this arena, and its size
    size_t dynamic_size;
    int nbarriers, ntma;            // the block's mbarriers and TMA copies in flight (hopper section)
    struct EmuBarrier* barriers;
    struct EmuTma* tma;
    struct EmuWgmma (*wgmma)[16];   // each warp's wgmmas in flight, in issue order
    int nwgmma[32], wgmma_groups[32];  // how many; the warp's wgmma_commit calls in this block
    int capacity;                   // fibers made so far
    const char* kernel;             // the kernel being run, for messages
    unsigned long long launch;      // the launch its fibers and sizes are set up for (emu_run_blocks)
    unsigned long long schedule_rng, async_rng;  // the block's random choices (emu_run_blocks)
    char* arena;                    // its copy of shared memory (below)
    struct EmuShadow* shadow;       // the race detector's shadow of it
    struct EmuShadowSites* sites;   // and where each access it holds was
    uint8_t* async_reads;           // the wgmma reads in flight of each byte
    const void** async_read_sites;  // and where the last was issued, by which thread
    uint16_t* async_read_threads;
};
// The state of the worker this thread is (see "workers" below): the main thread's is emu_main,
// and so is that of any other thread that is not a worker.
static EmuState emu_main;
static thread_local EmuState* emu = &emu_main;
static int emu_cuda_error;          // the next cudaGetLastError's answer (a bad launch)
static int emu_sticky_error;        // a kernel "faulted" (CUDA_EMU_FAULT): every later call fails
static const size_t EMU_STACK = 32 * 1024;  // kernels keep little on the stack
static const int EMU_PREFETCH_LINES = 4;    // of a lane's stack, asked for before its turn (emu_yield)

#define threadIdx (emu->cur->tid)
#define blockIdx (emu->block_idx)
#define blockDim (emu->block_dim)
#define gridDim (emu->grid_dim)
#define warpSize 32

// AddressSanitizer is not told about the switches between fibers: its bookkeeping at each switch
// cost more than the rest of the emulator. Its checks of memory do not depend on which stack a
// function runs on; what does: an error report's stack trace (taken by the slow unwinder, as
// fast_unwind_on_fatal=0, the default, asks, which needs no bounds), the clearing of a stack
// before a call that does not return (emu_fatal tells it the fiber's stack first, and is noipa so
// that its callers do not learn that it never returns and clear the stack before it can), and
// the fake stacks of detect_stack_use_after_return (off by default; emu_launch refuses it).
#if defined(__SANITIZE_ADDRESS__)
#define EMU_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define EMU_ASAN 1
#endif
#endif
#ifdef EMU_ASAN
#include <sanitizer/common_interface_defs.h>
#include <sanitizer/asan_interface.h>
#endif

// The start of a report that ends in abort: one at a time, since workers (below) run blocks at
// once and two may find an error together. The lock is never released; the process ends.
static pthread_mutex_t emu_report_lock = PTHREAD_MUTEX_INITIALIZER;
EMU_INTERNAL static void emu_report_begin(void) { pthread_mutex_lock(&emu_report_lock); }

__attribute__((noipa)) static void emu_fatal(const char* what) {
    emu_report_begin();
#ifdef EMU_ASAN
    char here;  // on a fiber: its stack becomes the thread's, as abort's stack clearing needs
    if (emu->cur != NULL && &here >= emu->cur->stack && &here < emu->cur->stack + emu->cur->stack_size) {
        __sanitizer_start_switch_fiber(NULL, emu->cur->stack, emu->cur->stack_size);
        __sanitizer_finish_switch_fiber(NULL, NULL, NULL);
    }
#endif
    fprintf(stderr, "cuda_emu: %s (kernel %s, block %u,%u,%u thread %u,%u,%u)\n", what,
            emu->kernel ? emu->kernel : "?", emu->block_idx.x, emu->block_idx.y, emu->block_idx.z,
            emu->cur ? emu->cur->tid.x : 0, emu->cur ? emu->cur->tid.y : 0, emu->cur ? emu->cur->tid.z : 0);
    abort();
}

// ---------- shared memory: an arena per worker ----------
// Every __shared__ array of every kernel (each template instance has its own) is a piece of the
// arena, given out once, when a thread first reaches the declaration: cuda_emu.py makes each a
// static offset (emu_shared_alloc) and a reference into the running worker's copy of the arena
// (emu_shared), since each worker (below) runs blocks of its own. Pieces are 128-byte aligned,
// or as __align__ asks where more, and each is followed by a gap that no array owns: AddressSanitizer
// is told the gaps are poisoned, and the race detector stops at an access to them, so an index
// past an array's end is caught as it is on a static array. A new piece holds 0xff bytes (NaN
// floats), not zeros: a GPU's shared memory starts with whatever was there. A launch's dynamic
// shared memory (its third launch parameter) is a piece of its own too, one per kernel and size,
// 1024-byte aligned as the 128-byte swizzle needs (emu_dynamic_piece).
enum { EMU_ARENA_BYTES = 16 << 20, EMU_ARENA_GAP = 256, EMU_MAX_WORKERS = 64 };
struct EmuSharedArray {
    size_t offset, size;
    const char* name;
    const char* kernel;             // the kernel that first declared it
};
static size_t emu_arena_used;
static EmuSharedArray emu_arrays[4096];
static int emu_narrays;
static EmuState* emu_workers[EMU_MAX_WORKERS];  // the workers with an arena, emu_main first
static int emu_nworkers;
static pthread_mutex_t emu_arena_mutex = PTHREAD_MUTEX_INITIALIZER;  // the layout and the list of arenas
static void emu_shadow_own(EmuState* w, size_t offset, size_t size);  // the race detector's, below

// Opens piece [offset, offset + size) of worker w's arena: NaN bytes, not poisoned.
static void emu_piece_open(EmuState* w, size_t offset, size_t size) {
#ifdef EMU_ASAN
    ASAN_UNPOISON_MEMORY_REGION(w->arena + offset, size);
#endif
    memset(w->arena + offset, 0xff, size);
    emu_shadow_own(w, offset, size);
}
// Worker w's arena, with the pieces the others have (emu_arena_mutex held).
static void emu_arena_make(EmuState* w) {
    void* a = mmap(NULL, EMU_ARENA_BYTES, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (a == MAP_FAILED) { fprintf(stderr, "cuda_emu: out of memory for shared memory\n"); exit(1); }
    w->arena = (char*)a;
#ifdef EMU_ASAN
    ASAN_POISON_MEMORY_REGION(w->arena, EMU_ARENA_BYTES);
#endif
    for (int i = 0; i < emu_narrays; i++) emu_piece_open(w, emu_arrays[i].offset, emu_arrays[i].size);
    emu_workers[emu_nworkers++] = w;
}

// A new array of the given size and alignment: its offset in every worker's arena.
EMU_INTERNAL static size_t emu_shared_alloc_aligned(size_t size, const char* name, size_t align, const char* kernel) {
    pthread_mutex_lock(&emu_arena_mutex);
    size_t offset = (emu_arena_used + align - 1) / align * align;
    if (offset + size + EMU_ARENA_GAP > EMU_ARENA_BYTES || emu_narrays == (int)(sizeof(emu_arrays) / sizeof(emu_arrays[0])))
        emu_fatal("the kernels' __shared__ arrays outgrow the arena (EMU_ARENA_BYTES)");
    EmuSharedArray a = {offset, size, name, kernel};
    emu_arrays[emu_narrays++] = a;
    for (int i = 0; i < emu_nworkers; i++) emu_piece_open(emu_workers[i], offset, size);
    __atomic_store_n(&emu_arena_used, offset + size + EMU_ARENA_GAP, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&emu_arena_mutex);
    return offset;
}
EMU_INTERNAL static size_t emu_shared_alloc(size_t size, const char* name, size_t align = 128) {
    return emu_shared_alloc_aligned(size, name, align > 128 ? align : 128, emu->kernel ? emu->kernel : "?");
}
static inline void* emu_shared(size_t offset) { return emu->arena + offset; }
// `extern __shared__ T a[];` (cuda_emu.py): the running launch's dynamic piece. Without one, an
// address past every piece, where any access is out of bounds.
static inline void* emu_dynamic_shared(void) {
    return emu->dynamic_size > 0 ? emu->dynamic : emu->arena + __atomic_load_n(&emu_arena_used, __ATOMIC_ACQUIRE);
}
// The shared-memory address of p, as cvta.to.shared gives it: its offset in the arena. The arena
// is mmap'd (page-aligned), so the offset keeps the address bits that the swizzles read.
EMU_INTERNAL static inline size_t __cvta_generic_to_shared(const void* p) { return (size_t)((const char*)p - emu->arena); }

EMU_INTERNAL static inline bool emu_in_arena(const void* p) { return (uintptr_t)p - (uintptr_t)emu->arena < emu_arena_used; }

// "name+offset" of the array an arena address falls in, or "the gap after name".
static void emu_describe_shared(const void* p, char* out, size_t n) {
    size_t off = (size_t)((const char*)p - emu->arena);
    const EmuSharedArray* best = NULL;
    for (int i = 0; i < emu_narrays; i++)
        if (emu_arrays[i].offset <= off && (best == NULL || emu_arrays[i].offset > best->offset)) best = &emu_arrays[i];
    if (best == NULL) snprintf(out, n, "arena+%zu", off);
    else if (off < best->offset + best->size) snprintf(out, n, "%s+%zu (%s)", best->name, off - best->offset, best->kernel);
    else snprintf(out, n, "%zu bytes past the end of %s (%s, %zu bytes)", off - best->offset - best->size, best->name,
                  best->kernel, best->size);
}

// ---------- the race detector (CUDA_EMU_RACE) ----------
// One shadow per arena byte: its last write, and up to two of its readers since, from different
// warps (a write races with a reader of another warp; of two readers from different warps, at
// least one is not the writer's). Each access holds its barrier interval: the epoch, which every
// __syncthreads and every block start moves on, so accesses of earlier intervals or earlier blocks
// never compare equal to the current one. A read of a byte whose last write is older than the
// block (emu_block_epoch) reads what an earlier block left, or the arena's fill: shared memory the
// block never wrote, which is undefined on a GPU.
static thread_local uint64_t emu_epoch = 1, emu_block_epoch = 1;  // the running worker's
enum { EMU_MAX_MBARRIERS = 64 };  // per block, for the race detector's phases seen
// mbarrier phases, numbered as they complete on this worker, and each thread's last seen of each
// barrier (numbers below emu_block_phase belong to earlier blocks: never seen, never current)
static thread_local uint64_t emu_phase = 1, emu_block_phase = 1;
static thread_local uint64_t emu_phase_seen[1024][EMU_MAX_MBARRIERS];
static thread_local int emu_barriers_used;       // the block's mbarriers, for the merge at __syncthreads
static thread_local uint32_t emu_fences[1024];   // each thread's fence.proxy.async count
// The async proxy (Hopper's TMA copies and wgmma products) has rules of its own, since its accesses
// are ordered by mbarrier phases and wgmma_wait rather than by __syncthreads:
//   a TMA copy writes its bytes from its issue until the mbarrier phase that counts them
//     completes (EMU_TMA | EMU_PENDING: any access then is a race); after, a thread may read them
//     only once it has seen that phase complete (its mbarrier_try_wait said so, or a
//     __syncthreads after another thread's did): the bytes hold the barrier and the phase's
//     number (EMU_TMA_DONE), and each thread the last phase of each barrier it has seen;
//   a wgmma reads its operands from its issue until the wgmma_wait that retires it: a write to
//     them before, by any thread or copy, is a race (async_reads counts the reads in flight);
//   bytes written by ordinary stores are seen by the async proxy only after the writer's
//     fence.proxy.async: each write keeps the writer's count of fences (3 bits), and a wgmma
//     that reads it when the count has not moved since is a race.
// Not checked: ordinary accesses ordered by mbarriers alone (only __syncthreads orders them here),
// nor a TMA copy against ordinary reads of its bytes in the same interval.
enum { EMU_PENDING = 1, EMU_ASYNC = 2, EMU_LDMATRIX = 4, EMU_TMA = 8, EMU_TMA_DONE = 16, EMU_WGMMA = 32 };
struct EmuAccess {                  // one access, unpacked for a report
    uint16_t thread;                // the thread's linear index in its block (EMU_TMA_DONE: the mbarrier)
    uint8_t kind;                   // EMU_ASYNC (a cp.async copy; EMU_PENDING until its wait), EMU_LDMATRIX,
                                    // EMU_TMA (| EMU_PENDING), EMU_TMA_DONE, EMU_WGMMA
    const void* pc;                 // the kernel's instruction
};
// A byte's shadow is two words, read at every access: 16 bytes a byte, so that the shadow of the
// arrays a kernel uses stays in the cache (as three records of thread, kind, epoch and site it
// was 80, and the detector's runs waited on loading it):
//   w   its last write:           epoch << 24 | kind << 16 | fences << 13 | EMU_OWNED | thread
//                                 (EMU_TMA_DONE: phase << 24 | kind << 16 | EMU_OWNED | mbarrier)
//   r   its readers in interval epoch, one or two:
//                                 epoch << 24 | EMU_R2 | r2's EMU_R_LDMATRIX, thread << 11 | r's, thread
// with a thread's linear index in bits 0-9 (a block has at most 1024), EMU_OWNED set where the
// byte is inside an array (not in a gap), and the epoch in the top 40 bits. Where each access was
// (the kernel's instruction) is kept apart, in EmuShadowSites, written with the word and read
// only for a report.
struct EmuShadow { uint64_t w, r; };
struct EmuShadowSites { const void* w; const void* r; const void* r2; };
enum : uint64_t {
    EMU_THREAD_BITS = 0x3ff, EMU_OWNED = 1u << 12, EMU_R_LDMATRIX = 1u << 10, EMU_R2 = 1u << 22,
    EMU_EPOCH_SHIFT = 24, EMU_FENCE_SHIFT = 13,
};

#ifndef CUDA_EMU_RACE
static void emu_shadow_own(EmuState* w, size_t offset, size_t size) {}
static inline void emu_race_next_interval(void) {}
static inline void emu_race_block_start(void) {}
static inline void emu_race_interval_end(void) {}
static inline void emu_race_access(const void* p, size_t n, bool write, const void* pc, int kind) {}
static inline void emu_race_retire(const void* p, size_t n) {}
static inline void emu_race_tma_issue(const void* p, size_t n, const void* pc) {}
static inline void emu_race_tma_complete(const void* p, size_t n, int barrier, uint64_t phase) {}
static inline void emu_race_phase_seen(int barrier, uint64_t phase) {}
static inline void emu_race_wgmma_read(const void* p, size_t n, const void* pc) {}
static inline void emu_race_wgmma_retire(const void* p, size_t n) {}
static inline void emu_race_fence_proxy_async(void) {}
static inline void emu_race_barrier_merge(void) {}
static inline uint64_t emu_race_next_phase(void) { return 0; }
#else
// Worker w's shadow of its arena, made with its first piece: [offset, offset + size) owned.
static void emu_shadow_own(EmuState* w, size_t offset, size_t size) {
    if (w->shadow == NULL) {
        void* s = mmap(NULL, EMU_ARENA_BYTES * sizeof(EmuShadow), PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        void* sites = mmap(NULL, EMU_ARENA_BYTES * sizeof(EmuShadowSites), PROT_READ | PROT_WRITE,
                           MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        void* reads = mmap(NULL, EMU_ARENA_BYTES * (1 + 2 + sizeof(void*)), PROT_READ | PROT_WRITE,
                           MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (s == MAP_FAILED || sites == MAP_FAILED || reads == MAP_FAILED) { fprintf(stderr, "cuda_emu: out of memory for the race detector's shadow\n"); exit(1); }
        w->shadow = (EmuShadow*)s;
        w->sites = (EmuShadowSites*)sites;
        w->async_read_sites = (const void**)reads;
        w->async_read_threads = (uint16_t*)((char*)reads + EMU_ARENA_BYTES * sizeof(void*));
        w->async_reads = (uint8_t*)reads + EMU_ARENA_BYTES * (2 + sizeof(void*));
    }
    for (size_t i = 0; i < size; i++) w->shadow[offset + i].w |= EMU_OWNED;
}

// The next barrier interval: at every __syncthreads, and at a block's start, which is also the
// block's epoch. The shadow holds 40 bits of it: a worker that reaches 2^40 intervals (weeks of
// emulation) stops rather than compare epochs that wrapped around.
EMU_INTERNAL static void emu_race_next_interval(void) {
    if (++emu_epoch >> 40) emu_fatal("the race detector's epochs are spent (2^40 barrier intervals on one worker)");
}
EMU_INTERNAL static void emu_race_block_start(void) {
    emu_race_next_interval();
    emu_block_epoch = emu_epoch;
    emu_block_phase = emu_phase;
    emu_barriers_used = 0;
    memset(emu_fences, 0, sizeof emu_fences);
}

// "file:line (function)" of a kernel instruction, with the calls it was inlined into after "<-",
// from the program's debug information (addr2line, from binutils, which GCC needs anyway).
EMU_INTERNAL static void emu_print_site(const void* pc) {
    Dl_info info;
    uintptr_t addr = (uintptr_t)pc - 1;  // pc is a return address: the call is just before it
    if (dladdr(pc, &info) && info.dli_fbase != NULL && ((const Elf64_Ehdr*)info.dli_fbase)->e_type == ET_DYN)
        addr -= (uintptr_t)info.dli_fbase;  // a position-independent program: addresses from its start
    char cmd[256], fn[512], where[512];
    snprintf(cmd, sizeof cmd, "addr2line -C -f -i -e /proc/%d/exe 0x%llx 2>/dev/null", (int)getpid(),
             (unsigned long long)addr);
    FILE* f = popen(cmd, "r");
    int n = 0;
    while (f != NULL && fgets(fn, sizeof fn, f) && fgets(where, sizeof where, f)) {
        fn[strcspn(fn, "\n")] = where[strcspn(where, "\n")] = '\0';
        fn[strcspn(fn, "(")] = '\0';  // the name with its template arguments, not its parameters
        size_t lt = strcspn(fn, "<");  // nor its return type, which a template's name starts with
        const char* name = fn;
        for (size_t k = 0; k < lt; k++)
            if (fn[k] == ' ') name = fn + k + 1;
        if (strstr(where, " (discriminator")) *strstr(where, " (discriminator") = '\0';
        const char* file = strstr(where, "gpt2/") ? strstr(where, "gpt2/") : strstr(where, "dev/") ? strstr(where, "dev/") : where;
        fprintf(stderr, "%s%s (%s)", n++ ? " <- " : "", file, name);
    }
    if (f != NULL) pclose(f);
    if (n == 0) fprintf(stderr, "%p (no line information: build with -g)", pc);
}

EMU_INTERNAL static void emu_print_access(const char* label, const EmuAccess* a, bool write) {
    if (a->kind & EMU_TMA_DONE) {
        fprintf(stderr, "  %s TMA copy, complete with mbarrier %d's phase, issued at ", label, a->thread);
        emu_print_site(a->pc);
        fprintf(stderr, "\n");
        return;
    }
    fprintf(stderr, "  %s %s by thread %d (warp %d) at ", label,
            a->kind & EMU_ASYNC ? (a->kind & EMU_PENDING ? "cp.async copy, in flight (its thread has not waited for it)"
                                                         : "cp.async copy")
            : a->kind & EMU_TMA ? (a->kind & EMU_PENDING ? "TMA copy, in flight (its mbarrier phase has not completed)"
                                                         : "TMA copy")
            : a->kind & EMU_WGMMA ? (a->kind & EMU_PENDING ? "wgmma read, in flight (no wgmma_wait has retired it)"
                                                           : "wgmma read")
            : a->kind & EMU_LDMATRIX ? "ldmatrix read" : write ? "write" : "read",
            a->thread, a->thread / 32);
    emu_print_site(a->pc);
    fprintf(stderr, "\n");
}

EMU_INTERNAL static void emu_race(const void* p, const EmuAccess* first, bool first_write, const EmuAccess* second,
                                  bool second_write, const char* why = NULL) {
    emu_report_begin();
    char where[256];
    emu_describe_shared(p, where, sizeof where);
    fprintf(stderr, "cuda_emu: race on shared memory in kernel %s, block (%u,%u,%u), at %s:\n", emu->kernel,
            emu->block_idx.x, emu->block_idx.y, emu->block_idx.z, where);
    emu_print_access("earlier:", first, first_write);
    emu_print_access("now:    ", second, second_write);
    if (why != NULL)
        fprintf(stderr, "  %s\n", why);
    else if (first->kind & EMU_PENDING && first->kind & EMU_TMA)
        fprintf(stderr, "  before this thread saw the mbarrier phase that counts the copy's bytes complete\n");
    else if (first->kind & EMU_PENDING && first->kind & EMU_WGMMA)
        fprintf(stderr, "  before the wgmma_wait that retires the wgmma (and an mbarrier or __syncthreads after it)\n");
    else if (first->kind & EMU_PENDING)
        fprintf(stderr, "  before the copy's cp_async_wait (and, for another thread, a __syncthreads after it)\n");
    else
        fprintf(stderr, "  with no __syncthreads between them\n");
    abort();
}

// The first read in this interval of a byte the block never wrote: reported when the interval
// ends (emu_race_interval_end), so that a race in the interval, which may be the cause (another
// warp's write that should have come first), is reported instead.
static thread_local struct { const void* at; EmuAccess read; } emu_unwritten;

// The accesses a shadow word holds, unpacked for a report.
static EmuAccess emu_write_of(uint64_t w, const void* pc) {
    return {(uint16_t)(w & EMU_THREAD_BITS), (uint8_t)(w >> 16), pc};
}
static EmuAccess emu_reader_of(uint64_t r, int second, const void* pc) {
    uint64_t bits = second ? r >> 11 : r;
    return {(uint16_t)(bits & EMU_THREAD_BITS), (uint8_t)(bits & EMU_R_LDMATRIX ? EMU_LDMATRIX : 0), pc};
}

__attribute__((noinline, cold)) static void emu_race_out_of_bounds(const void* p, bool write, const void* pc) {
    emu_report_begin();
    char where[256];
    emu_describe_shared(p, where, sizeof where);
    fprintf(stderr, "cuda_emu: shared-memory %s out of bounds in kernel %s, block (%u,%u,%u), thread %d: %s, at ",
            write ? "write" : "read", emu->kernel, emu->block_idx.x, emu->block_idx.y, emu->block_idx.z,
            emu->cur->linear, where);
    emu_print_site(pc);
    fprintf(stderr, "\n");
    abort();
}

// One byte of an access: checks it against its shadow s (and stops at a race), then records it.
// Returns what it changed: EMU_CHANGED_W (a write), _R or _R2 (the first or second reader), or 0.
enum { EMU_CHANGED_W = 1, EMU_CHANGED_R, EMU_CHANGED_R2 };
struct EmuNow {                     // the access being checked, and the running thread's state
    EmuAccess access;
    bool write;
    uint64_t thread, warp, epoch, block_epoch;  // the epochs shifted as in the shadow's words
};
static const uint64_t EMU_EPOCH_BITS = ~(uint64_t)0 << EMU_EPOCH_SHIFT;
EMU_INTERNAL static inline int emu_race_byte(EmuShadow* s, const EmuShadowSites* site, const char* byte, const EmuNow* a) {
    uint64_t w = s->w, r = s->r;
    const EmuAccess* now = &a->access;
    EmuAccess last;
    size_t off = (size_t)(byte - emu->arena);
    if (!(w & EMU_OWNED)) emu_race_out_of_bounds(byte, a->write, now->pc);
    if (w & (EMU_PENDING << 16)) { last = emu_write_of(w, site->w); emu_race(byte, &last, true, now, a->write); }
    if (w & (EMU_TMA_DONE << 16)) {  // a complete TMA copy: the thread must have seen its phase
        uint64_t phase = w >> EMU_EPOCH_SHIFT;
        int barrier = (int)(w & EMU_THREAD_BITS);
        if (phase < emu_block_phase) {  // an earlier block's
            if (!a->write && emu_unwritten.at == NULL) { emu_unwritten.at = byte; emu_unwritten.read = *now; }
        } else if (emu_phase_seen[a->thread][barrier] < phase) {
            last = emu_write_of(w, site->w);
            emu_race(byte, &last, true, now, a->write,
                     "by a thread that has not seen the copy's mbarrier phase complete (mbarrier_try_wait, or a "
                     "__syncthreads after another thread's)");
        }
        w = a->block_epoch | EMU_OWNED | a->thread;  // as written before this interval
    }
    if (a->write && emu->async_reads[off] != 0) {
        last = {emu->async_read_threads[off], EMU_WGMMA | EMU_PENDING, emu->async_read_sites[off]};
        emu_race(byte, &last, false, now, true);
    }
    if (!a->write && (w & EMU_EPOCH_BITS) < a->block_epoch && emu_unwritten.at == NULL) {
        emu_unwritten.at = byte;  // reported at the interval's end, unless a race is first
        emu_unwritten.read = *now;
    }
    if ((w & EMU_EPOCH_BITS) == a->epoch && (w & EMU_THREAD_BITS) / 32 != a->warp) {
        last = emu_write_of(w, site->w);
        emu_race(byte, &last, true, now, a->write);
    }
    uint64_t ldmatrix = now->kind & EMU_LDMATRIX ? EMU_R_LDMATRIX : 0;
    if (a->write) {
        if ((r & EMU_EPOCH_BITS) == a->epoch) {
            if ((r & EMU_THREAD_BITS) / 32 != a->warp) { last = emu_reader_of(r, 0, site->r); emu_race(byte, &last, false, now, true); }
            if ((r & EMU_R2) && (r >> 11 & EMU_THREAD_BITS) / 32 != a->warp) {
                last = emu_reader_of(r, 1, site->r2);
                emu_race(byte, &last, false, now, true);
            }
        }
        s->w = a->epoch | (uint64_t)now->kind << 16 | (uint64_t)(emu_fences[a->thread] & 7) << EMU_FENCE_SHIFT |
               EMU_OWNED | a->thread;
        return EMU_CHANGED_W;
    }
    if ((r & EMU_EPOCH_BITS) != a->epoch) {
        s->r = a->epoch | ldmatrix | a->thread;
        return EMU_CHANGED_R;
    }
    if ((r & EMU_THREAD_BITS) / 32 != a->warp && !(r & EMU_R2)) {
        s->r = r | EMU_R2 | (ldmatrix | a->thread) << 11;
        return EMU_CHANGED_R2;
    }
    return 0;
}

// Where the access that emu_race_byte recorded was: the site of the word it changed, if any.
EMU_INTERNAL static inline void emu_race_site(EmuShadowSites* site, int changed, const void* pc) {
    if (changed == EMU_CHANGED_W) site->w = pc;
    else if (changed == EMU_CHANGED_R) site->r = pc;
    else if (changed == EMU_CHANGED_R2) site->r2 = pc;
}

// The running thread reads or writes [p, p + n) of the arena at the kernel's instruction pc. Most
// accesses meet bytes whose shadows are all alike (a float or a float4 written and read as one):
// those are checked once, for the first byte, and what changed is copied to the others.
EMU_INTERNAL static void emu_race_access(const void* p, size_t n, bool write, const void* pc, int kind) {
    EmuThread* t = emu->cur;
    if (t == NULL) return;  // the host: not a kernel's access
    EmuNow a = {{(uint16_t)t->linear, (uint8_t)kind, pc}, write, (uint64_t)t->linear, (uint64_t)t->linear / 32,
                emu_epoch << EMU_EPOCH_SHIFT, emu_block_epoch << EMU_EPOCH_SHIFT};
    size_t off = (size_t)((const char*)p - emu->arena);
    EmuShadow* s = emu->shadow + off;
    EmuShadowSites* site = emu->sites + off;
    bool alike = true;
    for (size_t i = 1; i < n; i++) alike &= (s[i].w == s[0].w) & (s[i].r == s[0].r);
    if (alike) {
        int changed = emu_race_byte(s, site, (const char*)p, &a);
        for (size_t i = 0; i < n && changed; i++) {
            s[i] = s[0];
            emu_race_site(&site[i], changed, pc);
        }
        return;
    }
    for (size_t i = 0; i < n; i++) emu_race_site(&site[i], emu_race_byte(s + i, site + i, (const char*)p + i, &a), pc);
}

// A __syncthreads or the block's end: the interval's read of unwritten memory, if any, stops the run.
EMU_INTERNAL static void emu_race_interval_end(void) {
    if (emu_unwritten.at == NULL) return;
    emu_report_begin();
    char where[256];
    emu_describe_shared(emu_unwritten.at, where, sizeof where);
    fprintf(stderr, "cuda_emu: read of shared memory that no thread of this block has written, in kernel %s, "
            "block (%u,%u,%u), thread %d: %s, at ", emu->kernel, emu->block_idx.x, emu->block_idx.y, emu->block_idx.z,
            emu_unwritten.read.thread, where);
    emu_print_site(emu_unwritten.read.pc);
    fprintf(stderr, "\n");
    abort();
}

// A cp.async copy's wait has retired it: from now on its bytes are a plain write of this thread,
// in this interval, which the other warps may read after the next __syncthreads.
EMU_INTERNAL static void emu_race_retire(const void* p, size_t n) {
    EmuShadow* s = emu->shadow + ((const char*)p - emu->arena);
    uint64_t keep = ~EMU_EPOCH_BITS & ~((uint64_t)EMU_PENDING << 16) & ~((uint64_t)7 << EMU_FENCE_SHIFT);
    uint64_t fences = (uint64_t)(emu_fences[emu->cur->linear] & 7) << EMU_FENCE_SHIFT;
    for (size_t i = 0; i < n; i++) s[i].w = (s[i].w & keep) | fences | emu_epoch << EMU_EPOCH_SHIFT;
}

// ---------- the async proxy (see EMU_TMA above) ----------

// A TMA copy issued into [p, p + n): written from now until its phase completes.
EMU_INTERNAL static void emu_race_tma_issue(const void* p, size_t n, const void* pc) {
    EmuThread* t = emu->cur;
    size_t off = (size_t)((const char*)p - emu->arena);
    EmuAccess now = {(uint16_t)t->linear, EMU_TMA | EMU_PENDING, pc};
    for (size_t i = 0; i < n; i++) {
        EmuShadow* s = emu->shadow + off + i;
        const char* byte = (const char*)p + i;
        if (!(s->w & EMU_OWNED)) emu_race_out_of_bounds(byte, true, pc);
        if (emu->async_reads[off + i] != 0) {
            EmuAccess last = {emu->async_read_threads[off + i], EMU_WGMMA | EMU_PENDING, emu->async_read_sites[off + i]};
            emu_race(byte, &last, false, &now, true);
        }
        if (s->w & (EMU_PENDING << 16)) {
            EmuAccess last = emu_write_of(s->w, emu->sites[off + i].w);
            emu_race(byte, &last, true, &now, true);
        }
        s->w = emu_epoch << EMU_EPOCH_SHIFT | (uint64_t)(EMU_TMA | EMU_PENDING) << 16 | EMU_OWNED | t->linear;
        emu->sites[off + i].w = pc;
    }
}

// The phase that counted the copy's bytes completed: they hold the barrier and the phase.
EMU_INTERNAL static void emu_race_tma_complete(const void* p, size_t n, int barrier, uint64_t phase) {
    EmuShadow* s = emu->shadow + ((const char*)p - emu->arena);
    for (size_t i = 0; i < n; i++)
        s[i].w = phase << EMU_EPOCH_SHIFT | (uint64_t)EMU_TMA_DONE << 16 | EMU_OWNED | (uint64_t)barrier;
}
// A number for a phase that completes now, above every earlier one on this worker.
EMU_INTERNAL static uint64_t emu_race_next_phase(void) { return ++emu_phase; }

// The running thread has seen `phase` of mbarrier `barrier` complete (0: none yet).
EMU_INTERNAL static void emu_race_phase_seen(int barrier, uint64_t phase) {
    if (barrier >= EMU_MAX_MBARRIERS) emu_fatal("more mbarriers in a block than the race detector follows (EMU_MAX_MBARRIERS)");
    uint64_t* seen = &emu_phase_seen[emu->cur->linear][barrier];
    if (*seen < phase) *seen = phase;
    if (emu_barriers_used <= barrier) emu_barriers_used = barrier + 1;
}
// At __syncthreads: what one thread has seen, every thread has.
EMU_INTERNAL static void emu_race_barrier_merge(void) {
    for (int b = 0; b < emu_barriers_used; b++) {
        uint64_t most = 0;
        for (int t = 0; t < emu->nthreads; t++) most = max(most, emu_phase_seen[t][b]);
        for (int t = 0; t < emu->nthreads; t++) emu_phase_seen[t][b] = most;
    }
}

// fence.proxy.async: the running thread's stores so far are visible to the async proxy.
EMU_INTERNAL static void emu_race_fence_proxy_async(void) { emu_fences[emu->cur->linear]++; }

// A wgmma reads [p, p + n) from now until a wgmma_wait retires it: what it reads must be written
// and ordered before (a complete copy whose phase this thread has seen, or ordinary stores of a
// past interval or of its warp, followed by their writer's fence.proxy.async).
EMU_INTERNAL static void emu_race_wgmma_read(const void* p, size_t n, const void* pc) {
    EmuThread* t = emu->cur;
    size_t off = (size_t)((const char*)p - emu->arena);
    EmuAccess now = {(uint16_t)t->linear, EMU_WGMMA | EMU_PENDING, pc};
    uint64_t epoch = emu_epoch << EMU_EPOCH_SHIFT;
    for (size_t i = 0; i < n; i++) {
        uint64_t w = emu->shadow[off + i].w;
        const char* byte = (const char*)p + i;
        const void* site = emu->sites[off + i].w;
        int kind = (int)(w >> 16 & 0xff), writer = (int)(w & EMU_THREAD_BITS);
        if (!(w & EMU_OWNED)) emu_race_out_of_bounds(byte, false, pc);
        EmuAccess last = emu_write_of(w, site);
        if (kind & EMU_PENDING) {
            emu_race(byte, &last, true, &now, false);
        } else if (kind & EMU_TMA_DONE) {
            uint64_t phase = w >> EMU_EPOCH_SHIFT;
            if (phase < emu_block_phase) {
                if (emu_unwritten.at == NULL) { emu_unwritten.at = byte; emu_unwritten.read = now; }
            } else if (emu_phase_seen[t->linear][writer] < phase) {
                emu_race(byte, &last, true, &now, false,
                         "by a wgmma of a thread that has not seen the copy's mbarrier phase complete");
            }
        } else if ((w & EMU_EPOCH_BITS) < emu_block_epoch << EMU_EPOCH_SHIFT) {
            if (emu_unwritten.at == NULL) { emu_unwritten.at = byte; emu_unwritten.read = now; }
        } else if ((w & EMU_EPOCH_BITS) == epoch && writer / 32 != t->linear / 32) {
            emu_race(byte, &last, true, &now, false);
        } else if ((w >> EMU_FENCE_SHIFT & 7) == (emu_fences[writer] & 7)) {
            emu_race(byte, &last, true, &now, false,
                     "with no fence.proxy.async by the writer between its store and the wgmma (which reads "
                     "through the async proxy)");
        }
        if (emu->async_reads[off + i] == 255) emu_fatal("more than 255 wgmma reads of one byte in flight");
        emu->async_reads[off + i]++;
        emu->async_read_sites[off + i] = pc;
        emu->async_read_threads[off + i] = (uint16_t)t->linear;
    }
}
// A wgmma_wait retired a wgmma's read of [p, p + n).
EMU_INTERNAL static void emu_race_wgmma_retire(const void* p, size_t n) {
    uint8_t* reads = emu->async_reads + ((const char*)p - emu->arena);
    for (size_t i = 0; i < n; i++) reads[i]--;
}

// Most reads of a kernel change nothing: the bytes were written in an earlier interval of this
// block or by this warp, and this warp (or two warps) already read them in this interval. Such a
// read of n bytes whose shadows are all alike is answered here, inline in the hook, where
// emu_race_byte would find no race and nothing to record; the rest go to emu_race_access.
__attribute__((always_inline)) EMU_INTERNAL static inline bool emu_race_read_changes_nothing(const void* p, size_t n) {
    const EmuThread* t = emu->cur;
    if (t == NULL) return true;  // the host: not a kernel's access
    const EmuShadow* s = emu->shadow + ((const char*)p - emu->arena);
    uint64_t w = s->w, r = s->r, epoch = emu_epoch << EMU_EPOCH_SHIFT, warp = (uint64_t)t->linear / 32;
    for (size_t i = 1; i < n; i++)
        if (s[i].w != w || s[i].r != r) return false;
    return (w & (EMU_OWNED | (uint64_t)(EMU_PENDING | EMU_TMA_DONE) << 16)) == EMU_OWNED &&
           (w & EMU_EPOCH_BITS) >= emu_block_epoch << EMU_EPOCH_SHIFT &&
           ((w & EMU_EPOCH_BITS) != epoch || (w & EMU_THREAD_BITS) / 32 == warp) &&
           (r & EMU_EPOCH_BITS) == epoch && ((r & EMU_THREAD_BITS) / 32 == warp || (r & EMU_R2));
}

// GCC's -fsanitize=thread calls these before every load and store of the instrumented code (the
// whole program: kernels and host). Only the arena's bytes matter; the rest returns at once.
#define EMU_TSAN_HOOKS_OF(kind, n)                                                                                 \
    extern "C" EMU_HOOK void __tsan_##kind##read##n(void* p) {                                                     \
        if (emu_in_arena(p) && !emu_race_read_changes_nothing(p, n))                                               \
            emu_race_access(p, n, false, __builtin_return_address(0), 0);                                          \
    }                                                                                                              \
    extern "C" EMU_HOOK void __tsan_##kind##write##n(void* p) {                                                    \
        if (emu_in_arena(p)) emu_race_access(p, n, true, __builtin_return_address(0), 0);                          \
    }
#define EMU_TSAN_HOOKS(n) EMU_TSAN_HOOKS_OF(, n) EMU_TSAN_HOOKS_OF(unaligned_, n)
EMU_TSAN_HOOKS(1)
EMU_TSAN_HOOKS(2)
EMU_TSAN_HOOKS(4)
EMU_TSAN_HOOKS(8)
EMU_TSAN_HOOKS(16)
extern "C" EMU_HOOK void __tsan_read_range(void* p, unsigned long n) {
    if (emu_in_arena(p)) emu_race_access(p, n, false, __builtin_return_address(0), 0);
}
extern "C" EMU_HOOK void __tsan_write_range(void* p, unsigned long n) {
    if (emu_in_arena(p)) emu_race_access(p, n, true, __builtin_return_address(0), 0);
}
// Atomic loads: the guards of the static references to the arena (one thread runs at a time),
// and the host's flags that its OpenMP threads poll.
extern "C" EMU_HOOK unsigned char __tsan_atomic8_load(const volatile void* p, int order) {
    return __atomic_load_n((const volatile unsigned char*)p, __ATOMIC_ACQUIRE);
}
extern "C" EMU_HOOK int __tsan_atomic32_load(const volatile void* p, int order) {
    return __atomic_load_n((const volatile int*)p, __ATOMIC_ACQUIRE);
}
// and the arena's end, which `extern __shared__` reads when a launch has no dynamic piece
extern "C" EMU_HOOK unsigned long long __tsan_atomic64_load(const volatile void* p, int order) {
    return __atomic_load_n((const volatile unsigned long long*)p, __ATOMIC_ACQUIRE);
}
extern "C" EMU_HOOK void __tsan_init(void) {}
extern "C" EMU_HOOK void __tsan_func_entry(void* pc) {}
extern "C" EMU_HOOK void __tsan_func_exit(void* pc) {}
#endif

static void emu_thread_main(void);

#if defined(__x86_64__)
// emu_switch(save, to): pushes the callee-saved registers, stores the stack pointer in *save,
// loads `to` and pops the registers saved there. A new fiber's stack starts as if it had been
// switched out just before entering emu_fiber_start.
extern "C" void emu_switch(void** save, void* to);
extern "C" void emu_fiber_start(void);
asm(".text\n"
    ".globl emu_switch\n"
    ".type emu_switch,@function\n"
    "emu_switch:\n"
    "  pushq %rbp\n  pushq %rbx\n  pushq %r12\n  pushq %r13\n  pushq %r14\n  pushq %r15\n"
    "  movq %rsp, (%rdi)\n"
    "  movq %rsi, %rsp\n"
    "  popq %r15\n  popq %r14\n  popq %r13\n  popq %r12\n  popq %rbx\n  popq %rbp\n"
    "  ret\n"
    ".size emu_switch, .-emu_switch\n"
    ".globl emu_fiber_start\n"
    ".type emu_fiber_start,@function\n"
    "emu_fiber_start:\n"
    "  call emu_fiber_entry\n"
    "  ud2\n"
    ".size emu_fiber_start, .-emu_fiber_start\n");
extern "C" __attribute__((used, externally_visible)) void emu_fiber_entry(void) { emu_thread_main(); }
static void emu_fiber_init(EmuThread* t) {
    // The stack's top is 16-byte aligned. emu_switch pops six registers, then returns into
    // emu_fiber_start with the stack pointer at the top, aligned as before a call, as its call
    // of emu_fiber_entry needs.
    void** top = (void**)(t->stack + t->stack_size);
    top[-1] = (void*)emu_fiber_start;
    for (int r = 2; r <= 7; r++) top[-r] = NULL;
    t->ctx.sp = (void*)(top - 7);
}
EMU_BOOKKEEPING static inline void emu_switch_context(EmuContext* save, EmuContext* to) { emu_switch(&save->sp, to->sp); }
#else
static void emu_fiber_init(EmuThread* t) {
    getcontext(&t->ctx.uc);
    t->ctx.uc.uc_stack.ss_sp = t->stack;
    t->ctx.uc.uc_stack.ss_size = t->stack_size;
    t->ctx.uc.uc_link = NULL;  // never returns
    makecontext(&t->ctx.uc, emu_thread_main, 0);
}
EMU_BOOKKEEPING static inline void emu_switch_context(EmuContext* save, EmuContext* to) { swapcontext(&save->uc, &to->uc); }
#endif

// Copy c lands: its global bytes (or zeros) into shared memory, once.
EMU_INTERNAL static void emu_land(EmuCopy* c) {
    if (c->landed) return;
    if (c->zero) memset(c->dst, 0, 16);
    else memcpy(c->dst, c->src, 16);
    c->landed = 1;
}

// The running thread stops in the given state (at a barrier, or done) and switches to the next
// lane of its warp's step, or back to the scheduler after the last; returns when it is resumed.
// With CUDA_EMU_ASYNC=random each of its copies in flight may land now, between its instructions.
// (and the block's TMA copies in flight, as well)
static void emu_tma_land(int i);
__attribute__((noinline)) static void emu_land_some(EmuThread* me) {
    for (int i = 0; i < me->ncopies; i++)
        if (emu_random(&emu->async_rng, 2) == 0) emu_land(&me->copies[i]);
    for (int i = emu->ntma - 1; i >= 0; i--)
        if (emu_random(&emu->async_rng, 4) == 0) emu_tma_land(i);
}
// A lane's stack, from its saved stack pointer up: the frames it resumes into. With a block's
// hundreds of fibers these are rarely still in the cache when the lane's turn comes, so each lane,
// before it switches to the next, asks for the one after: it arrives while the next one runs.
// (4 lines: 20% off the bf16 trainer's time; 8 or more gain less, 1 or 2 a little less.)
EMU_BOOKKEEPING static inline void emu_prefetch_stack(const EmuThread* t) {
#if defined(__x86_64__)
    if (t == NULL) return;
    const char* sp = (const char*)t->ctx.sp;
    for (int i = 0; i < EMU_PREFETCH_LINES; i++)  // (GCC drops a loop of __builtin_prefetch alone)
        asm volatile("prefetcht0 %0" : : "m"(sp[64 * i]));
#endif
}
EMU_BOOKKEEPING static void emu_yield(int state) {
    EmuThread* me = emu->cur;
    if (emu_cfg.async == EMU_AT_RANDOM && (me->ncopies > 0 || emu->ntma > 0)) emu_land_some(me);
    emu->runnable[me->warp] &= ~(1u << me->lane);
    emu->count[me->warp][state]++;
    emu->cur = me->next;
    if (me->next != NULL) emu_prefetch_stack(me->next->next);
    emu_switch_context(&me->ctx, me->next != NULL ? &me->next->ctx : &emu->sched);
}

// noipa: a fiber's loop never returns, and a caller that learnt so would tell AddressSanitizer
// (__asan_handle_no_return) from the fiber's stack, which it does not know (see emu_fatal)
__attribute__((noipa)) static void emu_thread_main(void) {
    for (;;) {
        (*emu->body)();
        // A copy no wait retired may land at any time, even in the next block's shared memory.
        if (emu->cur->ncopies > 0) emu_fatal("cp.async copies never waited for (the thread ended with copies in flight)");
        if (emu->nwgmma[emu->cur->warp] > 0)
            emu_fatal("wgmma never committed and waited for (the thread ended with wgmmas in flight)");
        emu_yield(EMU_DONE);
    }
}

static inline void __syncthreads(void) { emu_yield(EMU_BLOCK_WAIT); }
static inline int __syncthreads_count(int pred) {
    int parity = (int)(emu->block_gen & 1);
    emu->block_acc[parity] += pred ? 1 : 0;
    emu_yield(EMU_BLOCK_WAIT);
    return emu->block_acc[parity];
}
static inline int __syncthreads_or(int pred) { return __syncthreads_count(pred) != 0; }
static inline int __syncthreads_and(int pred) { return __syncthreads_count(pred) == emu->nthreads; }

static inline int emu_warp(void) { return emu->cur->warp; }
static inline int emu_lane(void) { return emu->cur->linear % 32; }
EMU_BOOKKEEPING static inline int emu_warp_size(int w) {
    int n = emu->nthreads - w * 32;
    return n < 32 ? n : 32;
}
EMU_BOOKKEEPING static inline uint32_t emu_lanes(int n) { return n == 32 ? ~0u : (1u << n) - 1; }  // lanes 0..n-1
// Every lane of a warp instruction (a shuffle, mma, ldmatrix) starts here, then leaves its operands
// in the warp's exchange slots and waits for the other lanes at the warp barrier. The warp must be
// full, as all our kernels' warps are (a partial warp needs masks, which are not emulated), and
// its lanes must wait at the same instruction: lanes at different ones have diverged, which is
// undefined behaviour on a GPU and here would mix the operands of two instructions. Each slot
// array has two halves, by the parity of the warp's barrier count: a lane released from one
// barrier may run on to the next warp instruction and write its operands while slower lanes still
// read the previous ones, but not two instructions on, since the next barrier waits for them.
// Returns the parity.
EMU_BOOKKEEPING static inline int emu_warp_enter(const char* op) {
    int w = emu->cur->warp;
    if (emu_warp_size(w) != 32) {
        static thread_local char what[96];
        snprintf(what, sizeof what, "%s in a warp with fewer than 32 threads", op);
        emu_fatal(what);
    }
    if (emu->count[w][EMU_WARP_WAIT] == 0) {  // the first lane there
        emu->warp_op[w] = op;
        emu->warp_first[w] = emu->cur->lane;
    } else if (op != emu->warp_op[w] && strcmp(op, emu->warp_op[w]) != 0) {
        static thread_local char what[160];
        snprintf(what, sizeof what, "lanes of a warp wait at different warp instructions (lane %d at %s, lane %d at %s)",
                 emu->warp_first[w], emu->warp_op[w], emu->cur->lane, op);
        emu_fatal(what);
    }
    return (int)(emu->warp_gen[w] & 1);
}
// Every lane of the warp writes its value, waits for the others, reads its source lane's value.
template <typename V>
EMU_BOOKKEEPING static V emu_shuffle(unsigned mask, V v, int src) {
    static_assert(sizeof(V) <= 8, "shuffle of a type wider than 8 bytes");
    if (mask != 0xffffffffu) emu_fatal("shuffle with a partial mask is not emulated");
    int w = emu->cur->warp, lane = emu->cur->linear % 32, parity = emu_warp_enter("shuffle");
    memcpy(&emu->warp_slot[w][parity][lane], &v, sizeof(V));
    emu_yield(EMU_WARP_WAIT);
    V r;
    memcpy(&r, &emu->warp_slot[w][parity][src & 31], sizeof(V));
    return r;
}
template <typename V>
static inline V __shfl_xor_sync(unsigned mask, V v, int m, int width = 32) {
    if (width != 32) emu_fatal("shuffle width != 32 is not emulated");
    return emu_shuffle(mask, v, emu_lane() ^ m);
}
template <typename V>
static inline V __shfl_down_sync(unsigned mask, V v, unsigned d, int width = 32) {
    if (width != 32) emu_fatal("shuffle width != 32 is not emulated");
    int src = emu_lane() + (int)d;
    return emu_shuffle(mask, v, src < 32 ? src : emu_lane());
}
template <typename V>
static inline V __shfl_up_sync(unsigned mask, V v, unsigned d, int width = 32) {
    if (width != 32) emu_fatal("shuffle width != 32 is not emulated");
    int src = emu_lane() - (int)d;
    return emu_shuffle(mask, v, src >= 0 ? src : emu_lane());
}
template <typename V>
static inline V __shfl_sync(unsigned mask, V v, int src, int width = 32) {
    if (width != 32) emu_fatal("shuffle width != 32 is not emulated");
    return emu_shuffle(mask, v, src);
}
static inline void __syncwarp(unsigned mask = 0xffffffffu) { emu_shuffle(mask, 0, 0); }

// ---------- tensor-core instructions ----------
// The functions gpt2/gpu/matmul_bf16.cuh defines with PTX (section "tensor-core instructions"),
// from the PTX ISA's definitions; its comments give the fragment layouts.

// One bf16 half of a 32-bit register as a float: the lower-numbered element is the low half.
EMU_BOOKKEEPING static inline float emu_bf16_half(uint32_t reg, int high) {
    uint32_t u = high ? reg & 0xffff0000u : reg << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}
// Whether the running lane is the last of warp w to reach the warp instruction.
EMU_BOOKKEEPING static inline bool emu_last_to_arrive(int w) { return emu->count[w][EMU_WARP_WAIT] == 31; }

// The whole warp's mma, by its last lane to arrive: A, B and D gathered once from the 32 lanes'
// fragments, by the fragment layout; D += A B as a 16x16 by 16x8 product, a row of D at a time
// (eight sums side by side, which the compiler puts in vector registers); D scattered back to the
// lanes' slots. Lane 4g + q holds in a[j] A's row g + 8 (j % 2), columns 2q + 8 (j / 2) (low half)
// and the next; in b[j] B's column g, rows 2q + 8 j (low half) and the next; in d[i] D's row
// g + 8 (i / 2), column 2q + i % 2.
EMU_BOOKKEEPING static void emu_mma_warp(int w, int parity) {
    const uint32_t (*slot)[6] = emu->mma_slot[w][parity];
    float (*d)[4] = emu->mma_d[w][parity];
    float A[16][16], B[16][8], D[16][8];
    for (int lane = 0; lane < 32; lane++) {
        int g = lane / 4, q = lane % 4;
        for (int j = 0; j < 4; j++)
            for (int h = 0; h < 2; h++) A[g + 8 * (j % 2)][2 * q + 8 * (j / 2) + h] = emu_bf16_half(slot[lane][j], h);
        for (int j = 0; j < 2; j++)
            for (int h = 0; h < 2; h++) B[2 * q + 8 * j + h][g] = emu_bf16_half(slot[lane][4 + j], h);
        for (int i = 0; i < 4; i++) D[g + 8 * (i / 2)][2 * q + i % 2] = d[lane][i];
    }
    for (int r = 0; r < 16; r++)
        for (int k = 0; k < 16; k++)
            for (int n = 0; n < 8; n++) D[r][n] += A[r][k] * B[k][n];
    for (int lane = 0; lane < 32; lane++) {
        int g = lane / 4, q = lane % 4;
        for (int i = 0; i < 4; i++) d[lane][i] = D[g + 8 * (i / 2)][2 * q + i % 2];
    }
}
// mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32: d += A B for the warp's 16x16 A and 16x8
// B. Every lane leaves its a[4], b[2] and d[4] in the slots; the last to arrive computes the whole
// warp's (emu_mma_warp), and after the barrier each lane takes its d back. The products of two
// bf16 are exact in float32; the sum's order and rounding on a tensor core are unspecified, here
// it is d, then k = 0..15, in float32.
EMU_INTERNAL static void mma_bf16_16816(float* d, const uint32_t* a, const uint32_t* b) {
    int w = emu_warp(), lane = emu_lane(), parity = emu_warp_enter("mma_bf16_16816");
    uint32_t* mine = emu->mma_slot[w][parity][lane];
    for (int i = 0; i < 4; i++) mine[i] = a[i];
    mine[4] = b[0];
    mine[5] = b[1];
    float* acc = emu->mma_d[w][parity][lane];
    for (int i = 0; i < 4; i++) acc[i] = d[i];
    if (emu_last_to_arrive(w)) emu_mma_warp(w, parity);
    emu_yield(EMU_WARP_WAIT);
    for (int i = 0; i < 4; i++) d[i] = acc[i];
}
// ldmatrix.sync.aligned.m8n8.x4{.trans}.shared.b16 for the whole warp, from the row addresses in
// the slots (lanes 8i..8i+7: rows 0..7 of matrix i). Lane l receives in r[i] row l/4, columns
// 2(l%4) and 2(l%4)+1 of matrix i; with .trans, column l/4 of rows 2(l%4) (low half) and 2(l%4)+1.
EMU_INTERNAL static void emu_ldmatrix_warp(int w, int parity, bool trans) {
    const unsigned long long* rows = emu->warp_slot[w][parity];
    for (int l = 0; l < 32; l++)
        for (int i = 0; i < 4; i++) {
            uint32_t v;
            if (!trans) {
                memcpy(&v, (const char*)(uintptr_t)rows[8 * i + l / 4] + 4 * (l % 4), 4);
            } else {
                uint16_t lo, hi;
                memcpy(&lo, (const char*)(uintptr_t)rows[8 * i + 2 * (l % 4)] + 2 * (l / 4), 2);
                memcpy(&hi, (const char*)(uintptr_t)rows[8 * i + 2 * (l % 4) + 1] + 2 * (l / 4), 2);
                v = lo | (uint32_t)hi << 16;
            }
            emu->ldmatrix_slot[w][parity][l][i] = v;
        }
}
// The last lane to arrive reads the memory for all: the instruction loads once for the warp, and a
// lane released early must not change (by a store to the tile) what the others receive. For the
// race detector each lane reads its own row, at the kernel's instruction `pc`.
EMU_INTERNAL static void emu_ldmatrix(uint32_t* r, const void* row, bool trans, const void* pc) {
    if ((uintptr_t)row % 16 != 0) emu_fatal("ldmatrix row address not 16-byte aligned");
    if (!emu_in_arena(row)) emu_fatal("ldmatrix row address outside shared memory");
    int w = emu_warp(), lane = emu_lane(), parity = emu_warp_enter(trans ? "ldmatrix_x4_trans" : "ldmatrix_x4");
    emu_race_access(row, 16, false, pc, EMU_LDMATRIX);
    emu->warp_slot[w][parity][lane] = (uintptr_t)row;
    if (emu_last_to_arrive(w)) emu_ldmatrix_warp(w, parity, trans);
    emu_yield(EMU_WARP_WAIT);
    memcpy(r, emu->ldmatrix_slot[w][parity][lane], 4 * sizeof(uint32_t));
}
EMU_INSTRUCTION static void ldmatrix_x4(uint32_t* r, const void* row) {
    emu_ldmatrix(r, row, false, __builtin_return_address(0));
}
EMU_INSTRUCTION static void ldmatrix_x4_trans(uint32_t* r, const void* row) {
    emu_ldmatrix(r, row, true, __builtin_return_address(0));
}

// cp.async.cg.shared.global [smem], [gmem], 16, src_bytes: queued, and landed (global memory read,
// shared memory written) at the latest by the wait that retires it (CUDA_EMU_ASYNC: sooner).
EMU_INSTRUCTION static void cp_async16(void* smem, const void* gmem, int src_bytes) {
    EmuThread* t = emu->cur;
    if ((uintptr_t)smem % 16 != 0 || (uintptr_t)gmem % 16 != 0) emu_fatal("cp.async address not 16-byte aligned");
    if (!emu_in_arena(smem)) emu_fatal("cp.async destination outside shared memory");
    if (src_bytes != 0 && src_bytes != 16) emu_fatal("cp.async with src_bytes other than 0 or 16 is not emulated");
    if (t->ncopies == EMU_MAX_COPIES) emu_fatal("more cp.async copies in flight than the emulator holds (EMU_MAX_COPIES)");
    const void* pc = __builtin_return_address(0);
    emu_race_access(smem, 16, true, pc, EMU_ASYNC | EMU_PENDING);
    EmuCopy c = {smem, gmem, src_bytes == 0, t->groups_committed, 0, pc};
    if (emu_cfg.async == EMU_AT_ISSUE || (emu_cfg.async == EMU_AT_RANDOM && emu_random(&emu->async_rng, 4) == 0))
        emu_land(&c);
    t->copies[t->ncopies++] = c;
}
// cp.async.commit_group: the copies issued since the last commit form the next group.
static inline void cp_async_commit(void) { emu->cur->groups_committed++; }
// cp.async.wait_group N: every committed group but the N newest is complete. Copies not yet
// committed belong to no group, and no wait_group waits for them.
template <int N>
EMU_INTERNAL static void cp_async_wait(void) {
    static_assert(N >= 0, "cp.async.wait_group N needs N >= 0");
    EmuThread* t = emu->cur;
    int kept = 0;
    for (int i = 0; i < t->ncopies; i++) {  // in issue order, keeping the rest in order
        EmuCopy c = t->copies[i];
        if (c.group < t->groups_committed - N) {
            emu_land(&c);
            emu_race_retire(c.dst, 16);
        } else {
            t->copies[kept++] = c;
        }
    }
    t->ncopies = kept;
}

// ---------- Hopper's instructions: mbarrier, TMA, wgmma ----------
// The functions gpt2/gpu/hopper.cuh defines with PTX, from the PTX ISA's definitions.

// A tensor map, as the emulator's cuTensorMapEncodeTiled (below) fills it: what it was given.
// 128 bytes and 64-byte aligned, as the driver's opaque one.
enum { EMU_TENSOR_MAP_MAGIC = 0x746d6170 };
struct alignas(64) CUtensorMap {
    uint32_t magic;                 // EMU_TENSOR_MAP_MAGIC once encoded
    int elem, swizzle;              // element bytes; swizzle span in bytes (0: none)
    const char* base;
    uint64_t dims[2], stride;       // columns, rows; bytes from row to row
    uint32_t box[2];                // box columns, rows
    char reserved[72];
};
static_assert(sizeof(CUtensorMap) == 128, "CUtensorMap is 128 bytes");

// An mbarrier's state, kept beside shared memory (keyed by its arena offset), not in its 8 bytes.
enum { EMU_PHASE_COPIES = 32 };
struct EmuBarrier {
    size_t offset;
    int count, pending;             // arrivals per phase; still to come in this one
    long long tx;                   // bytes announced (expect_tx) and not yet landed
    long long phase;                // phases completed
    uint64_t seen;                  // the race detector's number for the last (emu_race_next_phase)
    int ncopies;                    // the copies landed in this phase, whose bytes it completes
    struct { const char* dst; size_t bytes; } copies[EMU_PHASE_COPIES];
};
// A TMA copy in flight: lands at the latest at a wait on its barrier (CUDA_EMU_ASYNC: sooner).
struct EmuTma {
    CUtensorMap map;
    char* dst;
    int x, y;
    size_t bar;                     // its mbarrier's offset
};
// A wgmma in flight (per warp): what its lanes gave, computed when a wait retires it.
struct EmuWgmma {
    uint64_t desc_a, desc_b;
    size_t start_a, start_b;        // the arena offsets their start addresses stand for (emu_wgmma_start)
    int n, trans_a, trans_b, scale_d, group;
    float* d[32];                   // each lane's accumulators
    const uint32_t* a[32];          // each lane's A fragments (wgmma_bf16_rs; NULL: A by desc_a)
    uint32_t a_issued[32][4];       // and their values at issue, which must not change before the wait
    const void* pc;                 // where the kernel issued it, for the race detector
    int computed;                   // d written (CUDA_EMU_ASYNC: before the wait that retires it)
};
enum { EMU_MAX_BARRIERS = 64, EMU_MAX_TMA = 256, EMU_MAX_WGMMA = 16 };

// The block's Hopper state, made with the worker's first block, emptied at every block's start.
static void emu_hopper_block_start(void) {
    if (emu->barriers == NULL) {
        emu->barriers = (EmuBarrier*)calloc(EMU_MAX_BARRIERS, sizeof(EmuBarrier));
        emu->tma = (EmuTma*)calloc(EMU_MAX_TMA, sizeof(EmuTma));
        emu->wgmma = (EmuWgmma(*)[EMU_MAX_WGMMA])calloc(32, sizeof(EmuWgmma[EMU_MAX_WGMMA]));
        if (emu->barriers == NULL || emu->tma == NULL || emu->wgmma == NULL) { fprintf(stderr, "cuda_emu: out of memory\n"); exit(1); }
    }
    emu->nbarriers = emu->ntma = 0;
    for (int w = 0; w < 32; w++) emu->nwgmma[w] = emu->wgmma_groups[w] = 0, emu->polling[w] = 0;
    emu->progress = emu->progress_seen = 0;
    emu->stuck = 0;
}

// The barrier at bar; create: a new one (mbarrier_init), else it must have been initialised.
EMU_INTERNAL static EmuBarrier* emu_barrier(const void* bar, bool create, const char* op) {
    static thread_local char what[160];
    if (!emu_in_arena(bar) || (uintptr_t)bar % 8 != 0) {
        snprintf(what, sizeof what, "%s: the mbarrier is not an 8-byte aligned address in shared memory", op);
        emu_fatal(what);
    }
    size_t offset = (size_t)((const char*)bar - emu->arena);
    for (int i = 0; i < emu->nbarriers; i++)
        if (emu->barriers[i].offset == offset) return &emu->barriers[i];
    if (!create) {
        snprintf(what, sizeof what, "%s on an mbarrier that this block never initialised (mbarrier_init)", op);
        emu_fatal(what);
    }
    if (emu->nbarriers == EMU_MAX_BARRIERS) emu_fatal("more mbarriers in a block than the emulator holds (EMU_MAX_BARRIERS)");
    EmuBarrier* b = &emu->barriers[emu->nbarriers++];
    b->offset = offset;
    return b;
}
// The phase completes when every arrival has come and every announced byte has landed.
EMU_INTERNAL static void emu_barrier_check(EmuBarrier* b) {
    emu->progress++;
    if (b->pending == 0 && b->tx == 0) {
        b->phase++;
        b->pending = b->count;
        b->seen = emu_race_next_phase();
        for (int i = 0; i < b->ncopies; i++)
            emu_race_tma_complete(b->copies[i].dst, b->copies[i].bytes, (int)(b - emu->barriers), b->seen);
        b->ncopies = 0;
    }
}
EMU_INTERNAL static void mbarrier_init(uint64_t* bar, uint32_t count) {
    if (count < 1 || count >= (1u << 20)) emu_fatal("mbarrier_init: count must be 1 to 2^20 - 1");
    EmuBarrier* b = emu_barrier(bar, true, "mbarrier_init");
    b->count = b->pending = (int)count;
    b->tx = 0;
    b->phase = 0;
    b->seen = 0;
    b->ncopies = 0;
    emu->progress++;
}
static inline void mbarrier_init_fence(void) {}
EMU_INTERNAL static void emu_arrive(EmuBarrier* b) {
    if (b->pending == 0)
        emu_fatal("mbarrier: more arrivals than its count before the phase completed (it waits for copies' bytes)");
    b->pending--;
    emu_barrier_check(b);
}
// The threads that wait on the barrier may run before the arriving thread's next instruction, as
// on a GPU: it yields as a poller does, and runs on once the scheduler has seen the change (so a
// stage released before the wgmma_wait that retires its reads is refilled while they are in flight).
EMU_INTERNAL static void mbarrier_arrive(uint64_t* bar) {
    emu_arrive(emu_barrier(bar, false, "mbarrier_arrive"));
    EmuThread* me = emu->cur;
    emu->polling[me->warp] |= 1u << me->lane;
    emu_yield(EMU_POLL);
}
EMU_INTERNAL static void mbarrier_arrive_expect_tx(uint64_t* bar, uint32_t bytes) {
    EmuBarrier* b = emu_barrier(bar, false, "mbarrier_arrive_expect_tx");
    b->tx += bytes;
    emu_arrive(b);
}

// The 16-byte chunk of a swizzled address: bits 4-6 (128B), 4-5 (64B) or 4 (32B) XOR the bits
// three above them. On the address itself: the arena is page-aligned, so these are its offset's.
EMU_INTERNAL static inline uintptr_t emu_swizzle(uintptr_t a, int span) {
    uintptr_t mask = span == 128 ? 7 : span == 64 ? 3 : span == 32 ? 1 : 0;
    return a ^ ((a >> 7) & mask) << 4;
}

// fence.proxy.async: orders the thread's plain shared-memory accesses with the async proxy's
// (TMA, wgmma). Nothing to do for values; the hook where the race detector will note it.
static inline void fence_proxy_async(void) { emu_race_fence_proxy_async(); }

// TMA copy i lands: the box's elements (zeros outside the tensor) into shared memory, rows packed
// and swizzled; its bytes count off its barrier's phase.
EMU_INTERNAL static void emu_tma_land(int i) {
    EmuTma c = emu->tma[i];
    emu->tma[i] = emu->tma[--emu->ntma];
    const CUtensorMap* m = &c.map;
    for (uint32_t r = 0; r < m->box[1]; r++)
        for (uint32_t k = 0; k < m->box[0]; k++) {
            long long row = (long long)c.y + r, col = (long long)c.x + k;
            char* to = (char*)emu_swizzle((uintptr_t)(c.dst + ((size_t)r * m->box[0] + k) * m->elem), m->swizzle);
            if (row >= 0 && col >= 0 && (uint64_t)row < m->dims[1] && (uint64_t)col < m->dims[0])
                memcpy(to, m->base + row * m->stride + col * m->elem, m->elem);
            else
                memset(to, 0, m->elem);
        }
    EmuBarrier* b = emu_barrier(emu->arena + c.bar, false, "a TMA copy's landing");
    if (b->ncopies == EMU_PHASE_COPIES) emu_fatal("more TMA copies in one mbarrier phase than the emulator holds (EMU_PHASE_COPIES)");
    b->copies[b->ncopies].dst = c.dst;
    b->copies[b->ncopies++].bytes = (size_t)m->box[0] * m->box[1] * m->elem;
    b->tx -= (long long)m->box[0] * m->box[1] * m->elem;
    if (b->tx < 0) emu_fatal("mbarrier: a TMA copy landed more bytes than its phase expects (mbarrier_arrive_expect_tx)");
    emu_barrier_check(b);
}
// Every queued copy onto the barrier at offset bar (any barrier: bar == (size_t)-1); whether any.
EMU_INTERNAL static bool emu_tma_land_all(size_t bar) {
    bool any = false;
    for (int i = emu->ntma - 1; i >= 0; i--)
        if (bar == (size_t)-1 || emu->tma[i].bar == bar) { emu_tma_land(i); any = true; }
    return any;
}
// cp.async.bulk.tensor.2d: the box at column x, row y of the map to dst, onto bar's phase.
EMU_INSTRUCTION static void tma_load_2d(void* dst, const CUtensorMap* map, int x, int y, uint64_t* bar) {
    if (map->magic != EMU_TENSOR_MAP_MAGIC) emu_fatal("tma_load_2d: the tensor map was never encoded (cuTensorMapEncodeTiled)");
    if (!emu_in_arena(dst) || (uintptr_t)dst % 128 != 0)
        emu_fatal("tma_load_2d: destination not a 128-byte aligned address in shared memory");
    size_t bytes = (size_t)map->box[0] * map->box[1] * map->elem;
    if (!emu_in_arena((char*)dst + bytes - 1)) emu_fatal("tma_load_2d: the box runs past the end of shared memory");
    EmuBarrier* b = emu_barrier(bar, false, "tma_load_2d");
    if (emu->ntma == EMU_MAX_TMA) emu_fatal("more TMA copies in flight than the emulator holds (EMU_MAX_TMA)");
    EmuTma c = {*map, (char*)dst, x, y, b->offset};
    emu_race_tma_issue(dst, bytes, __builtin_return_address(0));
    emu->tma[emu->ntma++] = c;
    if (emu_cfg.async == EMU_AT_ISSUE || (emu_cfg.async == EMU_AT_RANDOM && emu_random(&emu->async_rng, 4) == 0))
        emu_tma_land(emu->ntma - 1);
}

// mbarrier.try_wait.parity: whether the phase of this parity has completed, i.e. the current
// phase has the other parity. When the phase waits only for copies' bytes, they land now. A no
// is a spin loop's turn: the thread yields, and is retried once a barrier has changed.
EMU_INTERNAL static bool mbarrier_try_wait(uint64_t* bar, uint32_t parity) {
    EmuBarrier* b = emu_barrier(bar, false, "mbarrier_try_wait");
    if ((b->phase & 1) == (parity & 1) && b->pending == 0 && b->tx > 0) emu_tma_land_all(b->offset);
    if ((b->phase & 1) != (parity & 1)) {
        emu_race_phase_seen((int)(b - emu->barriers), b->seen);
        return true;
    }
    EmuThread* me = emu->cur;
    emu->polling[me->warp] |= 1u << me->lane;
    emu->poll_bar = b->offset;
    emu->poll_parity = (int)(parity & 1);
    emu_yield(EMU_POLL);
    return false;
}
// The pollers run again, to retry their try_wait: after a barrier changed.
EMU_BOOKKEEPING static void emu_wake_pollers(int nwarps) {
    for (int w = 0; w < nwarps; w++) {
        emu->runnable[w] |= emu->polling[w];
        emu->polling[w] = 0;
        emu->count[w][EMU_POLL] = 0;
    }
    emu->progress_seen = emu->progress;
}
// Every live thread polls and nothing can change: which barrier, in what state.
static void emu_mbarrier_deadlock(void) {
    static char what[512];
    char where[256];
    emu_describe_shared(emu->arena + emu->poll_bar, where, sizeof where);
    EmuBarrier* b = emu_barrier(emu->arena + emu->poll_bar, false, "mbarrier_try_wait");
    snprintf(what, sizeof what, "deadlock: mbarrier waits that no arrival or copy will complete (a wrong parity or "
             "count?): the mbarrier at %s, %lld phases completed, %d of %d arrivals and %lld bytes to come, waited "
             "for with parity %d", where, b->phase, b->pending, b->count, b->tx, emu->poll_parity);
    emu_fatal(what);
}

// setmaxnreg: the register budget is the compiler's and the hardware's; here only the value's check.
template <int REGS>
static inline void setmaxnreg_dec(void) { static_assert(REGS % 8 == 0 && REGS >= 24 && REGS <= 256, "setmaxnreg: REGS is a multiple of 8 from 24 to 256"); }
template <int REGS>
static inline void setmaxnreg_inc(void) { static_assert(REGS % 8 == 0 && REGS >= 24 && REGS <= 256, "setmaxnreg: REGS is a multiple of 8 from 24 to 256"); }

// wgmma. A descriptor's start address keeps 18 bits of the offset (a GPU's shared memory is
// smaller): the arena offset it stands for is the one with those bits in the launch's dynamic
// piece, else in a __shared__ array of the running kernel.
EMU_INTERNAL static size_t emu_wgmma_start(uint64_t desc) {
    size_t low = (size_t)(desc & 0x3fff) << 4, used = emu_arena_used;
    size_t dyn = emu->dynamic_size > 0 ? (size_t)(emu->dynamic - emu->arena) : 0;
    for (size_t o = low; o < used; o += (size_t)1 << 18)
        if (emu->dynamic_size > 0 && o >= dyn && o < dyn + emu->dynamic_size) return o;
    for (size_t o = low; o < used; o += (size_t)1 << 18)
        for (int i = 0; i < emu_narrays; i++)
            if (o >= emu_arrays[i].offset && o < emu_arrays[i].offset + emu_arrays[i].size &&
                strcmp(emu_arrays[i].kernel, emu->kernel) == 0)
                return o;
    emu_fatal("wgmma: a descriptor's start address is in none of this kernel's shared memory");
    return 0;
}
// Element (i, k) of a 16-deep operand (i: m of A, n of B) that descriptor desc describes, by the
// PTX ISA's canonical layouts, S the swizzle's span in bytes, T = 16 bytes:
//   K-major (trans 0):  start + (2k / S) LBO + (i % 8) S + (i / 8) SBO + 2k % S
//   MN-major (trans 1): start + (i % (S/2)) 2 + (i / (S/2)) LBO + (k % 8) S + (k / 8) SBO
// then swizzled as TMA writes.
EMU_BOOKKEEPING static const char* emu_wgmma_address(uint64_t desc, size_t start, int trans, int i, int k) {
    size_t lbo = (size_t)(desc >> 16 & 0x3fff) << 4, sbo = (size_t)(desc >> 32 & 0x3fff) << 4;
    int span = 256 >> (int)(desc >> 62);  // layout 1: 128B, 2: 64B, 3: 32B
    size_t a = trans == 0 ? start + (2 * k / span) * lbo + (i % 8) * span + (i / 8) * sbo + 2 * k % span
                          : start + (i % (span / 2)) * 2 + (i / (span / 2)) * lbo + (k % 8) * span + (k / 8) * sbo;
    const char* p = (const char*)emu_swizzle((uintptr_t)(emu->arena + a), span);
    if (!emu_in_arena(p + 15)) emu_fatal("wgmma: an operand's element lies outside shared memory");
    return p;
}
// Calls f(p, k, i) for each 16-byte chunk of an operand's rows i0 .. i0+rows-1 (m of A, n of B) by
// the 16 k: p holds 8 elements in order, from (i, k) on along k (K-major) or along i (MN-major),
// since the swizzles move whole chunks.
template <typename F>
EMU_BOOKKEEPING static void emu_wgmma_chunks(uint64_t desc, size_t start, int trans, int i0, int rows, F f) {
    if (trans == 0) {
        for (int i = 0; i < rows; i++)
            for (int k = 0; k < 16; k += 8) f(emu_wgmma_address(desc, start, 0, i0 + i, k), k, i);
    } else {
        for (int k = 0; k < 16; k++)
            for (int i = 0; i < rows; i += 8) f(emu_wgmma_address(desc, start, 1, i0 + i, k), k, i);
    }
}
// For the race detector: the bytes warp w's part of wgmma q reads (its 16 rows of A, all of B),
// read from its issue (retire 0), or no longer (retire 1).
EMU_INTERNAL static void emu_wgmma_race(int w, const EmuWgmma* q, int retire) {
#ifdef CUDA_EMU_RACE
    auto race = [&](const char* p, int, int) {
        if (retire) emu_race_wgmma_retire(p, 16);
        else emu_race_wgmma_read(p, 16, q->pc);
    };
    if (q->a[0] == NULL) emu_wgmma_chunks(q->desc_a, q->start_a, q->trans_a, 16 * (w % 4), 16, race);
    emu_wgmma_chunks(q->desc_b, q->start_b, q->trans_b, 0, q->n, race);
#endif
}
EMU_INTERNAL static void emu_wgmma_check_desc(uint64_t desc) {
    if ((desc >> 49 & 7) != 0) emu_fatal("wgmma: a descriptor's base offset (bits 49-51) other than 0 is not emulated");
    if ((desc >> 62) == 0) emu_fatal("wgmma: the interleaved layout (descriptor bits 62-63 = 0) is not emulated");
}
// D[r][n] += A[k][r] B[k][n], k = 0..15 in order for each element; N known, so that the loop over
// n runs as vectors.
template <int N>
EMU_BOOKKEEPING static void emu_wgmma_sums(float (*D)[256], const float (*A)[16], const float (*B)[256]) {
    for (int r = 0; r < 16; r++)
        for (int k = 0; k < 16; k++) {
            float a = A[k][r];
            for (int n = 0; n < N; n++) D[r][n] += a * B[k][n];
        }
}
// Warp w's wgmma q: its 16 rows of D (the warp's quarter of the warpgroup's 64) from A's rows and
// all of B, D = A B (+ D), d then k = 0..15 in float32; lane 4g + q holds for columns 8j..8j+7
// d[4j], d[4j+1] = D[g][8j+2q, +1] and d[4j+2], d[4j+3] = D[g+8][8j+2q, +1]. A from registers
// (wgmma_bf16_rs): lane 4g + q's a[j] holds A's row g + 8 (j % 2), columns 2q + 8 (j / 2) and the
// next, as mma_bf16_16816's. Not instrumented: the operands' bounds are checked above, and the
// sums over n run as vectors.
EMU_BOOKKEEPING static void emu_wgmma_compute(int w, const EmuWgmma* q) {
    static thread_local float A[16][16], B[16][256], D[16][256];  // by k: A[k][m], B[k][n]; off the fiber's small stack
    auto chunk = [](float* out, const char* p, int stride) {
        for (int e = 0; e < 8; e++) out[e * stride] = emu_bf16_half((uint32_t)((const uint16_t*)p)[e], 0);
    };
    if (q->a[0] != NULL) {
        for (int lane = 0; lane < 32; lane++)
            for (int j = 0; j < 4; j++)
                for (int h = 0; h < 2; h++)
                    A[2 * (lane % 4) + 8 * (j / 2) + h][lane / 4 + 8 * (j % 2)] = emu_bf16_half(q->a[lane][j], h);
    } else {
        emu_wgmma_chunks(q->desc_a, q->start_a, q->trans_a, 16 * (w % 4), 16,
                         [&](const char* p, int k, int i) { q->trans_a ? chunk(&A[k][i], p, 1) : chunk(&A[k][i], p, 16); });
    }
    emu_wgmma_chunks(q->desc_b, q->start_b, q->trans_b, 0, q->n,
                     [&](const char* p, int k, int i) { q->trans_b ? chunk(&B[k][i], p, 1) : chunk(&B[k][i], p, 256); });
    for (int lane = 0; lane < 32; lane++)
        for (int j = 0; j < q->n / 8; j++)
            for (int e = 0; e < 4; e++)
                D[lane / 4 + 8 * (e / 2)][8 * j + 2 * (lane % 4) + e % 2] = q->scale_d ? q->d[lane][4 * j + e] : 0.0f;
    if (q->n == 64) emu_wgmma_sums<64>(D, A, B);
    else if (q->n == 128) emu_wgmma_sums<128>(D, A, B);
    else emu_wgmma_sums<256>(D, A, B);
    for (int lane = 0; lane < 32; lane++)
        for (int j = 0; j < q->n / 8; j++)
            for (int e = 0; e < 4; e++) q->d[lane][4 * j + e] = D[lane / 4 + 8 * (e / 2)][8 * j + 2 * (lane % 4) + e % 2];
}
// Computes warp w's first n wgmmas in flight, in issue order, those not computed yet.
EMU_INTERNAL static void emu_wgmma_compute_first(int w, int n) {
    for (int i = 0; i < n; i++)
        if (!emu->wgmma[w][i].computed) {
            emu_wgmma_compute(w, &emu->wgmma[w][i]);
            emu->wgmma[w][i].computed = 1;
        }
}
// A wait retires warp w's first n wgmmas: computed, if they were not yet, their reads of shared
// memory over (whenever their values were read), dropped from the queue. A fragments in registers
// are read until then too: a lane that changed them before has broken the PTX ISA's rule.
EMU_INTERNAL static void emu_wgmma_retire(int w, int n) {
    emu_wgmma_compute_first(w, n);
    for (int i = 0; i < n; i++) {
        const EmuWgmma* q = &emu->wgmma[w][i];
        for (int l = 0; l < 32 && q->a[0] != NULL; l++)
            if (memcmp(q->a[l], q->a_issued[l], sizeof q->a_issued[l]) != 0) {
                static thread_local char what[160];
                snprintf(what, sizeof what, "wgmma_bf16_rs: lane %d of warp %d changed its A fragments (registers) before "
                         "the wgmma_wait that retires the wgmma", l, w);
                emu_fatal(what);
            }
        emu_wgmma_race(w, q, 1);
    }
    for (int i = n; i < emu->nwgmma[w]; i++) emu->wgmma[w][i - n] = emu->wgmma[w][i];
    emu->nwgmma[w] -= n;
}
// At each wgmma warp instruction, CUDA_EMU_ASYNC=random computes some of the oldest in flight.
EMU_INTERNAL static void emu_wgmma_maybe(int w) {
    if (emu_cfg.async == EMU_AT_RANDOM && emu->nwgmma[w] > 0)
        emu_wgmma_compute_first(w, (int)emu_random(&emu->async_rng, (unsigned)emu->nwgmma[w] + 1));
}
// The warpgroup's instructions are warp barriers, as mma_bf16_16816 is: the last lane of the warp
// to arrive does the warp's part.
EMU_INTERNAL static void emu_wgmma_barrier(const char* op) {
    int w = emu_warp(), parity = emu_warp_enter(op);
    (void)parity;
    if (emu->nthreads % 128 != 0) emu_fatal("wgmma in a block whose threads are not whole warpgroups (a multiple of 128)");
    if (emu_last_to_arrive(w)) emu_wgmma_maybe(w);
    emu_yield(EMU_WARP_WAIT);
}
static inline void wgmma_fence(void) { emu_wgmma_barrier("wgmma_fence"); }
EMU_INTERNAL static void wgmma_commit(void) {
    int w = emu_warp(), parity = emu_warp_enter("wgmma_commit");
    (void)parity;
    if (emu_last_to_arrive(w)) {
        emu->wgmma_groups[w]++;
        emu_wgmma_maybe(w);
    }
    emu_yield(EMU_WARP_WAIT);
}
// wgmma.wait_group N: every committed group but the N newest is computed (d written).
template <int N>
EMU_INTERNAL static void wgmma_wait(void) {
    static_assert(N >= 0, "wgmma.wait_group N needs N >= 0");
    int w = emu_warp(), parity = emu_warp_enter("wgmma_wait");
    (void)parity;
    if (emu_last_to_arrive(w)) {
        int n = 0;
        while (n < emu->nwgmma[w] && emu->wgmma[w][n].group < emu->wgmma_groups[w] - N) n++;
        emu_wgmma_retire(w, n);
    }
    emu_yield(EMU_WARP_WAIT);
}
template <int REGS>
static inline void wgmma_hold(float* d) {}  // a fence for nvcc's register allocation: nothing here
template <int REGS>
static inline void wgmma_hold(uint32_t* a) {}
// wgmma.mma_async m64nNk16 bf16 -> f32: each lane leaves its d and the operands in the slots (a:
// its A fragments, or NULL for A by desc_a); the last lane of the warp queues the warp's part,
// computed when a wait retires it (or sooner).
EMU_INTERNAL static void emu_wgmma_issue(const char* op, float* d, const uint32_t* a, uint64_t desc_a, uint64_t desc_b,
                                         int scale_d, int n, int trans_a, int trans_b, const void* pc) {
    int w = emu_warp(), lane = emu_lane(), parity = emu_warp_enter(op);
    if (emu->nthreads % 128 != 0) emu_fatal("wgmma in a block whose threads are not whole warpgroups (a multiple of 128)");
    emu->warp_slot[w][parity][lane] = (uintptr_t)d;
    emu->wgmma_a_slot[w][parity][lane] = a;
    uint32_t* mine = emu->mma_slot[w][parity][lane];
    mine[0] = (uint32_t)desc_a, mine[1] = (uint32_t)(desc_a >> 32), mine[2] = (uint32_t)desc_b;
    mine[3] = (uint32_t)(desc_b >> 32), mine[4] = scale_d != 0, mine[5] = n | trans_a << 9 | trans_b << 10;
    if (emu_last_to_arrive(w)) {
        if (emu->nwgmma[w] == EMU_MAX_WGMMA) emu_fatal("more wgmmas in flight in a warp than the emulator holds (EMU_MAX_WGMMA)");
        EmuWgmma* q = &emu->wgmma[w][emu->nwgmma[w]++];
        q->desc_a = desc_a, q->desc_b = desc_b, q->n = n, q->trans_a = trans_a, q->trans_b = trans_b;
        q->scale_d = scale_d != 0, q->group = emu->wgmma_groups[w], q->pc = pc;
        q->computed = 0;
        for (int l = 0; l < 32; l++) {
            if (memcmp(emu->mma_slot[w][parity][l], mine, sizeof(uint32_t[6])) != 0)
                emu_fatal("wgmma: the lanes of a warp give different descriptors or scale_d");
            q->d[l] = (float*)(uintptr_t)emu->warp_slot[w][parity][l];
            q->a[l] = emu->wgmma_a_slot[w][parity][l];
            if ((q->a[l] == NULL) != (a == NULL)) emu_fatal("wgmma: lanes of a warp at different forms of wgmma");
            if (q->a[l] != NULL) memcpy(q->a_issued[l], q->a[l], sizeof q->a_issued[l]);
            for (int m = 0; m < l; m++)
                if (q->d[m] == q->d[l]) emu_fatal("wgmma: two lanes give the same accumulators d");
        }
        if (a == NULL) {
            emu_wgmma_check_desc(desc_a);
            q->start_a = emu_wgmma_start(desc_a);
        }
        emu_wgmma_check_desc(desc_b);
        q->start_b = emu_wgmma_start(desc_b);
        emu_wgmma_race(w, q, 0);
        if (emu_cfg.async == EMU_AT_ISSUE) emu_wgmma_compute_first(w, emu->nwgmma[w]);
        else emu_wgmma_maybe(w);
    }
    emu_yield(EMU_WARP_WAIT);
}
template <int N, int TRANS_A, int TRANS_B>
EMU_INSTRUCTION static void wgmma_bf16(float* d, uint64_t desc_a, uint64_t desc_b, int scale_d) {
    static_assert(N == 64 || N == 128 || N == 256, "wgmma_bf16: N is 64, 128 or 256");
    emu_wgmma_issue("wgmma_bf16", d, NULL, desc_a, desc_b, scale_d, N, TRANS_A, TRANS_B, __builtin_return_address(0));
}
// The RS form: A's fragments from each lane's registers a[0..3] (read, as on a GPU, until the wait).
template <int N, int TRANS_B>
EMU_INSTRUCTION static void wgmma_bf16_rs(float* d, const uint32_t* a, uint64_t desc_b, int scale_d) {
    static_assert(N == 64 || N == 128, "wgmma_bf16_rs: N is 64 or 128");
    emu_wgmma_issue("wgmma_bf16_rs", d, a, 0, desc_b, scale_d, N, 0, TRANS_B, __builtin_return_address(0));
}

// Runs one step of warp w: each of its lanes that can run, in the schedule's order, until it waits
// at a barrier or ends (the lanes are chained: each switches to the next, the last back here).
// When they all wait at one warp instruction, it completes, and they run on from it next step.
EMU_BOOKKEEPING static void emu_step_warp(int w) {
    int size = emu_warp_size(w);
    EmuThread* first = emu->chain[w];
    if (emu->runnable[w] != emu->chained[w] || emu_cfg.schedule == EMU_RANDOM) {  // else the same chain again
        int order[32];
        for (int l = 0; l < size; l++) order[l] = emu_cfg.schedule == EMU_REVERSE ? size - 1 - l : l;
        if (emu_cfg.schedule == EMU_RANDOM) {  // Fisher-Yates, two draws from each 64 random bits
            unsigned long long bits = 0;
            for (int l = size - 1; l > 0; l--) {
                bits = (size - 1 - l) % 2 == 0 ? emu_random_bits(&emu->schedule_rng) : bits >> 32;
                int r = (int)emu_below(bits, (unsigned)l + 1), o = order[l];
                order[l] = order[r];
                order[r] = o;
            }
        }
        EmuThread** link = &first;
        for (int k = 0; k < size; k++) {
            EmuThread* t = &emu->threads[w * 32 + order[k]];
            if (emu->runnable[w] >> order[k] & 1) { *link = t; link = &t->next; }
        }
        *link = NULL;
        emu->chain[w] = first;
        emu->chained[w] = emu->runnable[w];
    }
    if (first != NULL) {
        emu->cur = first;
        emu_prefetch_stack(first->next);
        emu_switch_context(&emu->sched, &first->ctx);
    }
    emu->cur = NULL;
    int* count = emu->count[w];
    if (count[EMU_WARP_WAIT] == size) {
        emu->runnable[w] = emu_lanes(size);
        count[EMU_WARP_WAIT] = 0;
        emu->warp_gen[w]++;
    }
}
// Whether a step of warp w would run anything: after a step, its lanes run on only when released.
EMU_BOOKKEEPING static inline bool emu_warp_ready(int w) { return emu->runnable[w] != 0; }

// Runs the block's warps by the schedule until every warp waits at __syncthreads, which then
// releases them all, or has ended. A block where no warp can run and neither holds is stuck: a
// barrier that some threads never reach, or threads waiting at different barriers.
EMU_BOOKKEEPING static void emu_run_block(void) {
    int n = emu->nthreads, nwarps = (n + 31) / 32;
    for (int i = 0; i < n; i++) {
        EmuThread* t = &emu->threads[i];
        t->linear = i;
        t->warp = i / 32;
        t->tid = uint3(i % emu->block_dim.x, (i / emu->block_dim.x) % emu->block_dim.y,
                       i / (emu->block_dim.x * emu->block_dim.y));
        t->lane = i % 32;
        t->ncopies = 0;
        t->groups_committed = 0;
    }
    emu->block_gen = 0;
    emu->block_acc[0] = emu->block_acc[1] = 0;
    for (int w = 0; w < 32; w++) {
        emu->warp_gen[w] = 0;
        emu->chained[w] = 0;
        emu->runnable[w] = w < nwarps ? emu_lanes(emu_warp_size(w)) : 0;
        emu->count[w][EMU_BLOCK_WAIT] = emu->count[w][EMU_WARP_WAIT] = emu->count[w][EMU_DONE] = 0;
        emu->count[w][EMU_POLL] = 0;
    }
    emu_hopper_block_start();
    emu_race_block_start();  // a new epoch: nothing an earlier block did races with it
    for (;;) {
        bool ran = false;
        if (emu->progress != emu->progress_seen) {  // a barrier changed: the pollers retry
            emu_wake_pollers(nwarps);
            emu->stuck = 0;
        }
        if (emu_cfg.schedule == EMU_AHEAD) {
            // the first warp that can run, counting from one that moves on at every __syncthreads
            for (int k = 0; k < nwarps && !ran; k++) {
                int w = (int)((k + emu->block_gen) % nwarps);
                while (emu_warp_ready(w)) { emu_step_warp(w); ran = true; }
            }
        } else if (emu_cfg.schedule == EMU_RANDOM) {
            int ready[32], nready = 0;
            for (int w = 0; w < nwarps; w++)
                if (emu_warp_ready(w)) ready[nready++] = w;
            if (nready > 0) { emu_step_warp(ready[emu_random(&emu->schedule_rng, nready)]); ran = true; }
        } else {
            for (int k = 0; k < nwarps; k++) {
                int w = emu_cfg.schedule == EMU_REVERSE ? nwarps - 1 - k : k;
                if (emu_warp_ready(w)) { emu_step_warp(w); ran = true; }
            }
        }
        if (ran) continue;
        int block_wait = 0, done = 0, polling = 0;
        unsigned long long now = (unsigned long long)emu->block_gen + 1;  // where the block stands (never 0)
        for (int w = 0; w < nwarps; w++) {
            const int* count = emu->count[w];
            if (count[EMU_WARP_WAIT] > 0 && count[EMU_WARP_WAIT] + count[EMU_DONE] == emu_warp_size(w)) {
                emu->cur = &emu->threads[w * 32];
                emu_fatal("a warp instruction (shuffle, mma, ldmatrix) that some lanes of the warp never reach (they exited)");
            }
            block_wait += count[EMU_BLOCK_WAIT];
            done += count[EMU_DONE];
            polling += count[EMU_POLL];
            now = now * 1000003 + emu->warp_gen[w] * 1025 + count[EMU_WARP_WAIT];
        }
        if (done == n) {
            if (emu->ntma > 0) emu_fatal("TMA copies in flight at the block's end (no thread waited on their mbarrier)");
            emu_race_interval_end();
            break;
        }
        if (block_wait == n) {
            emu_race_interval_end();
            for (int w = 0; w < nwarps; w++) {
                emu->runnable[w] = emu_lanes(emu_warp_size(w));
                emu->count[w][EMU_BLOCK_WAIT] = 0;
            }
            emu->block_gen++;
            emu->block_acc[emu->block_gen & 1] = 0;
            emu_race_barrier_merge();
            emu_race_next_interval();
            continue;
        }
        // The threads not at a barrier poll an mbarrier that did not change: a copy landing may
        // complete it; else they retry once (a try_wait need not be a loop's), and if they all come
        // back to poll with nothing changed, no one ever will.
        if (polling > 0) {
            if (emu_tma_land_all((size_t)-1)) continue;
            now = (now * 1025 + block_wait) * 1025 + done;
            if (emu->stuck == now) emu_mbarrier_deadlock();
            emu->stuck = now;
            emu_wake_pollers(nwarps);
            continue;
        }
        emu_fatal(block_wait + done == n
                      ? "__syncthreads that some threads of the block never reach (they exited)"
                      : "deadlock: threads wait at different barriers (divergent __syncthreads/shuffle)");
    }
}
// The CUDA runtime's error codes that these programs can meet (the same numbers as CUDA's).
typedef int cudaError_t;
enum {
    cudaSuccess = 0, cudaErrorInvalidValue = 1, cudaErrorMemoryAllocation = 2,
    cudaErrorInvalidConfiguration = 9, cudaErrorInsufficientDriver = 35, cudaErrorNoDevice = 100,
    cudaErrorNoKernelImageForDevice = 209,
    cudaErrorIllegalAddress = 700, cudaErrorLaunchFailure = 719, cudaErrorSystemDriverMismatch = 803,
};

// ---------- workers: the blocks of a grid on several cores ----------
// Blocks are independent on a GPU: each has its own shared memory, and none waits for another. So
// the blocks of a launch are shared out to workers, OS threads that each take the next block not
// yet taken and run it with fibers, shared memory (a copy of the arena) and race detector's
// shadow of their own. The thread that launches is worker 0 (emu_main); the others are made at
// the first launch of more than one block, and wait between launches. A launch ends when its
// blocks are done: the launching thread waits for the workers that took part, not for one that
// has not woken yet (on a busy machine, that could take the system's time slice), which finds
// no block left or joins the next launch. CUDA_EMU_WORKERS sets how many workers there are
// (emu_env_workers). A block draws its random schedule and cp.async landings from generators of
// its own, seeded by the seed, the launch and the block, so that a run is the same whichever
// worker takes which block.
static struct {
    pthread_mutex_t mutex;
    pthread_cond_t start, done;
    int helpers;                    // the workers made besides the launching thread
    unsigned long long launch;      // the launches so far; the current one's number
    int active;                     // the helpers at work on it
    // the current launch
    const char* kernel;
    std::function<void()>* body;
    dim3 grid, block;
    size_t dynamic_offset, dynamic_size;  // its dynamic shared memory's piece of the arena
    unsigned long long blocks, next;  // how many; the next one not yet taken
} emu_pool = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, PTHREAD_COND_INITIALIZER};

// This worker's fibers, at least n of them, made once and reused; the new ones' stacks in one
// mapping (one system call for them all, where a launch of 1024 threads made 1024).
static void emu_make_fibers(int n) {
    if (emu->capacity >= n) return;
    const size_t each = EMU_STACK + 2 * 4096;
    char* all = (char*)mmap(NULL, each * (n - emu->capacity), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                            -1, 0);
    if (all == MAP_FAILED) {
        fprintf(stderr, "cuda_emu: out of memory for stacks\n");
        exit(1);
    }
    for (char* s = all; emu->capacity < n; emu->capacity++, s += each) {
        EmuThread* t = &emu->threads[emu->capacity];
        // Below the stack a page that faults, so that a kernel that overflows it stops there. The
        // stacks' tops, where a fiber's registers are saved, are 64 bytes apart modulo 4 KiB: at
        // the same offset in every page, they would all fall in one set of the L1 cache.
        if (mprotect(s, 4096, PROT_NONE) != 0) {
            fprintf(stderr, "cuda_emu: out of memory for stacks\n");
            exit(1);
        }
        t->stack = s + 4096;
        t->stack_size = EMU_STACK + 4096 - 64 * (emu->capacity % 64);
        t->copies = emu->copies[emu->capacity];
        emu_fiber_init(t);
    }
}

// A block's generator for one kind of random choice, from the seed, the launch and the block.
static unsigned long long emu_block_seed(unsigned long long seed, unsigned long long block) {
    unsigned long long s = seed ^ emu_pool.launch * 0xd1b54a32d192ed03ull;
    emu_random(&s, 1);
    return s ^ block * 0x9e3779b97f4a7c15ull;
}

// Runs blocks of the current launch on this worker until none is left.
EMU_INTERNAL static void emu_run_blocks(void) {
    dim3 grid = emu_pool.grid;
    for (;;) {
        unsigned long long b = __atomic_fetch_add(&emu_pool.next, 1, __ATOMIC_RELAXED);
        if (b >= emu_pool.blocks) break;
        if (emu->launch != emu_pool.launch) {  // the launch's first block on this worker
            emu->launch = emu_pool.launch;
            emu->block_dim = emu_pool.block;
            emu->grid_dim = grid;
            emu->nthreads = (int)(emu_pool.block.x * emu_pool.block.y * emu_pool.block.z);
            emu->body = emu_pool.body;
            emu->kernel = emu_pool.kernel;
            emu->dynamic = emu->arena + emu_pool.dynamic_offset;
            emu->dynamic_size = emu_pool.dynamic_size;
            emu_make_fibers(emu->nthreads);
        }
        emu->block_idx = uint3((unsigned)(b % grid.x), (unsigned)(b / grid.x % grid.y),
                               (unsigned)(b / ((unsigned long long)grid.x * grid.y)));
        emu->schedule_rng = emu_block_seed(emu_cfg.schedule_seed, b);
        emu->async_rng = emu_block_seed(emu_cfg.async_seed, b);
        emu_run_block();
    }
    emu->body = NULL;
    emu->kernel = NULL;
}

static void* emu_helper_main(void* state) {
    emu = (EmuState*)state;
    unsigned long long seen = 0;  // the last launch it took part in
    pthread_mutex_lock(&emu_pool.mutex);
    for (;;) {
        while (emu_pool.launch == seen) pthread_cond_wait(&emu_pool.start, &emu_pool.mutex);
        seen = emu_pool.launch;
        emu_pool.active++;  // the launch cannot end, nor the next begin, until it is done
        pthread_mutex_unlock(&emu_pool.mutex);
        emu_run_blocks();
        pthread_mutex_lock(&emu_pool.mutex);
        if (--emu_pool.active == 0) pthread_cond_signal(&emu_pool.done);
    }
    return NULL;
}

// CUDA_EMU_FAULT=NAME: every launch of kernel NAME "faults" as a kernel that writes out of bounds
// does on a GPU: the launch itself returns no error, the kernel runs, and the error
// (cudaErrorIllegalAddress) comes from the next call that waits for the GPU, and from every call
// after it. This is how the tests check that a fault is reported, and that GPU_DEBUG=1 names the
// kernel.
// Dynamic shared memory: up to 48 KiB as it is, up to 227 KiB for a kernel that asked for it
// (cudaFuncSetAttribute). The emulator knows kernels by name, so one call covers every template
// instance of a kernel, where a GPU needs one per instance.
enum cudaFuncAttribute { cudaFuncAttributeMaxDynamicSharedMemorySize = 8 };
enum { EMU_SHARED_DEFAULT = 48 << 10, EMU_SHARED_MAX = 232448 };
static struct { char name[128]; int max; } emu_kernel_shared[256];
static int emu_nkernel_shared;
static int* emu_kernel_shared_max(const char* name, bool create) {
    for (int i = 0; i < emu_nkernel_shared; i++)
        if (strcmp(emu_kernel_shared[i].name, name) == 0) return &emu_kernel_shared[i].max;
    if (!create || emu_nkernel_shared == 256) return NULL;
    snprintf(emu_kernel_shared[emu_nkernel_shared].name, 128, "%s", name);
    return &emu_kernel_shared[emu_nkernel_shared++].max;
}
// cudaFuncSetAttribute(kernel, attr, value): the kernel's name from its text, as cuda_emu.py names
// launches: without '&', qualification and template arguments.
#define cudaFuncSetAttribute(...) emu_func_set_attribute(#__VA_ARGS__, __VA_ARGS__)
template <typename F>
static cudaError_t emu_func_set_attribute(const char* text, F f, cudaFuncAttribute attr, int value) {
    char name[128];
    size_t n = strcspn(text, "<,");
    while (*text == '&' || *text == ' ') text++, n--;
    snprintf(name, sizeof name, "%.*s", (int)n, text);
    while (n > 0 && name[n - 1] == ' ') name[--n] = '\0';
    const char* last = strrchr(name, ':');
    if (attr != cudaFuncAttributeMaxDynamicSharedMemorySize || value < 0 || value > EMU_SHARED_MAX) return cudaErrorInvalidValue;
    int* max = emu_kernel_shared_max(last != NULL ? last + 1 : name, true);
    if (max == NULL) return cudaErrorInvalidValue;
    *max = value;
    return cudaSuccess;
}
// The arena's piece for kernel name's dynamic shared memory of this size, made at its first launch.
static size_t emu_dynamic_piece(const char* name, size_t size) {
    static struct { const char* name; size_t size, offset; } pieces[256];
    static int npieces;
    for (int i = 0; i < npieces; i++)
        if (pieces[i].size == size && strcmp(pieces[i].name, name) == 0) return pieces[i].offset;
    if (npieces == 256) emu_fatal("more kernels with dynamic shared memory than the emulator holds");
    size_t offset = emu_shared_alloc_aligned(size, "dynamic shared memory", 1024, name);
    pieces[npieces].name = name, pieces[npieces].size = size, pieces[npieces++].offset = offset;
    return offset;
}

static void emu_launch(const char* name, dim3 grid, dim3 block, size_t smem, std::function<void()> body) {
    if (emu_sticky_error) return;  // the context is lost: nothing runs any more
    const int* allowed = emu_kernel_shared_max(name, false);
    if (smem > (size_t)(allowed != NULL && *allowed > EMU_SHARED_DEFAULT ? *allowed : EMU_SHARED_DEFAULT)) {
        fprintf(stderr, "cuda_emu: launch of %s with %zu bytes of dynamic shared memory: more than %s\n", name, smem,
                smem > EMU_SHARED_MAX ? "a GPU has (227 KiB)" : "48 KiB without cudaFuncSetAttribute");
        emu_cuda_error = cudaErrorInvalidValue;
        return;
    }
    unsigned long long nt = (unsigned long long)block.x * block.y * block.z;
    if (nt == 0 || nt > 1024 || block.z > 64 || grid.x == 0 || grid.y == 0 || grid.z == 0 ||
        grid.y > 65535 || grid.z > 65535 || grid.x > 2147483647u) {
        fprintf(stderr, "cuda_emu: invalid launch of %s: grid (%u,%u,%u) block (%u,%u,%u)\n", name, grid.x,
                grid.y, grid.z, block.x, block.y, block.z);
        emu_cuda_error = cudaErrorInvalidConfiguration;
        return;
    }
    emu_read_config();
#ifdef EMU_ASAN
    if (__asan_get_current_fake_stack() != NULL) {  // see emu_fatal
        fprintf(stderr, "cuda_emu: ASAN_OPTIONS=detect_stack_use_after_return=1 cannot follow the emulator's fibers\n");
        exit(2);
    }
#endif
    if (emu != &emu_main) emu_fatal("a kernel launched from inside a kernel (dynamic parallelism is not emulated)");
    unsigned long long blocks = (unsigned long long)grid.x * grid.y * grid.z;
    int helpers = (int)min((unsigned long long)emu_cfg.workers, blocks) - 1;
    pthread_mutex_lock(&emu_arena_mutex);
    if (emu_main.arena == NULL) emu_arena_make(&emu_main);
    for (; emu_pool.helpers < helpers; emu_pool.helpers++) {
        EmuState* w = (EmuState*)calloc(1, sizeof(EmuState));
        pthread_t thread;
        if (w == NULL) { fprintf(stderr, "cuda_emu: out of memory for a worker\n"); exit(1); }
        emu_arena_make(w);
        if (pthread_create(&thread, NULL, emu_helper_main, w) != 0) {
            fprintf(stderr, "cuda_emu: cannot start a worker thread\n");
            exit(1);
        }
        pthread_detach(thread);
    }
    pthread_mutex_unlock(&emu_arena_mutex);
    size_t dynamic_offset = smem > 0 ? emu_dynamic_piece(name, smem) : 0;
    pthread_mutex_lock(&emu_pool.mutex);
    // a worker that woke for the last launch after it ended may have joined it since: it finds no
    // block left, but the launch may not change under it before it has seen that
    while (emu_pool.active > 0) pthread_cond_wait(&emu_pool.done, &emu_pool.mutex);
    emu_pool.kernel = name;
    emu_pool.body = &body;
    emu_pool.grid = grid;
    emu_pool.block = block;
    emu_pool.dynamic_offset = dynamic_offset;
    emu_pool.dynamic_size = smem;
    emu_pool.blocks = blocks;
    emu_pool.next = 0;
    emu_pool.launch++;
    if (helpers > 0) pthread_cond_broadcast(&emu_pool.start);
    pthread_mutex_unlock(&emu_pool.mutex);
    emu_run_blocks();
    pthread_mutex_lock(&emu_pool.mutex);
    while (emu_pool.active > 0) pthread_cond_wait(&emu_pool.done, &emu_pool.mutex);
    pthread_mutex_unlock(&emu_pool.mutex);
    const char* fault = getenv("CUDA_EMU_FAULT");
    if (fault != NULL && strcmp(fault, name) == 0) emu_sticky_error = cudaErrorIllegalAddress;
}
static void emu_launch(const char* name, dim3 grid, dim3 block, std::function<void()> body) {
    emu_launch(name, grid, block, 0, body);
}

// ---------- runtime API on host memory ----------
typedef int cudaMemcpyKind;
enum { cudaMemcpyHostToHost, cudaMemcpyHostToDevice, cudaMemcpyDeviceToHost, cudaMemcpyDeviceToDevice, cudaMemcpyDefault };
typedef void* cudaStream_t;
typedef double* cudaEvent_t;
enum cudaDeviceAttr { cudaDevAttrClockRate = 13, cudaDevAttrMemoryClockRate = 36, cudaDevAttrGlobalMemoryBusWidth = 37 };
struct cudaDeviceProp {
    char name[256];
    size_t totalGlobalMem, sharedMemPerBlock;
    int multiProcessorCount, major, minor, maxThreadsPerBlock;
    int pciDomainID, pciBusID, pciDeviceID;
};

// Each error's name and CUDA's own wording of it.
static const struct { cudaError_t code; const char* name; const char* text; } EMU_ERRORS[] = {
    {cudaSuccess, "cudaSuccess", "no error"},
    {cudaErrorInvalidValue, "cudaErrorInvalidValue", "invalid argument"},
    {cudaErrorMemoryAllocation, "cudaErrorMemoryAllocation", "out of memory"},
    {cudaErrorInvalidConfiguration, "cudaErrorInvalidConfiguration", "invalid configuration argument"},
    {cudaErrorInsufficientDriver, "cudaErrorInsufficientDriver", "CUDA driver version is insufficient for CUDA runtime version"},
    {cudaErrorNoDevice, "cudaErrorNoDevice", "no CUDA-capable device is detected"},
    {cudaErrorNoKernelImageForDevice, "cudaErrorNoKernelImageForDevice", "no kernel image is available for execution on the device"},
    {cudaErrorIllegalAddress, "cudaErrorIllegalAddress", "an illegal memory access was encountered"},
    {cudaErrorLaunchFailure, "cudaErrorLaunchFailure", "unspecified launch failure"},
    {cudaErrorSystemDriverMismatch, "cudaErrorSystemDriverMismatch", "system has unsupported display driver / cuda driver combination"},
};
static int emu_error_index(cudaError_t e) {  // -1: not in the table
    for (int i = 0; i < (int)(sizeof(EMU_ERRORS) / sizeof(EMU_ERRORS[0])); i++)
        if (EMU_ERRORS[i].code == e) return i;
    return -1;
}
static const char* cudaGetErrorName(cudaError_t e) {
    int i = emu_error_index(e);
    return i >= 0 ? EMU_ERRORS[i].name : "cudaErrorUnknown";
}
static const char* cudaGetErrorString(cudaError_t e) {
    int i = emu_error_index(e);
    return i >= 0 ? EMU_ERRORS[i].text : "unknown error";
}

// A kernel's fault (CUDA_EMU_FAULT) is seen by the first call that waits for the GPU; from then
// on every call returns it, cudaGetLastError too, as on a GPU whose context is lost.
static bool emu_fault_seen = false;
static cudaError_t emu_sync_error(void) {
    if (emu_sticky_error) emu_fault_seen = true;
    return emu_sticky_error;
}
#define EMU_RETURN_IF_FAULT() do { if (emu_sync_error()) return emu_sticky_error; } while (0)

static cudaError_t cudaGetLastError(void) {
    if (emu_fault_seen) return emu_sticky_error;
    cudaError_t e = emu_cuda_error;
    emu_cuda_error = 0;
    return e;
}
static cudaError_t cudaPeekAtLastError(void) { return emu_fault_seen ? emu_sticky_error : emu_cuda_error; }

// The driver and device that start-up finds: a working H100 unless CUDA_EMU_DRIVER says
//   none      no NVIDIA driver installed (driver version 0; the runtime says insufficient driver)
//   old       a driver for CUDA 12.4, older than this runtime (13.0)
//   nodevice  a driver, but no GPU
//   broken    a driver whose kernel module and library do not match
static const char* emu_driver(void) {
    const char* d = getenv("CUDA_EMU_DRIVER");
    return d != NULL ? d : "";
}
static cudaError_t cudaDriverGetVersion(int* v) {
    *v = strcmp(emu_driver(), "none") == 0 ? 0 : strcmp(emu_driver(), "old") == 0 ? 12040 : 13000;
    return cudaSuccess;
}
static cudaError_t cudaRuntimeGetVersion(int* v) { *v = 13000; return cudaSuccess; }
// The machine has CUDA_EMU_DEVICES GPUs (default 1), its physical devices 0..N-1, and the process
// sees those that CUDA_VISIBLE_DEVICES lists, as with the real runtime, by which a scheduler gives
// each process its GPUs: a comma-separated list of physical indices, read up to the first entry
// that is not one (the rest is ignored); unset, every GPU. Device d of the process, as cudaSetDevice
// numbers it, is physical device emu_visible[d]. (The runtime also takes GPU UUIDs there; the
// emulator, indices only.)
#define EMU_MAX_DEVICES 64
static int emu_visible[EMU_MAX_DEVICES];
static int emu_visible_devices(void) {  // fills emu_visible, returns how many
    const char* devices = getenv("CUDA_EMU_DEVICES");
    int physical = devices != NULL ? atoi(devices) : 1;
    physical = physical < 0 ? 0 : physical > EMU_MAX_DEVICES ? EMU_MAX_DEVICES : physical;
    const char* list = getenv("CUDA_VISIBLE_DEVICES");
    if (list == NULL) {
        for (int i = 0; i < physical; i++) emu_visible[i] = i;
        return physical;
    }
    int n = 0;
    for (const char* p = list; n < EMU_MAX_DEVICES;) {
        char* end;
        long i = strtol(p, &end, 10);
        if (end == p || (*end != ',' && *end != '\0') || i < 0 || i >= physical) break;
        emu_visible[n++] = (int)i;
        if (*end == '\0') break;
        p = end + 1;
    }
    return n;
}
static cudaError_t cudaGetDeviceCount(int* n) {
    const char* d = emu_driver();
    *n = 0;
    if (strcmp(d, "none") == 0 || strcmp(d, "old") == 0) return cudaErrorInsufficientDriver;
    if (strcmp(d, "nodevice") == 0) return cudaErrorNoDevice;
    if (strcmp(d, "broken") == 0) return cudaErrorSystemDriverMismatch;
    *n = emu_visible_devices();
    return *n == 0 ? cudaErrorNoDevice : cudaSuccess;
}
static int emu_device = 0;
static int emu_valid_device(int d) {
    int n;
    return cudaGetDeviceCount(&n) == cudaSuccess && d >= 0 && d < n;
}
static cudaError_t cudaSetDevice(int d) {
    if (!emu_valid_device(d)) return cudaErrorInvalidValue;
    emu_device = d;
    return cudaSuccess;
}
static cudaError_t cudaGetDevice(int* d) { *d = emu_device; return cudaSuccess; }
// Each physical GPU sits on its own PCI bus (physical device i on bus i + 1), so that processes
// can tell whether they were given the same GPU, whatever numbers their CUDA_VISIBLE_DEVICES
// gives it. The id reads as the runtime writes it: domain:bus:device.function, in hex.
static cudaError_t cudaDeviceGetPCIBusId(char* id, int len, int d) {
    if (!emu_valid_device(d) || len <= 0) return cudaErrorInvalidValue;
    snprintf(id, (size_t)len, "0000:%02x:00.0", emu_visible[d] + 1);
    return cudaSuccess;
}
// The emulated device pretends to be an H100 SXM, so that table lookups have something to find.
static cudaError_t cudaGetDeviceProperties(cudaDeviceProp* p, int d) {
    if (!emu_valid_device(d)) return cudaErrorInvalidValue;
    memset(p, 0, sizeof(*p));
    p->pciBusID = emu_visible[d] + 1;
    strcpy(p->name, "cuda_emu (CPU emulation of an H100 SXM)");
    p->totalGlobalMem = 80ull << 30;
    p->sharedMemPerBlock = 48 << 10;
    p->multiProcessorCount = 132;
    p->major = 9;
    p->minor = 0;
    p->maxThreadsPerBlock = 1024;
    return cudaSuccess;
}
struct cudaFuncAttributes { int maxThreadsPerBlock, numRegs; size_t sharedSizeBytes; };
template <typename F> static cudaError_t cudaFuncGetAttributes(cudaFuncAttributes* a, F f) {
    memset(a, 0, sizeof(*a));
    a->maxThreadsPerBlock = 1024;
    return cudaSuccess;
}
static cudaError_t cudaDeviceGetAttribute(int* v, cudaDeviceAttr a, int d) {
    *v = a == cudaDevAttrClockRate ? 1980000 : a == cudaDevAttrMemoryClockRate ? 2619000 : 5120;
    return cudaSuccess;
}
static cudaError_t cudaMemGetInfo(size_t* free_b, size_t* total) {
    EMU_RETURN_IF_FAULT();
    *free_b = 64ull << 30;
    *total = 80ull << 30;
    return cudaSuccess;
}
static cudaError_t cudaMalloc(void** p, size_t n) {
    EMU_RETURN_IF_FAULT();
    *p = malloc(n == 0 ? 1 : n);
    if (*p == NULL) return cudaErrorMemoryAllocation;
    memset(*p, 0xff, n);  // NaN, as uninitialised memory might be
    return cudaSuccess;
}
template <typename T> static cudaError_t cudaMalloc(T** p, size_t n) { return cudaMalloc((void**)p, n); }
static cudaError_t cudaMallocHost(void** p, size_t n) { return cudaMalloc(p, n); }
template <typename T> static cudaError_t cudaMallocHost(T** p, size_t n) { return cudaMalloc((void**)p, n); }
static cudaError_t cudaFree(void* p) { EMU_RETURN_IF_FAULT(); free(p); return cudaSuccess; }
static cudaError_t cudaFreeHost(void* p) { EMU_RETURN_IF_FAULT(); free(p); return cudaSuccess; }
static cudaError_t cudaMemcpy(void* d, const void* s, size_t n, cudaMemcpyKind k) {
    EMU_RETURN_IF_FAULT();
    memmove(d, s, n);
    return cudaSuccess;
}
static cudaError_t cudaMemcpyAsync(void* d, const void* s, size_t n, cudaMemcpyKind k, cudaStream_t st = 0) {
    return cudaMemcpy(d, s, n, k);
}
static cudaError_t cudaMemset(void* d, int v, size_t n) { EMU_RETURN_IF_FAULT(); memset(d, v, n); return cudaSuccess; }
static cudaError_t cudaMemsetAsync(void* d, int v, size_t n, cudaStream_t st = 0) { return cudaMemset(d, v, n); }
static cudaError_t cudaDeviceSynchronize(void) { return emu_sync_error(); }
static cudaError_t cudaDeviceReset(void) { return cudaSuccess; }
static double emu_now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}
static cudaError_t cudaEventCreate(cudaEvent_t* e) { *e = (double*)malloc(sizeof(double)); **e = 0; return cudaSuccess; }
static cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s = 0) { *e = emu_now_ms(); return cudaSuccess; }
static cudaError_t cudaEventSynchronize(cudaEvent_t e) { return emu_sync_error(); }
static cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t a, cudaEvent_t b) { *ms = (float)(*b - *a); return cudaSuccess; }
static cudaError_t cudaEventDestroy(cudaEvent_t e) { free(e); return cudaSuccess; }

// ---------- tensor maps: the driver's cuTensorMapEncodeTiled ----------
// cuda.h's names and numbers for what hopper.cuh's tensor_map_bf16 passes; the emulator's encode
// checks what the driver checks and keeps what it was given in the map (CUtensorMap, above). It
// takes what our kernels use, bf16 matrices of rank 2, and refuses the rest as invalid.
typedef uint32_t cuuint32_t;
typedef uint64_t cuuint64_t;
typedef enum { CUDA_SUCCESS = 0, CUDA_ERROR_INVALID_VALUE = 1 } CUresult;
typedef enum { CU_TENSOR_MAP_DATA_TYPE_UINT8 = 0, CU_TENSOR_MAP_DATA_TYPE_FLOAT16 = 6, CU_TENSOR_MAP_DATA_TYPE_FLOAT32 = 7,
               CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 = 9 } CUtensorMapDataType;
typedef enum { CU_TENSOR_MAP_INTERLEAVE_NONE = 0, CU_TENSOR_MAP_INTERLEAVE_16B, CU_TENSOR_MAP_INTERLEAVE_32B } CUtensorMapInterleave;
typedef enum { CU_TENSOR_MAP_SWIZZLE_NONE = 0, CU_TENSOR_MAP_SWIZZLE_32B, CU_TENSOR_MAP_SWIZZLE_64B,
               CU_TENSOR_MAP_SWIZZLE_128B } CUtensorMapSwizzle;
typedef enum { CU_TENSOR_MAP_L2_PROMOTION_NONE = 0, CU_TENSOR_MAP_L2_PROMOTION_L2_64B, CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
               CU_TENSOR_MAP_L2_PROMOTION_L2_256B } CUtensorMapL2promotion;
typedef enum { CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE = 0, CU_TENSOR_MAP_FLOAT_OOB_FILL_NAN_REQUEST_ZERO_FMA } CUtensorMapFloatOOBfill;
typedef CUresult (*PFN_cuTensorMapEncodeTiled_v12000)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*,
                                                      const cuuint64_t*, const cuuint32_t*, const cuuint32_t*,
                                                      CUtensorMapInterleave, CUtensorMapSwizzle, CUtensorMapL2promotion,
                                                      CUtensorMapFloatOOBfill);
static CUresult emu_tensor_map_encode_tiled(CUtensorMap* map, CUtensorMapDataType type, cuuint32_t rank, void* base,
                                            const cuuint64_t* dims, const cuuint64_t* strides, const cuuint32_t* box,
                                            const cuuint32_t* element_strides, CUtensorMapInterleave interleave,
                                            CUtensorMapSwizzle swizzle, CUtensorMapL2promotion l2,
                                            CUtensorMapFloatOOBfill fill) {
    const int elem = 2, span[4] = {0, 32, 64, 128};
    if (map == NULL || type != CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 || rank != 2 || interleave != CU_TENSOR_MAP_INTERLEAVE_NONE ||
        fill != CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE || (unsigned)swizzle > CU_TENSOR_MAP_SWIZZLE_128B ||
        (unsigned)l2 > CU_TENSOR_MAP_L2_PROMOTION_L2_256B)
        return CUDA_ERROR_INVALID_VALUE;
    if (base == NULL || (uintptr_t)base % 16 != 0) return CUDA_ERROR_INVALID_VALUE;
    for (int i = 0; i < 2; i++) {
        if (dims[i] == 0 || dims[i] > (1ull << 32) || box[i] == 0 || box[i] > 256 || element_strides[i] != 1)
            return CUDA_ERROR_INVALID_VALUE;
    }
    if (strides[0] % 16 != 0 || strides[0] >= (1ull << 40) || strides[0] < dims[0] * elem) return CUDA_ERROR_INVALID_VALUE;
    if ((box[0] * elem) % 16 != 0 || (swizzle != CU_TENSOR_MAP_SWIZZLE_NONE && box[0] * elem > (cuuint32_t)span[swizzle]))
        return CUDA_ERROR_INVALID_VALUE;
    memset(map, 0, sizeof(*map));
    map->magic = EMU_TENSOR_MAP_MAGIC;
    map->elem = elem;
    map->swizzle = span[swizzle];
    map->base = (const char*)base;
    map->dims[0] = dims[0], map->dims[1] = dims[1], map->stride = strides[0];
    map->box[0] = box[0], map->box[1] = box[1];
    return CUDA_SUCCESS;
}
// The runtime's way to the driver's functions: the emulator has that one.
typedef enum { cudaDriverEntryPointSuccess = 0, cudaDriverEntryPointSymbolNotFound = 1 } cudaDriverEntryPointQueryResult;
enum { cudaEnableDefault = 0 };
static cudaError_t cudaGetDriverEntryPointByVersion(const char* symbol, void** fn, unsigned int version,
                                                    unsigned long long flags, cudaDriverEntryPointQueryResult* found) {
    bool known = strcmp(symbol, "cuTensorMapEncodeTiled") == 0 && version >= 12000;
    *fn = known ? (void*)emu_tensor_map_encode_tiled : NULL;
    if (found != NULL) *found = known ? cudaDriverEntryPointSuccess : cudaDriverEntryPointSymbolNotFound;
    return cudaSuccess;
}
static cudaError_t cudaGetDriverEntryPoint(const char* symbol, void** fn, unsigned long long flags,
                                           cudaDriverEntryPointQueryResult* found = NULL) {
    return cudaGetDriverEntryPointByVersion(symbol, fn, 12000, flags, found);
}

// ---------- NCCL, over MPI ----------
// Built with USE_MPI, train_gpu sums its gradients over the processes of a data-parallel run with
// NCCL (ncclAllReduce); model parallelism (tensor, pipeline, ZeRO-1) also needs reduce-scatter,
// all-gather, send and receive, and communicators split from the first. The emulator has no GPUs
// to connect: its NCCL is those calls, done by MPI on the host memory that stands for device
// memory, with NCCL's checks of their arguments, and nccl.h's names, numbers and signatures, so
// that one source compiles against both. It checks the program's use of them, not NCCL. Every call
// has finished when it returns, where NCCL's calls run later, on the stream: a program that reads
// a result before it synchronises the stream is wrong on a GPU and not caught here.
#ifdef USE_MPI
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>
#include <unistd.h>
#include <vector>
typedef enum { ncclSuccess = 0, ncclInvalidArgument = 4, ncclInvalidUsage = 5 } ncclResult_t;
// The types the emulator knows, numbered as nccl.h numbers them; a program that names another
// (ncclUint32, ncclInt64, ncclFloat16, ...) does not compile against it.
typedef enum { ncclInt8 = 0, ncclChar = 0, ncclUint8 = 1, ncclInt32 = 2, ncclInt = 2, ncclFloat32 = 7, ncclFloat = 7,
               ncclFloat64 = 8, ncclDouble = 8, ncclBfloat16 = 9 } ncclDataType_t;
// NCCL's built-in operations, so that a program that names one compiles; only ncclSum is done.
typedef enum { ncclSum = 0, ncclProd = 1, ncclMax = 2, ncclMin = 3, ncclAvg = 4 } ncclRedOp_t;
typedef struct { char internal[128]; } ncclUniqueId;
// ncclCommSplit's configuration: the emulator takes only NULL (the parent's), so the struct stays
// undefined and there is no NCCL_CONFIG_INITIALIZER: a program that fills one does not compile here.
typedef struct ncclConfig_v22800 ncclConfig_t;
#define NCCL_SPLIT_NOCOLOR -1
struct emu_nccl_comm { MPI_Comm comm; int rank, size; ncclUniqueId id; };
typedef emu_nccl_comm* ncclComm_t;

static const char* ncclGetErrorString(ncclResult_t r) {
    return r == ncclSuccess ? "no error" : r == ncclInvalidArgument ? "invalid argument" : "invalid usage";
}
static ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
    memset(id, 0, sizeof(*id));
    snprintf(id->internal, sizeof(id->internal), "emu-nccl-%ld-%ld", (long)getpid(), (long)time(NULL));
    return ncclSuccess;
}
static emu_nccl_comm* emu_nccl_comm_new(MPI_Comm m, ncclUniqueId id) {
    emu_nccl_comm* c = new emu_nccl_comm;
    c->comm = m;
    MPI_Comm_rank(m, &c->rank);
    MPI_Comm_size(m, &c->size);
    c->id = id;
    return c;
}
// Every rank must pass the id rank 0 made, its own MPI rank and the run's size.
static ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank) {
    int initialized = 0, size = 0, mpi_rank = -1;
    MPI_Initialized(&initialized);
    if (!initialized) return ncclInvalidUsage;
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Comm_rank(MPI_COMM_WORLD, &mpi_rank);
    if (nranks != size || rank != mpi_rank || id.internal[0] == 0) return ncclInvalidArgument;
    ncclUniqueId first = id;
    MPI_Bcast(&first, sizeof(first), MPI_BYTE, 0, MPI_COMM_WORLD);
    if (memcmp(&first, &id, sizeof(id)) != 0) return ncclInvalidArgument;
    // NCCL refuses two ranks of one machine on the same GPU (it compares their PCI bus ids): so
    // does this, comparing the physical devices the ranks took
    MPI_Comm local;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, mpi_rank, MPI_INFO_NULL, &local);
    int local_size = 0, mine = emu_visible[emu_device], shared = 0;
    MPI_Comm_size(local, &local_size);
    int* devices = (int*)malloc(local_size * sizeof(int));
    MPI_Allgather(&mine, 1, MPI_INT, devices, 1, MPI_INT, local);
    for (int i = 0; i < local_size; i++) shared += devices[i] == mine;
    free(devices);
    MPI_Comm_free(&local);
    if (shared > 1) return ncclInvalidUsage;
    MPI_Comm world;
    MPI_Comm_dup(MPI_COMM_WORLD, &world);
    *comm = emu_nccl_comm_new(world, id);
    return ncclSuccess;
}
// NCCL_SPLIT_NOCOLOR's NULL may be destroyed: NCCL returns success for it.
static ncclResult_t ncclCommDestroy(ncclComm_t comm) {
    if (comm == NULL) return ncclSuccess;
    MPI_Comm_free(&comm->comm);
    delete comm;
    return ncclSuccess;
}
static ncclResult_t ncclCommCount(const ncclComm_t comm, int* count) {
    if (comm == NULL || count == NULL) return ncclInvalidArgument;
    *count = comm->size;
    return ncclSuccess;
}
static ncclResult_t ncclCommUserRank(const ncclComm_t comm, int* rank) {
    if (comm == NULL || rank == NULL) return ncclInvalidArgument;
    *rank = comm->rank;
    return ncclSuccess;
}
// Collective over comm (every rank of it calls, NOCOLOR ones too): the ranks that pass one color
// form a communicator, ranked by key, ties by their rank in comm (NCCL's order and MPI_Comm_split's);
// NCCL_SPLIT_NOCOLOR gives NULL. Colors are non-negative, as MPI takes them (NCCL would also group
// ranks under another negative number); config must be NULL.
static ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t* newcomm, ncclConfig_t* config) {
    if (comm == NULL || newcomm == NULL || config != NULL || (color < 0 && color != NCCL_SPLIT_NOCOLOR))
        return ncclInvalidArgument;
    MPI_Comm m;
    MPI_Comm_split(comm->comm, color == NCCL_SPLIT_NOCOLOR ? MPI_UNDEFINED : color, key, &m);
    *newcomm = m == MPI_COMM_NULL ? NULL : emu_nccl_comm_new(m, comm->id);
    return ncclSuccess;
}

// A type's size in bytes and its MPI type; 0 for one the emulator does not know. bf16 travels as
// its 16 bits and is summed by emu_nccl_bf16_add.
static size_t emu_nccl_type(ncclDataType_t type, MPI_Datatype* mpi) {
    switch (type) {
    case ncclInt8: *mpi = MPI_INT8_T; return 1;
    case ncclUint8: *mpi = MPI_UINT8_T; return 1;
    case ncclInt32: *mpi = MPI_INT32_T; return 4;
    case ncclFloat: *mpi = MPI_FLOAT; return 4;
    case ncclDouble: *mpi = MPI_DOUBLE; return 8;
    case ncclBfloat16: *mpi = MPI_UINT16_T; return 2;
    }
    return 0;
}
// bf16 sum, as MPI combines the ranks' values two at a time: both to float, added, rounded back
// to bf16 (to nearest, ties to even). MPI picks the order of the pairs, and NCCL does not specify
// its own: a bf16 sum over more than two ranks may differ between them in its last bits.
static void emu_nccl_bf16_add(void* in, void* inout, int* n, MPI_Datatype*) {
    const __nv_bfloat16* a = (const __nv_bfloat16*)in;
    __nv_bfloat16* b = (__nv_bfloat16*)inout;
    for (int i = 0; i < *n; i++) b[i] = __float2bfloat16(__bfloat162float(a[i]) + __bfloat162float(b[i]));
}
// The MPI operation that reduces type with op; 0 for a reduction the emulator does not do: ops
// other than ncclSum, and the integer types, which NCCL sums too (and train_gpu does not).
static int emu_nccl_sum(ncclDataType_t type, ncclRedOp_t op, MPI_Op* mpi) {
    static MPI_Op bf16_sum = MPI_OP_NULL;
    if (op != ncclSum) return 0;
    if (type == ncclFloat || type == ncclDouble) *mpi = MPI_SUM;
    else if (type != ncclBfloat16) return 0;
    else {
        if (bf16_sum == MPI_OP_NULL) MPI_Op_create(emu_nccl_bf16_add, 1, &bf16_sum);
        *mpi = bf16_sum;
    }
    return 1;
}
// MPI counts are ints: one MPI call moves at most emu_nccl_chunk elements (all ranks' blocks
// together), a larger operation takes several. dev/emu/nccl_check.cu lowers it to test that.
static size_t emu_nccl_chunk = (size_t)1 << 30;

// Between ncclGroupStart and the outermost ncclGroupEnd: the sends and receives queued, and the
// first error of a call in the group, which ncclGroupEnd returns too, dropping the group, as NCCL does.
struct emu_nccl_p2p { int send; void* buf; size_t count; MPI_Datatype type; size_t size; int peer; ncclComm_t comm; };
static struct { int depth; ncclResult_t error; std::vector<emu_nccl_p2p> queued; } emu_nccl_group;
static ncclResult_t emu_nccl_result(ncclResult_t r) {
    if (r != ncclSuccess && emu_nccl_group.depth > 0 && emu_nccl_group.error == ncclSuccess) emu_nccl_group.error = r;
    return r;
}

// A collective in a group is done at once, where NCCL would run it with the rest of the group at
// ncclGroupEnd: the program may not read its result before then anyway.
static ncclResult_t ncclAllReduce(const void* send, void* recv, size_t count, ncclDataType_t type, ncclRedOp_t op,
                                  ncclComm_t comm, cudaStream_t stream) {
    MPI_Datatype t;
    MPI_Op sum;
    size_t size = emu_nccl_type(type, &t);
    if (comm == NULL || size == 0 || !emu_nccl_sum(type, op, &sum)) return emu_nccl_result(ncclInvalidArgument);
    for (size_t i = 0; i < count; i += emu_nccl_chunk) {
        int n = (int)min(count - i, emu_nccl_chunk);
        MPI_Allreduce(send == recv ? MPI_IN_PLACE : (const char*)send + i * size, (char*)recv + i * size, n, t, sum,
                      comm->comm);
    }
    return ncclSuccess;
}
// Rank r receives block r of the sum (recvcount elements from r * recvcount); in place when recv
// is the rank's own block of send (recv == send + rank * recvcount), as NCCL allows. MPI's in-place
// form would leave the result at the start of send: here it goes through a buffer instead, and
// the other blocks of send are left as they were (NCCL does not say what it leaves there).
static ncclResult_t ncclReduceScatter(const void* send, void* recv, size_t recvcount, ncclDataType_t type,
                                      ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
    MPI_Datatype t;
    MPI_Op sum;
    size_t size = emu_nccl_type(type, &t);
    if (comm == NULL || size == 0 || !emu_nccl_sum(type, op, &sum)) return emu_nccl_result(ncclInvalidArgument);
    size_t ranks = comm->size;
    int whole = recvcount * ranks <= emu_nccl_chunk, in_place = recv == (const char*)send + comm->rank * recvcount * size;
    // in pieces: the same n elements of every block, copied side by side, per call
    size_t step = whole ? recvcount : max(emu_nccl_chunk / ranks, (size_t)1);
    char* packed = whole ? NULL : (char*)malloc(ranks * step * size);
    char* result = in_place ? (char*)malloc(step * size) : NULL;
    for (size_t i = 0; i < recvcount; i += step) {
        size_t n = min(recvcount - i, step);
        for (size_t r = 0; !whole && r < ranks; r++)
            memcpy(packed + r * n * size, (const char*)send + (r * recvcount + i) * size, n * size);
        char* out = (char*)recv + i * size;
        MPI_Reduce_scatter_block(whole ? send : packed, in_place ? result : out, (int)n, t, sum, comm->comm);
        if (in_place) memcpy(out, result, n * size);
    }
    free(packed);
    free(result);
    return ncclSuccess;
}
// Rank r's sendcount elements land at recv + r * sendcount on every rank; in place when send is
// the rank's own block of recv (send == recv + rank * sendcount), as NCCL allows.
static ncclResult_t ncclAllGather(const void* send, void* recv, size_t sendcount, ncclDataType_t type,
                                  ncclComm_t comm, cudaStream_t stream) {
    MPI_Datatype t;
    size_t size = emu_nccl_type(type, &t);
    if (comm == NULL || size == 0) return emu_nccl_result(ncclInvalidArgument);
    size_t ranks = comm->size;
    if (sendcount * ranks <= emu_nccl_chunk) {
        int n = (int)sendcount, in_place = send == (char*)recv + comm->rank * sendcount * size;
        MPI_Allgather(in_place ? MPI_IN_PLACE : send, n, t, recv, n, t, comm->comm);
        return ncclSuccess;
    }
    // in pieces: the same n elements of every rank's block gathered side by side, then each put in its place
    size_t step = max(emu_nccl_chunk / ranks, (size_t)1);
    char* packed = (char*)malloc(ranks * step * size);
    for (size_t i = 0; i < sendcount; i += step) {
        size_t n = min(sendcount - i, step);
        MPI_Allgather((const char*)send + i * size, (int)n, t, packed, (int)n, t, comm->comm);
        for (size_t r = 0; r < ranks; r++) memcpy((char*)recv + (r * sendcount + i) * size, packed + r * n * size, n * size);
    }
    free(packed);
    return ncclSuccess;
}

// The root's count elements (its send) to recv on every rank; in place when the root's send is its
// recv. The other ranks' send is not read.
static ncclResult_t ncclBroadcast(const void* send, void* recv, size_t count, ncclDataType_t type, int root,
                                  ncclComm_t comm, cudaStream_t stream) {
    MPI_Datatype t;
    size_t size = emu_nccl_type(type, &t);
    if (comm == NULL || size == 0 || root < 0 || root >= (int)comm->size) return emu_nccl_result(ncclInvalidArgument);
    if ((int)comm->rank == root && send != recv) memcpy(recv, send, count * size);
    for (size_t i = 0; i < count; i += emu_nccl_chunk) {
        int n = (int)min(count - i, emu_nccl_chunk);
        MPI_Bcast((char*)recv + i * size, n, t, root, comm->comm);
    }
    return ncclSuccess;
}

// Send and receive. NCCL pairs a send with a receive of the same count and type from the other
// side (it does not check that, and hangs or corrupts data when they differ): here a receive that
// gets more than it asked for stops in MPI (MPI_ERR_TRUNCATE), one that gets less stops here.
// Outside a group a send returns only once the receiver has matched it (MPI_Ssend), whatever its
// size, as NCCL's send on a stream waits for its receive: so a schedule that would deadlock on
// GPUs (two ranks that each send to the other first) deadlocks here too, and not only when the
// message is too large for MPI to buffer. A receive is MPI_Recv. Between ncclGroupStart and
// ncclGroupEnd (nested: the outermost end counts) they are queued and all posted at ncclGroupEnd
// (MPI_Isend, MPI_Irecv, then MPI_Waitall): NCCL's way to pair sends and receives without deadlock.
// A peer equal to the rank itself is a local copy in NCCL, which pairs it with its counterpart in
// the same group: here too, in a group; outside one it could never be matched (the send waits for
// a receive that its stream has after it) and is ncclInvalidUsage.
static void emu_nccl_received(const emu_nccl_p2p& p, MPI_Status* status, int n) {
    int got = -1;
    MPI_Get_count(status, p.type, &got);
    if (got == n) return;
    fprintf(stderr, "cuda_emu: rank %d: ncclRecv of %zu elements from rank %d met a send of another size (NCCL "
                    "needs the same count and type on both sides)\n", p.comm->rank, p.count, p.peer);
    MPI_Abort(MPI_COMM_WORLD, 1);
}
static ncclResult_t emu_nccl_p2p_call(int send, void* buf, size_t count, ncclDataType_t type, int peer, ncclComm_t comm) {
    emu_nccl_p2p p = {send, buf, count, MPI_DATATYPE_NULL, 0, peer, comm};
    p.size = emu_nccl_type(type, &p.type);
    if (comm == NULL || p.size == 0 || peer < 0 || peer >= comm->size) return emu_nccl_result(ncclInvalidArgument);
    if (emu_nccl_group.depth > 0) {
        emu_nccl_group.queued.push_back(p);
        return ncclSuccess;
    }
    if (peer == comm->rank) return ncclInvalidUsage;
    size_t i = 0;
    do {  // one message at least: NCCL pairs sends and receives of 0 elements too
        int n = (int)min(count - i, emu_nccl_chunk);
        MPI_Status status;
        if (send) MPI_Ssend((char*)buf + i * p.size, n, p.type, peer, 0, comm->comm);
        else MPI_Recv((char*)buf + i * p.size, n, p.type, peer, 0, comm->comm, &status);
        if (!send) emu_nccl_received(p, &status, n);
        i += n;
    } while (i < count);
    return ncclSuccess;
}
static ncclResult_t ncclSend(const void* sendbuff, size_t count, ncclDataType_t type, int peer, ncclComm_t comm,
                             cudaStream_t stream) {
    return emu_nccl_p2p_call(1, (void*)sendbuff, count, type, peer, comm);
}
static ncclResult_t ncclRecv(void* recvbuff, size_t count, ncclDataType_t type, int peer, ncclComm_t comm,
                             cudaStream_t stream) {
    return emu_nccl_p2p_call(0, recvbuff, count, type, peer, comm);
}
static ncclResult_t ncclGroupStart() {
    emu_nccl_group.depth++;
    return ncclSuccess;
}
static ncclResult_t ncclGroupEnd() {
    if (emu_nccl_group.depth == 0) return ncclInvalidUsage;
    if (--emu_nccl_group.depth > 0) return ncclSuccess;
    std::vector<emu_nccl_p2p> queued;
    queued.swap(emu_nccl_group.queued);
    ncclResult_t error = emu_nccl_group.error;
    emu_nccl_group.error = ncclSuccess;
    if (error != ncclSuccess) return error;
    std::vector<MPI_Request> requests;
    std::vector<size_t> of;  // the operation of each request, and its elements
    std::vector<int> elements;
    for (size_t k = 0; k < queued.size(); k++) {
        const emu_nccl_p2p& p = queued[k];
        size_t i = 0;
        do {
            int n = (int)min(p.count - i, emu_nccl_chunk);
            MPI_Request r;
            if (p.send) MPI_Isend((char*)p.buf + i * p.size, n, p.type, p.peer, 0, p.comm->comm, &r);
            else MPI_Irecv((char*)p.buf + i * p.size, n, p.type, p.peer, 0, p.comm->comm, &r);
            requests.push_back(r);
            of.push_back(k);
            elements.push_back(n);
            i += n;
        } while (i < p.count);
    }
    std::vector<MPI_Status> status(requests.size());
    MPI_Waitall((int)requests.size(), requests.data(), status.data());
    for (size_t j = 0; j < requests.size(); j++)
        if (!queued[of[j]].send) emu_nccl_received(queued[of[j]], &status[j], elements[j]);
    return ncclSuccess;
}
#endif

#endif // CUDA_EMU_H

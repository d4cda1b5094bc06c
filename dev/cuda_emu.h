// dev/cuda_emu.h: runs our CUDA kernels on the CPU, so that their indexing, bounds and barrier
// logic can be tested on a machine without a GPU (this one). It is a test tool, not a GPU: it says
// nothing about speed, and a kernel that passes here still has to be checked on a real device.
//
// How: dev/cuda_emu.py rewrites every launch `kernel<<<grid, block>>>(args)` into
// `emu_launch(grid, block, [=]{ kernel(args); })`, and this header (force-included) maps the CUDA
// runtime onto host memory. Each block runs on one OS thread, its threads as cooperative fibers
// (ucontext): a thread runs until it reaches a barrier (__syncthreads, or a warp shuffle, which is
// a barrier of its warp), then the next thread runs. That is the least synchronised schedule a GPU
// could choose, so a missing __syncthreads usually shows up as a wrong result here. `__shared__` is
// `static`, which is shared memory exactly, because blocks run one after another.
// Checked: launch limits (1024 threads, grid y/z <= 65535, 48 KiB static shared memory is up to
// the compiler), __syncthreads or shuffles that not every thread of the block/warp reaches
// (undefined behaviour on a GPU: reported and aborted), misaligned float4 accesses (see
// EMU_CHECK_ALIGN in the kernels' load helpers). Build with -fsanitize=address to catch
// out-of-bounds "device" memory accesses: cudaMalloc is malloc.
// Environment: CUDA_EMU_REVERSE=1 runs each block's threads in reverse order (a second schedule).

#ifndef CUDA_EMU_H
#define CUDA_EMU_H

#include <ucontext.h>
#include <sys/mman.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <time.h>
#include <functional>
#include <algorithm>
using std::min;
using std::max;

#define CUDA_EMU 1
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __shared__ static
#define __launch_bounds__(...)
#define __align__(n) __attribute__((aligned(n)))
#define __restrict__ __restrict

// ---------- vector types ----------
struct dim3 {
    unsigned int x, y, z;
    dim3(unsigned int x_ = 1, unsigned int y_ = 1, unsigned int z_ = 1) : x(x_), y(y_), z(z_) {}
};
typedef dim3 uint3;
struct alignas(16) float4 { float x, y, z, w; };
struct alignas(8) float2 { float x, y; };
static inline float4 make_float4(float x, float y, float z, float w) { float4 r = {x, y, z, w}; return r; }
static inline float2 make_float2(float x, float y) { float2 r = {x, y}; return r; }

// ---------- device math ----------
static inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
static inline float __fdividef(float a, float b) { return a / b; }
static inline int __float_as_int(float f) { int i; memcpy(&i, &f, 4); return i; }
static inline float __int_as_float(int i) { float f; memcpy(&f, &i, 4); return f; }
template <typename T> static inline T __ldg(const T* p) { return *p; }
static inline float atomicAdd(float* p, float v) { float old = *p; *p += v; return old; }
static inline int atomicAdd(int* p, int v) { int old = *p; *p += v; return old; }

// ---------- the scheduler ----------
enum { EMU_RUNNABLE, EMU_BLOCK_WAIT, EMU_WARP_WAIT, EMU_DONE };
struct EmuThread {
    ucontext_t ctx;
    uint3 tid;
    int linear, state;
    char* stack;
};
struct EmuState {
    uint3 block_idx, block_dim, grid_dim;
    EmuThread* threads;
    int nthreads;
    EmuThread* cur;
    ucontext_t sched;
    std::function<void()>* body;
    long long block_gen;            // block barrier generation
    int block_acc[2];               // __syncthreads_count/or accumulators, by generation parity
    unsigned long long warp_slot[32][2][32];  // shuffle exchange: [warp][parity][lane]
    long long warp_gen[32];
    int capacity;
    int cuda_error;
};
static EmuState emu;
static const size_t EMU_STACK = 32 * 1024;  // kernels keep little on the stack; ASan clears the shadow of the whole stack at each switch

#define threadIdx (emu.cur->tid)
#define blockIdx (emu.block_idx)
#define blockDim (emu.block_dim)
#define gridDim (emu.grid_dim)
#define warpSize 32

static void emu_fatal(const char* what) {
    fprintf(stderr, "cuda_emu: %s (block %u,%u,%u thread %u,%u,%u)\n", what, emu.block_idx.x,
            emu.block_idx.y, emu.block_idx.z, emu.cur ? emu.cur->tid.x : 0, emu.cur ? emu.cur->tid.y : 0,
            emu.cur ? emu.cur->tid.z : 0);
    abort();
}

static void emu_yield(int state) {
    EmuThread* me = emu.cur;
    me->state = state;
    swapcontext(&me->ctx, &emu.sched);
}

static void emu_entry(void) {
    (*emu.body)();
    emu.cur->state = EMU_DONE;
    // returning switches to uc_link (the scheduler)
}

static inline void __syncthreads(void) { emu_yield(EMU_BLOCK_WAIT); }
static inline int __syncthreads_count(int pred) {
    int parity = (int)(emu.block_gen & 1);
    emu.block_acc[parity] += pred ? 1 : 0;
    emu_yield(EMU_BLOCK_WAIT);
    return emu.block_acc[parity];
}
static inline int __syncthreads_or(int pred) { return __syncthreads_count(pred) != 0; }
static inline int __syncthreads_and(int pred) { return __syncthreads_count(pred) == emu.nthreads; }

static inline int emu_warp(void) { return emu.cur->linear / 32; }
static inline int emu_lane(void) { return emu.cur->linear % 32; }
static inline int emu_warp_size(int w) {
    int n = emu.nthreads - w * 32;
    return n < 32 ? n : 32;
}
// Every lane of the warp writes its value, waits for the others, reads its source lane's value.
template <typename V>
static inline V emu_shuffle(unsigned mask, V v, int src) {
    static_assert(sizeof(V) <= 8, "shuffle of a type wider than 8 bytes");
    int w = emu_warp(), lane = emu_lane();
    if (mask != 0xffffffffu) emu_fatal("shuffle with a partial mask is not emulated");
    if (emu_warp_size(w) != 32) emu_fatal("shuffle in a warp with fewer than 32 threads");
    int parity = (int)(emu.warp_gen[w] & 1);
    memcpy(&emu.warp_slot[w][parity][lane], &v, sizeof(V));
    emu_yield(EMU_WARP_WAIT);
    V r;
    memcpy(&r, &emu.warp_slot[w][parity][src & 31], sizeof(V));
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

static void emu_run_block(void) {
    int n = emu.nthreads;
    bool reverse = getenv("CUDA_EMU_REVERSE") != NULL && getenv("CUDA_EMU_REVERSE")[0] == '1';
    for (int i = 0; i < n; i++) {
        EmuThread* t = &emu.threads[i];
        t->linear = i;
        t->tid = uint3(i % emu.block_dim.x, (i / emu.block_dim.x) % emu.block_dim.y,
                       i / (emu.block_dim.x * emu.block_dim.y));
        t->state = EMU_RUNNABLE;
        getcontext(&t->ctx);
        t->ctx.uc_stack.ss_sp = t->stack;
        t->ctx.uc_stack.ss_size = EMU_STACK;
        t->ctx.uc_link = &emu.sched;
        makecontext(&t->ctx, emu_entry, 0);
    }
    emu.block_gen = 0;
    emu.block_acc[0] = emu.block_acc[1] = 0;
    for (int w = 0; w < 32; w++) emu.warp_gen[w] = 0;
    for (;;) {
        for (int k = 0; k < n; k++) {
            int i = reverse ? n - 1 - k : k;
            if (emu.threads[i].state != EMU_RUNNABLE) continue;
            emu.cur = &emu.threads[i];
            swapcontext(&emu.sched, &emu.threads[i].ctx);
        }
        emu.cur = NULL;
        // Release warps whose lanes all wait at a shuffle.
        bool released = false;
        int nwarps = (n + 31) / 32;
        for (int w = 0; w < nwarps; w++) {
            int waiting = 0, done = 0, size = emu_warp_size(w);
            for (int l = 0; l < size; l++) {
                int s = emu.threads[w * 32 + l].state;
                waiting += s == EMU_WARP_WAIT;
                done += s == EMU_DONE;
            }
            if (waiting == size) {
                for (int l = 0; l < size; l++) emu.threads[w * 32 + l].state = EMU_RUNNABLE;
                emu.warp_gen[w]++;
                released = true;
            } else if (waiting > 0 && waiting + done == size) {
                emu.cur = &emu.threads[w * 32];
                emu_fatal("a warp shuffle that some lanes of the warp never reach (they exited)");
            }
        }
        if (released) continue;
        int block_wait = 0, done = 0;
        for (int i = 0; i < n; i++) {
            block_wait += emu.threads[i].state == EMU_BLOCK_WAIT;
            done += emu.threads[i].state == EMU_DONE;
        }
        if (done == n) break;
        if (block_wait == n) {
            for (int i = 0; i < n; i++) emu.threads[i].state = EMU_RUNNABLE;
            emu.block_gen++;
            emu.block_acc[emu.block_gen & 1] = 0;
            continue;
        }
        emu_fatal(block_wait + done == n
                      ? "__syncthreads that some threads of the block never reach (they exited)"
                      : "deadlock: threads wait at different barriers (divergent __syncthreads/shuffle)");
    }
}

typedef int cudaError_t;
enum { cudaSuccess = 0, cudaErrorInvalidValue = 1, cudaErrorInvalidConfiguration = 9 };

static void emu_launch(dim3 grid, dim3 block, size_t smem, std::function<void()> body) {
    if (smem != 0) { emu.cuda_error = cudaErrorInvalidConfiguration; return; }
    unsigned long long nt = (unsigned long long)block.x * block.y * block.z;
    if (nt == 0 || nt > 1024 || block.z > 64 || grid.x == 0 || grid.y == 0 || grid.z == 0 ||
        grid.y > 65535 || grid.z > 65535 || grid.x > 2147483647u) {
        fprintf(stderr, "cuda_emu: invalid launch grid (%u,%u,%u) block (%u,%u,%u)\n", grid.x, grid.y,
                grid.z, block.x, block.y, block.z);
        emu.cuda_error = cudaErrorInvalidConfiguration;
        return;
    }
    if ((int)nt > emu.capacity) {
        for (int i = 0; i < emu.capacity; i++) munmap(emu.threads[i].stack, EMU_STACK);
        free(emu.threads);
        emu.threads = (EmuThread*)calloc(nt, sizeof(EmuThread));
        for (unsigned long long i = 0; i < nt; i++) {
            void* s = mmap(NULL, EMU_STACK, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
            if (s == MAP_FAILED) { fprintf(stderr, "cuda_emu: out of memory for stacks\n"); exit(1); }
            emu.threads[i].stack = (char*)s;
        }
        emu.capacity = (int)nt;
    }
    emu.nthreads = (int)nt;
    emu.block_dim = block;
    emu.grid_dim = grid;
    emu.body = &body;
    for (unsigned z = 0; z < grid.z; z++)
        for (unsigned y = 0; y < grid.y; y++)
            for (unsigned x = 0; x < grid.x; x++) {
                emu.block_idx = uint3(x, y, z);
                emu_run_block();
            }
    emu.body = NULL;
}
static void emu_launch(dim3 grid, dim3 block, std::function<void()> body) { emu_launch(grid, block, 0, body); }

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
};

static const char* cudaGetErrorString(cudaError_t e) {
    return e == cudaSuccess ? "no error" : e == cudaErrorInvalidValue ? "invalid argument" : "invalid configuration argument";
}
static cudaError_t cudaGetLastError(void) { cudaError_t e = emu.cuda_error; emu.cuda_error = 0; return e; }
static cudaError_t cudaPeekAtLastError(void) { return emu.cuda_error; }
static cudaError_t cudaGetDeviceCount(int* n) { *n = 1; return cudaSuccess; }
static cudaError_t cudaSetDevice(int d) { return d == 0 ? cudaSuccess : cudaErrorInvalidValue; }
static cudaError_t cudaGetDevice(int* d) { *d = 0; return cudaSuccess; }
// The emulated device pretends to be an H100 SXM, so that table lookups have something to find.
static cudaError_t cudaGetDeviceProperties(cudaDeviceProp* p, int d) {
    memset(p, 0, sizeof(*p));
    strcpy(p->name, "cuda_emu (CPU emulation of an H100 SXM)");
    p->totalGlobalMem = 80ull << 30;
    p->sharedMemPerBlock = 48 << 10;
    p->multiProcessorCount = 132;
    p->major = 9;
    p->minor = 0;
    p->maxThreadsPerBlock = 1024;
    return cudaSuccess;
}
static cudaError_t cudaDeviceGetAttribute(int* v, cudaDeviceAttr a, int d) {
    *v = a == cudaDevAttrClockRate ? 1980000 : a == cudaDevAttrMemoryClockRate ? 2619000 : 5120;
    return cudaSuccess;
}
static cudaError_t cudaMemGetInfo(size_t* free_b, size_t* total) { *free_b = 64ull << 30; *total = 80ull << 30; return cudaSuccess; }
static cudaError_t cudaMalloc(void** p, size_t n) {
    *p = malloc(n == 0 ? 1 : n);
    if (*p == NULL) return cudaErrorInvalidValue;
    memset(*p, 0xff, n);  // NaN, as uninitialised memory might be
    return cudaSuccess;
}
template <typename T> static cudaError_t cudaMalloc(T** p, size_t n) { return cudaMalloc((void**)p, n); }
static cudaError_t cudaMallocHost(void** p, size_t n) { return cudaMalloc(p, n); }
template <typename T> static cudaError_t cudaMallocHost(T** p, size_t n) { return cudaMalloc((void**)p, n); }
static cudaError_t cudaFree(void* p) { free(p); return cudaSuccess; }
static cudaError_t cudaFreeHost(void* p) { free(p); return cudaSuccess; }
static cudaError_t cudaMemcpy(void* d, const void* s, size_t n, cudaMemcpyKind k) { memmove(d, s, n); return cudaSuccess; }
static cudaError_t cudaMemcpyAsync(void* d, const void* s, size_t n, cudaMemcpyKind k, cudaStream_t st = 0) { memmove(d, s, n); return cudaSuccess; }
static cudaError_t cudaMemset(void* d, int v, size_t n) { memset(d, v, n); return cudaSuccess; }
static cudaError_t cudaMemsetAsync(void* d, int v, size_t n, cudaStream_t st = 0) { memset(d, v, n); return cudaSuccess; }
static cudaError_t cudaDeviceSynchronize(void) { return cudaSuccess; }
static cudaError_t cudaDeviceReset(void) { return cudaSuccess; }
static double emu_now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}
static cudaError_t cudaEventCreate(cudaEvent_t* e) { *e = (double*)malloc(sizeof(double)); **e = 0; return cudaSuccess; }
static cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s = 0) { *e = emu_now_ms(); return cudaSuccess; }
static cudaError_t cudaEventSynchronize(cudaEvent_t e) { return cudaSuccess; }
static cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t a, cudaEvent_t b) { *ms = (float)(*b - *a); return cudaSuccess; }
static cudaError_t cudaEventDestroy(cudaEvent_t e) { free(e); return cudaSuccess; }
static cudaError_t cudaDriverGetVersion(int* v) { *v = 13000; return cudaSuccess; }
static cudaError_t cudaRuntimeGetVersion(int* v) { *v = 13000; return cudaSuccess; }

#endif // CUDA_EMU_H

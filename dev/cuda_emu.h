// dev/cuda_emu.h: runs our CUDA kernels on the CPU, so that their indexing, bounds and barrier
// logic can be tested on a machine without a GPU (this one). It is a test tool, not a GPU: it says
// nothing about speed, and a kernel that passes here still has to be checked on a real device
// (doc/gpu.md lists what it cannot see, and what covers that on a GPU).
//
// How: dev/cuda_emu.py rewrites every launch `kernel<<<grid, block>>>(args)` into
// `emu_launch("kernel", grid, block, [=]{ kernel(args); })`, and this header (force-included)
// maps the CUDA runtime onto host memory. Each block runs on one OS thread, its threads as
// cooperative fibers: a thread runs until it reaches a barrier (__syncthreads, or a warp shuffle,
// which is a barrier of its warp), then the next thread runs. That is the least synchronised
// schedule a GPU could choose, so a missing __syncthreads usually shows up as a wrong result here.
// `__shared__` is `static`, which is shared memory exactly, because blocks run one after another.
// Checked: launch limits (1024 threads, grid y/z <= 65535, 48 KiB static shared memory is up to
// the compiler), __syncthreads or shuffles that not every thread of the block/warp reaches
// (undefined behaviour on a GPU: reported and aborted), and, built with -fsanitize=address,
// undefined as the Makefile does: out-of-bounds "device" memory accesses (cudaMalloc is malloc)
// and misaligned float4 accesses (float4 is 16-byte aligned here as on a GPU).
// Environment:
//   CUDA_EMU_REVERSE=1                         each block's threads in reverse order (a second schedule)
//   CUDA_EMU_DRIVER=none|nodevice|old|broken   the driver and GPU that start-up finds (cudaGetDeviceCount)
//   CUDA_EMU_FAULT=NAME                        kernel NAME faults as an out-of-bounds access does on a GPU

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
// Each thread of a block is a fiber: a stack of its own and a saved stack pointer. Fibers are
// made once and reused by every block of every launch: a fiber runs the kernel body, marks
// itself done, switches back to the scheduler, and when resumed runs the body again (for the next
// block). The switch saves and restores only the registers a function call must preserve, a
// few nanoseconds, where ucontext's swapcontext makes a system call to save the signal mask: on
// x86-64 it is the assembly below, elsewhere ucontext.
enum { EMU_RUNNABLE, EMU_BLOCK_WAIT, EMU_WARP_WAIT, EMU_DONE };
struct EmuThread {
#if defined(__x86_64__)
    void* sp;                       // saved stack pointer while switched out
#else
    ucontext_t ctx;
#endif
    void* fake_stack;               // AddressSanitizer's bookkeeping across switches
    uint3 tid;
    int linear, state;
    char* stack;
};
struct EmuState {
    uint3 block_idx, block_dim, grid_dim;
    EmuThread threads[1024];        // the fibers, made when a launch first needs them
    int nthreads;
    EmuThread* cur;
#if defined(__x86_64__)
    void* sched_sp;
#else
    ucontext_t sched;
#endif
    void* sched_fake_stack;
    const void* sched_stack_bottom;  // the scheduler's stack, for AddressSanitizer
    size_t sched_stack_size;
    std::function<void()>* body;
    long long block_gen;            // block barrier generation
    int block_acc[2];               // __syncthreads_count/or accumulators, by generation parity
    unsigned long long warp_slot[32][2][32];  // shuffle exchange: [warp][parity][lane]
    long long warp_gen[32];
    int capacity;                   // fibers made so far
    int cuda_error;                 // the next cudaGetLastError's answer (a bad launch)
    int sticky_error;               // a kernel "faulted" (CUDA_EMU_FAULT): every later call fails
    const char* kernel;             // the kernel being run, for messages
};
static EmuState emu;
static const size_t EMU_STACK = 32 * 1024;  // kernels keep little on the stack

#define threadIdx (emu.cur->tid)
#define blockIdx (emu.block_idx)
#define blockDim (emu.block_dim)
#define gridDim (emu.grid_dim)
#define warpSize 32

static void emu_fatal(const char* what) {
    fprintf(stderr, "cuda_emu: %s (kernel %s, block %u,%u,%u thread %u,%u,%u)\n", what,
            emu.kernel ? emu.kernel : "?", emu.block_idx.x, emu.block_idx.y, emu.block_idx.z,
            emu.cur ? emu.cur->tid.x : 0, emu.cur ? emu.cur->tid.y : 0, emu.cur ? emu.cur->tid.z : 0);
    abort();
}

// AddressSanitizer must be told when the stack changes under it.
#if defined(__SANITIZE_ADDRESS__)
#define EMU_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define EMU_ASAN 1
#endif
#endif
#ifdef EMU_ASAN
#include <sanitizer/common_interface_defs.h>
#define EMU_ASAN_START(save, bottom, size) __sanitizer_start_switch_fiber(save, bottom, size)
#define EMU_ASAN_FINISH(save, bottom, size) __sanitizer_finish_switch_fiber(save, bottom, size)
#else
#define EMU_ASAN_START(save, bottom, size) ((void)0)
#define EMU_ASAN_FINISH(save, bottom, size) ((void)0)
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
extern "C" void emu_fiber_entry(void) { emu_thread_main(); }
static void emu_fiber_init(EmuThread* t) {
    // The stack's top is 16-byte aligned. emu_switch pops six registers, then returns into
    // emu_fiber_start with the stack pointer at the top, aligned as before a call, as its call
    // of emu_fiber_entry needs.
    void** top = (void**)(t->stack + EMU_STACK);
    top[-1] = (void*)emu_fiber_start;
    for (int r = 2; r <= 7; r++) top[-r] = NULL;
    t->sp = (void*)(top - 7);
}
static inline void emu_switch_in(EmuThread* t) { emu_switch(&emu.sched_sp, t->sp); }
static inline void emu_switch_out(EmuThread* t) { emu_switch(&t->sp, emu.sched_sp); }
#else
static void emu_fiber_init(EmuThread* t) {
    getcontext(&t->ctx);
    t->ctx.uc_stack.ss_sp = t->stack;
    t->ctx.uc_stack.ss_size = EMU_STACK;
    t->ctx.uc_link = NULL;  // never returns
    makecontext(&t->ctx, emu_thread_main, 0);
}
static inline void emu_switch_in(EmuThread* t) { swapcontext(&emu.sched, &t->ctx); }
static inline void emu_switch_out(EmuThread* t) { swapcontext(&t->ctx, &emu.sched); }
#endif

// Scheduler -> thread t, until t waits at a barrier or finishes its block.
static void emu_resume(EmuThread* t) {
    emu.cur = t;
    EMU_ASAN_START(&emu.sched_fake_stack, t->stack, EMU_STACK);
    emu_switch_in(t);
    EMU_ASAN_FINISH(emu.sched_fake_stack, NULL, NULL);
}

// The running thread -> scheduler, in the given state; returns when the scheduler resumes it.
static void emu_yield(int state) {
    EmuThread* me = emu.cur;
    me->state = state;
    EMU_ASAN_START(&me->fake_stack, emu.sched_stack_bottom, emu.sched_stack_size);
    emu_switch_out(me);
    EMU_ASAN_FINISH(me->fake_stack, NULL, NULL);
}

static void emu_thread_main(void) {
    EMU_ASAN_FINISH(NULL, &emu.sched_stack_bottom, &emu.sched_stack_size);
    for (;;) {
        (*emu.body)();
        emu_yield(EMU_DONE);
    }
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

static bool emu_reverse;  // CUDA_EMU_REVERSE=1

static void emu_run_block(void) {
    int n = emu.nthreads;
    for (int i = 0; i < n; i++) {
        EmuThread* t = &emu.threads[i];
        t->linear = i;
        t->tid = uint3(i % emu.block_dim.x, (i / emu.block_dim.x) % emu.block_dim.y,
                       i / (emu.block_dim.x * emu.block_dim.y));
        t->state = EMU_RUNNABLE;
    }
    emu.block_gen = 0;
    emu.block_acc[0] = emu.block_acc[1] = 0;
    for (int w = 0; w < 32; w++) emu.warp_gen[w] = 0;
    for (;;) {
        for (int k = 0; k < n; k++) {
            int i = emu_reverse ? n - 1 - k : k;
            if (emu.threads[i].state == EMU_RUNNABLE) emu_resume(&emu.threads[i]);
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

// The CUDA runtime's error codes that these programs can meet (the same numbers as CUDA's).
typedef int cudaError_t;
enum {
    cudaSuccess = 0, cudaErrorInvalidValue = 1, cudaErrorMemoryAllocation = 2,
    cudaErrorInvalidConfiguration = 9, cudaErrorInsufficientDriver = 35, cudaErrorNoDevice = 100,
    cudaErrorNoKernelImageForDevice = 209,
    cudaErrorIllegalAddress = 700, cudaErrorLaunchFailure = 719, cudaErrorSystemDriverMismatch = 803,
};

// CUDA_EMU_FAULT=NAME: every launch of kernel NAME "faults" as a kernel that writes out of bounds
// does on a GPU: the launch itself returns no error, the kernel runs, and the error
// (cudaErrorIllegalAddress) comes from the next call that waits for the GPU, and from every call
// after it. This is how the tests check that a fault is reported, and that GPU_DEBUG=1 names the
// kernel.
static void emu_launch(const char* name, dim3 grid, dim3 block, size_t smem, std::function<void()> body) {
    if (emu.sticky_error) return;  // the context is lost: nothing runs any more
    if (smem != 0) { emu.cuda_error = cudaErrorInvalidConfiguration; return; }
    unsigned long long nt = (unsigned long long)block.x * block.y * block.z;
    if (nt == 0 || nt > 1024 || block.z > 64 || grid.x == 0 || grid.y == 0 || grid.z == 0 ||
        grid.y > 65535 || grid.z > 65535 || grid.x > 2147483647u) {
        fprintf(stderr, "cuda_emu: invalid launch of %s: grid (%u,%u,%u) block (%u,%u,%u)\n", name, grid.x,
                grid.y, grid.z, block.x, block.y, block.z);
        emu.cuda_error = cudaErrorInvalidConfiguration;
        return;
    }
    for (; emu.capacity < (int)nt; emu.capacity++) {  // fibers are made once, when first needed
        EmuThread* t = &emu.threads[emu.capacity];
        void* s = mmap(NULL, EMU_STACK, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (s == MAP_FAILED) { fprintf(stderr, "cuda_emu: out of memory for stacks\n"); exit(1); }
        t->stack = (char*)s;
        emu_fiber_init(t);
    }
    const char* rev = getenv("CUDA_EMU_REVERSE");
    emu_reverse = rev != NULL && rev[0] == '1';
    emu.nthreads = (int)nt;
    emu.block_dim = block;
    emu.grid_dim = grid;
    emu.body = &body;
    emu.kernel = name;
    for (unsigned z = 0; z < grid.z; z++)
        for (unsigned y = 0; y < grid.y; y++)
            for (unsigned x = 0; x < grid.x; x++) {
                emu.block_idx = uint3(x, y, z);
                emu_run_block();
            }
    emu.body = NULL;
    emu.kernel = NULL;
    const char* fault = getenv("CUDA_EMU_FAULT");
    if (fault != NULL && strcmp(fault, name) == 0) emu.sticky_error = cudaErrorIllegalAddress;
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
    if (emu.sticky_error) emu_fault_seen = true;
    return emu.sticky_error;
}
#define EMU_RETURN_IF_FAULT() do { if (emu_sync_error()) return emu.sticky_error; } while (0)

static cudaError_t cudaGetLastError(void) {
    if (emu_fault_seen) return emu.sticky_error;
    cudaError_t e = emu.cuda_error;
    emu.cuda_error = 0;
    return e;
}
static cudaError_t cudaPeekAtLastError(void) { return emu_fault_seen ? emu.sticky_error : emu.cuda_error; }

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
static cudaError_t cudaGetDeviceCount(int* n) {
    const char* d = emu_driver();
    *n = 0;
    if (strcmp(d, "none") == 0 || strcmp(d, "old") == 0) return cudaErrorInsufficientDriver;
    if (strcmp(d, "nodevice") == 0) return cudaErrorNoDevice;
    if (strcmp(d, "broken") == 0) return cudaErrorSystemDriverMismatch;
    *n = 1;
    return cudaSuccess;
}
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

#endif // CUDA_EMU_H

// dev/emu/cuda_emu.h: runs our CUDA kernels on the CPU, so that their indexing, bounds and barrier
// logic can be tested on a machine without a GPU (this one). It is a test tool, not a GPU: it says
// nothing about speed, and a kernel that passes here still has to be checked on a real device
// (doc/gpu.md lists what it cannot see, and what covers that on a GPU).
//
// How: dev/emu/cuda_emu.py rewrites every launch `kernel<<<grid, block>>>(args)` into
// `emu_launch("kernel", grid, block, [=]{ kernel(args); })`, and this header (force-included)
// maps the CUDA runtime onto host memory. Each block runs on one OS thread, its threads as
// cooperative fibers: a thread runs until it reaches a barrier (__syncthreads, or a warp shuffle,
// which is a barrier of its warp), then the next thread runs. That is the least synchronised
// schedule a GPU could choose, so a missing __syncthreads usually shows up as a wrong result here.
// `__shared__` is `static`, which is shared memory exactly, because blocks run one after another.
// Checked: launch limits (1024 threads, grid y/z <= 65535, 48 KiB static shared memory is up to
// the compiler), __syncthreads or warp instructions that not every thread of the block/warp
// reaches, or that the lanes of a warp reach at different instructions (undefined behaviour on a
// GPU: reported and aborted), ldmatrix and cp.async addresses that are not 16-byte aligned (a
// fault on a GPU), cp.async copies a thread never waits for, and, built with -fsanitize=address,
// undefined as the Makefile does: out-of-bounds "device" memory accesses (cudaMalloc is malloc)
// and misaligned float4 accesses (float4 is 16-byte aligned here as on a GPU).
// Tensor-core instructions: gpt2/gpu/matmul_bf16.cuh wraps each PTX instruction its bf16 GEMM needs
// in a function, and this header defines the same functions from the PTX ISA's definitions, so that
// the kernels that use them run here too (dev/gpu/instruction_check.cu checks each against a scalar
// definition):
//   mma_bf16_16816            a warp barrier, like a shuffle: the lanes leave their fragments in
//                             slots, then each lane computes its four outputs from the warp's A and
//                             B, adding the 16 products in float32 in order;
//   ldmatrix_x4(_trans)       a warp barrier: the lanes leave their row addresses, and the last
//                             lane to arrive reads the four matrices for the whole warp at once, as
//                             the single instruction does;
//   cp_async16, cp_async_commit, cp_async_wait<N>
//                             each thread queues its copies and performs them only when a wait
//                             retires their group: a kernel that reads shared memory before the
//                             wait (and the __syncthreads after it) reads stale data here, as it may
//                             on a GPU, where the copy lands at some unknown time in between.
// Environment:
//   CUDA_EMU_REVERSE=1                         each block's threads in reverse order (a second schedule)
//   CUDA_EMU_DRIVER=none|nodevice|old|broken   the driver and GPU that start-up finds (cudaGetDeviceCount)
//   CUDA_EMU_DEVICES=N                         the number of GPUs it finds (default 1)
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
// A cp.async copy that its thread has issued and no wait has retired yet.
struct EmuCopy {
    void* dst;
    const void* src;
    int zero;                       // src_bytes 0: 16 zero bytes, src not read
    int group;                      // its commit group: the cp_async_commit calls before it
};
enum { EMU_MAX_COPIES = 64 };       // in flight per thread; a multi-stage tile loader needs a few
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
    const char* warp_op;            // the warp instruction it waits at, for EMU_WARP_WAIT
    EmuCopy copies[EMU_MAX_COPIES]; // its cp.async copies in flight, in issue order
    int ncopies;
    int groups_committed;           // its cp_async_commit calls in this block
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
    unsigned long long warp_slot[32][2][32];  // shuffle values, ldmatrix row addresses: [warp][parity][lane]
    uint32_t mma_slot[32][2][32][6];          // mma operands a[0..3], b[0..1]: [warp][parity][lane]
    uint32_t ldmatrix_slot[32][2][32][4];     // ldmatrix results r[0..3]: [warp][parity][lane]
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
        // A copy no wait retired may land at any time, even in the next block's shared memory.
        if (emu.cur->ncopies > 0) emu_fatal("cp.async copies never waited for (the thread ended with copies in flight)");
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
// Every lane of a warp instruction (a shuffle, mma, ldmatrix) starts here, then leaves its operands
// in the warp's exchange slots and waits for the other lanes at the warp barrier. The warp must be
// full, as all our kernels' warps are (a partial warp needs masks, which are not emulated). Each
// slot array has two halves, by the parity of the warp's barrier count: a lane released from one
// barrier may run on to the next warp instruction and write its operands while slower lanes still
// read the previous ones, but not two instructions on, since the next barrier waits for them.
// Returns the parity.
static inline int emu_warp_enter(const char* op) {
    int w = emu_warp();
    if (emu_warp_size(w) != 32) {
        static char what[96];
        snprintf(what, sizeof what, "%s in a warp with fewer than 32 threads", op);
        emu_fatal(what);
    }
    emu.cur->warp_op = op;
    return (int)(emu.warp_gen[w] & 1);
}
// The lanes of warp w all wait at a warp instruction: the same one, unless the kernel diverged,
// which is undefined behaviour on a GPU and here would mix the operands of two instructions.
static void emu_check_warp_op(int w) {
    const char* op = emu.threads[w * 32].warp_op;
    for (int l = 1; l < emu_warp_size(w); l++) {
        const char* other = emu.threads[w * 32 + l].warp_op;
        if (other != op && strcmp(other, op) != 0) {
            static char what[160];
            snprintf(what, sizeof what, "lanes of a warp wait at different warp instructions (lane 0 at %s, lane %d at %s)",
                     op, l, other);
            emu.cur = &emu.threads[w * 32 + l];
            emu_fatal(what);
        }
    }
}
// Every lane of the warp writes its value, waits for the others, reads its source lane's value.
template <typename V>
static inline V emu_shuffle(unsigned mask, V v, int src) {
    static_assert(sizeof(V) <= 8, "shuffle of a type wider than 8 bytes");
    if (mask != 0xffffffffu) emu_fatal("shuffle with a partial mask is not emulated");
    int w = emu_warp(), lane = emu_lane(), parity = emu_warp_enter("shuffle");
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

// ---------- tensor-core instructions ----------
// The functions gpt2/gpu/matmul_bf16.cuh defines with PTX (section "tensor-core instructions"),
// from the PTX ISA's definitions; its comments give the fragment layouts.

// One bf16 half of a 32-bit register as a float: the lower-numbered element is the low half.
static inline float emu_bf16_half(uint32_t reg, int high) {
    return __bfloat162float(__ushort_as_bfloat16((unsigned short)(high ? reg >> 16 : reg & 0xffffu)));
}
// The fragment layout read backwards: which lane, register and half hold A[r][c] and B[k][n].
// A: lane 4 (r % 8) + (c % 8) / 2, register a[(r >= 8) + 2 (c >= 8)], half c % 2;
// B: lane 4 n + (k % 8) / 2, register b[k >= 8] (slot 4 + that), half k % 2.
static inline float emu_mma_a(const uint32_t (*slot)[6], int r, int c) {
    return emu_bf16_half(slot[4 * (r % 8) + (c % 8) / 2][r / 8 + 2 * (c / 8)], c % 2);
}
static inline float emu_mma_b(const uint32_t (*slot)[6], int k, int n) {
    return emu_bf16_half(slot[4 * n + (k % 8) / 2][4 + k / 8], k % 2);
}
// mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32: d += A B for the warp's 16x16 A and 16x8
// B. Every lane leaves its a[4], b[2] in the slots; after the barrier it rebuilds the rows of A and
// columns of B its four outputs need. The products of two bf16 are exact in float32; the sum's
// order and rounding on a tensor core are unspecified, here it is d, then k = 0..15, in float32.
static inline void mma_bf16_16816(float* d, const uint32_t* a, const uint32_t* b) {
    int w = emu_warp(), lane = emu_lane(), parity = emu_warp_enter("mma_bf16_16816");
    uint32_t* mine = emu.mma_slot[w][parity][lane];
    for (int i = 0; i < 4; i++) mine[i] = a[i];
    mine[4] = b[0];
    mine[5] = b[1];
    emu_yield(EMU_WARP_WAIT);
    const uint32_t (*slot)[6] = emu.mma_slot[w][parity];
    int g = lane / 4, q = lane % 4;
    for (int i = 0; i < 4; i++) {  // d[i] = D[g + 8 (i / 2)][2q + i % 2]
        int r = g + 8 * (i / 2), n = 2 * q + i % 2;
        float acc = d[i];
        for (int k = 0; k < 16; k++) acc += emu_mma_a(slot, r, k) * emu_mma_b(slot, k, n);
        d[i] = acc;
    }
}

// Whether the running lane is the last of warp w to reach the warp instruction.
static inline bool emu_last_to_arrive(int w) {
    int waiting = 0;
    for (int l = 0; l < 32; l++) waiting += emu.threads[w * 32 + l].state == EMU_WARP_WAIT;
    return waiting == 31;
}
// ldmatrix.sync.aligned.m8n8.x4{.trans}.shared.b16 for the whole warp, from the row addresses in
// the slots (lanes 8i..8i+7: rows 0..7 of matrix i). Lane l receives in r[i] row l/4, columns
// 2(l%4) and 2(l%4)+1 of matrix i; with .trans, column l/4 of rows 2(l%4) (low half) and 2(l%4)+1.
static void emu_ldmatrix_warp(int w, int parity, bool trans) {
    const unsigned long long* rows = emu.warp_slot[w][parity];
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
            emu.ldmatrix_slot[w][parity][l][i] = v;
        }
}
// The last lane to arrive reads the memory for all: the instruction loads once for the warp, and a
// lane released early must not change (by a store to the tile) what the others receive.
static inline void emu_ldmatrix(uint32_t* r, const void* row, bool trans) {
    if ((uintptr_t)row % 16 != 0) emu_fatal("ldmatrix row address not 16-byte aligned");
    int w = emu_warp(), lane = emu_lane(), parity = emu_warp_enter(trans ? "ldmatrix_x4_trans" : "ldmatrix_x4");
    emu.warp_slot[w][parity][lane] = (uintptr_t)row;
    if (emu_last_to_arrive(w)) {
        emu_check_warp_op(w);  // before reading addresses that another instruction's lanes left
        emu_ldmatrix_warp(w, parity, trans);
    }
    emu_yield(EMU_WARP_WAIT);
    memcpy(r, emu.ldmatrix_slot[w][parity][lane], 4 * sizeof(uint32_t));
}
static inline void ldmatrix_x4(uint32_t* r, const void* row) { emu_ldmatrix(r, row, false); }
static inline void ldmatrix_x4_trans(uint32_t* r, const void* row) { emu_ldmatrix(r, row, true); }

// cp.async.cg.shared.global [smem], [gmem], 16, src_bytes: queued, performed by the wait that
// retires its group. The global memory is read then too, the latest moment a GPU may read it.
static inline void cp_async16(void* smem, const void* gmem, int src_bytes) {
    EmuThread* t = emu.cur;
    if ((uintptr_t)smem % 16 != 0 || (uintptr_t)gmem % 16 != 0) emu_fatal("cp.async address not 16-byte aligned");
    if (src_bytes != 0 && src_bytes != 16) emu_fatal("cp.async with src_bytes other than 0 or 16 is not emulated");
    if (t->ncopies == EMU_MAX_COPIES) emu_fatal("more cp.async copies in flight than the emulator holds (EMU_MAX_COPIES)");
    EmuCopy c = {smem, gmem, src_bytes == 0, t->groups_committed};
    t->copies[t->ncopies++] = c;
}
// cp.async.commit_group: the copies issued since the last commit form the next group.
static inline void cp_async_commit(void) { emu.cur->groups_committed++; }
// cp.async.wait_group N: every committed group but the N newest is complete. Copies not yet
// committed belong to no group, and no wait_group waits for them.
template <int N>
static inline void cp_async_wait(void) {
    static_assert(N >= 0, "cp.async.wait_group N needs N >= 0");
    EmuThread* t = emu.cur;
    int kept = 0;
    for (int i = 0; i < t->ncopies; i++) {  // in issue order, keeping the rest in order
        EmuCopy c = t->copies[i];
        if (c.group < t->groups_committed - N) {
            if (c.zero) memset(c.dst, 0, 16);
            else memcpy(c.dst, c.src, 16);
        } else {
            t->copies[kept++] = c;
        }
    }
    t->ncopies = kept;
}

static bool emu_reverse;  // CUDA_EMU_REVERSE=1

static void emu_run_block(void) {
    int n = emu.nthreads;
    for (int i = 0; i < n; i++) {
        EmuThread* t = &emu.threads[i];
        t->linear = i;
        t->tid = uint3(i % emu.block_dim.x, (i / emu.block_dim.x) % emu.block_dim.y,
                       i / (emu.block_dim.x * emu.block_dim.y));
        t->state = EMU_RUNNABLE;
        t->warp_op = "";
        t->ncopies = 0;
        t->groups_committed = 0;
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
                emu_check_warp_op(w);
                for (int l = 0; l < size; l++) emu.threads[w * 32 + l].state = EMU_RUNNABLE;
                emu.warp_gen[w]++;
                released = true;
            } else if (waiting > 0 && waiting + done == size) {
                emu.cur = &emu.threads[w * 32];
                emu_fatal("a warp instruction (shuffle, mma, ldmatrix) that some lanes of the warp never reach (they exited)");
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
    const char* devices = getenv("CUDA_EMU_DEVICES");
    *n = devices != NULL ? atoi(devices) : 1;
    return cudaSuccess;
}
static int emu_device = 0;
static cudaError_t cudaSetDevice(int d) {
    int n;
    cudaGetDeviceCount(&n);
    if (d < 0 || d >= n) return cudaErrorInvalidValue;
    emu_device = d;
    return cudaSuccess;
}
static cudaError_t cudaGetDevice(int* d) { *d = emu_device; return cudaSuccess; }
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

// ---------- NCCL, over MPI ----------
// Built with USE_MPI, train_gpu sums its gradients over the processes of a data-parallel run with
// NCCL (ncclAllReduce). The emulator has no GPUs to connect: its NCCL is the few calls train_gpu
// makes, done by MPI on the host memory that stands for device memory, with NCCL's checks of
// their arguments. It checks train_gpu's use of them, not NCCL.
#ifdef USE_MPI
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>
#include <unistd.h>
typedef enum { ncclSuccess = 0, ncclInvalidArgument = 4, ncclInvalidUsage = 5 } ncclResult_t;
typedef enum { ncclFloat = 7 } ncclDataType_t;
typedef enum { ncclSum = 0 } ncclRedOp_t;
typedef struct { char internal[128]; } ncclUniqueId;
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
    emu_nccl_comm* c = new emu_nccl_comm;
    MPI_Comm_dup(MPI_COMM_WORLD, &c->comm);
    c->rank = rank;
    c->size = nranks;
    c->id = id;
    *comm = c;
    return ncclSuccess;
}
static ncclResult_t ncclAllReduce(const void* send, void* recv, size_t count, ncclDataType_t type, ncclRedOp_t op,
                                  ncclComm_t comm, cudaStream_t stream) {
    if (comm == NULL || type != ncclFloat || op != ncclSum) return ncclInvalidArgument;
    const size_t chunk = (size_t)1 << 30;
    for (size_t i = 0; i < count; i += chunk) {
        int n = (int)(count - i < chunk ? count - i : chunk);
        float* out = (float*)recv + i;
        MPI_Allreduce(send == recv ? MPI_IN_PLACE : (const float*)send + i, out, n, MPI_FLOAT, MPI_SUM, comm->comm);
    }
    return ncclSuccess;
}
static ncclResult_t ncclCommDestroy(ncclComm_t comm) {
    if (comm == NULL) return ncclInvalidArgument;
    MPI_Comm_free(&comm->comm);
    delete comm;
    return ncclSuccess;
}
#endif

#endif // CUDA_EMU_H

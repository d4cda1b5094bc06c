// gpt2/gpu/hopper.cuh: Hopper's (sm_90) instructions for matrix products, each wrapped in one
// small function as matmul_bf16.cuh wraps mma.sync: wgmma (the warpgroup's tensor-core product,
// operands read from shared memory through descriptors, or A from registers), TMA (the tensor copy
// engine: a 2D tile from global to shared memory, swizzled, edges zero-filled) and mbarrier (the
// shared-memory barrier the copies complete on, in phases). The emulator (dev/emu/cuda_emu.h)
// defines the same functions from the PTX ISA; dev/gpu/instruction_check.cu checks each against a
// scalar definition.

#ifndef GPT2_GPU_HOPPER_CUH
#define GPT2_GPU_HOPPER_CUH

#include "cuda_utils.cuh"
#ifndef CUDA_EMU
#include <cuda.h>         // CUtensorMap and its enums (types only: the driver is reached at run time)
#include <cudaTypedefs.h> // PFN_cuTensorMapEncodeTiled
#endif

// ---------- swizzled shared memory ----------
//
// A 128-byte swizzle: in each 1024-byte block of shared memory, row r's 16-byte chunk c lies at
// chunk c ^ (r % 8), rows 128 bytes apart. TMA writes a tile so, and wgmma reads it so, both from
// the address's bits (bits 4-6 XOR bits 7-9); tiles start 1024-byte aligned.
enum { WGMMA_SWIZZLE_128B = 1, WGMMA_SWIZZLE_64B = 2, WGMMA_SWIZZLE_32B = 3 };  // descriptor's layout codes

// A wgmma operand's matrix descriptor (PTX ISA, "Matrix Descriptor Format"): the start address,
// the leading and stride byte offsets, all in 16-byte units, and the swizzle.
//   K-major (rows of k):  sbo = bytes from one 8-row group to the next; lbo unused (1)
//   MN-major (rows of m): lbo = bytes from one 64-wide column strip to the next; sbo = from
//                         one group of 8 k rows to the next
__device__ __forceinline__ uint64_t wgmma_descriptor(uint32_t addr, uint32_t lbo, uint32_t sbo, int swizzle) {
    return (uint64_t)((addr & 0x3ffff) >> 4) | (uint64_t)((lbo & 0x3ffff) >> 4) << 16 |
           (uint64_t)((sbo & 0x3ffff) >> 4) << 32 | (uint64_t)swizzle << 62;
}

// ---------- the instructions ----------
#ifndef CUDA_EMU
// mbarrier and TMA from sm_90 on; wgmma and setmaxnreg only in an sm_90a build. Elsewhere they
// trap: the launchers pick these kernels only where they were built (matmul_wgmma.cuh).
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
#define ASYNC_PTX(...) __trap()
#else
#define ASYNC_PTX(...) asm volatile(__VA_ARGS__)
#endif
#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define WGMMA_PTX(...) __trap()
#else
#define WGMMA_PTX(...) asm volatile(__VA_ARGS__)
#endif

// An mbarrier: 8 bytes of shared memory. A phase completes when `count` arrivals have come and
// the bytes its copies announced (expect_tx) have landed; then the next begins. Waiters test the
// phase by its parity: 0, 1, 0, ...
__device__ __forceinline__ void mbarrier_init(uint64_t* bar, uint32_t count) {
    ASYNC_PTX("mbarrier.init.shared::cta.b64 [%0], %1;\n" :: "r"(smem_address(bar)), "r"(count) : "memory");
}
// After the inits, before the barrier that publishes them: the copy engine sees them too.
__device__ __forceinline__ void mbarrier_init_fence(void) {
    ASYNC_PTX("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}
__device__ __forceinline__ void mbarrier_arrive(uint64_t* bar) {
    ASYNC_PTX("mbarrier.arrive.shared::cta.b64 _, [%0];\n" :: "r"(smem_address(bar)) : "memory");
}
// Arrives, and announces `bytes` that copies will bring in this phase.
__device__ __forceinline__ void mbarrier_arrive_expect_tx(uint64_t* bar, uint32_t bytes) {
    ASYNC_PTX("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" :: "r"(smem_address(bar)), "r"(bytes)
              : "memory");
}
// Whether the phase of this parity has completed (waits a while in hardware before saying no).
__device__ __forceinline__ bool mbarrier_try_wait(uint64_t* bar, uint32_t parity) {
    uint32_t done = 0;
    ASYNC_PTX("{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}\n"
              : "=r"(done) : "r"(smem_address(bar)), "r"(parity) : "memory");
    return done != 0;
}

// Orders this thread's ordinary shared-memory stores before later reads by the async proxy
// (wgmma, TMA): needed before a barrier after which those read what the stores wrote.
__device__ __forceinline__ void fence_proxy_async(void) { ASYNC_PTX("fence.proxy.async.shared::cta;\n" ::: "memory"); }

// TMA: the box of the tensor map at (x, y) (x the column: elements along a row) into shared
// memory at dst (aligned as the map's swizzle needs: 1024 bytes for 128B); elements outside the
// tensor are zeros. Its bytes count towards bar's current phase.
__device__ __forceinline__ void tma_load_2d(void* dst, const CUtensorMap* map, int x, int y, uint64_t* bar) {
    ASYNC_PTX("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n"
              :: "r"(smem_address(dst)), "l"(map), "r"(x), "r"(y), "r"(smem_address(bar)) : "memory");
}

// wgmma: the 4 warps of a warpgroup (warps 4i..4i+3) issue it together. fence before the first
// wgmma that reads or writes accumulators touched since; commit closes a group of wgmmas issued
// since the last; wait<N> returns when at most N groups are in flight: their shared memory may be
// overwritten, their accumulators read.
__device__ __forceinline__ void wgmma_fence(void) { WGMMA_PTX("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit(void) { WGMMA_PTX("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wgmma_wait(void) {
    WGMMA_PTX("wgmma.wait_group.sync.aligned %0;\n" :: "n"(N) : "memory");
}
// Keeps the compiler from moving reads or writes of the accumulators across this point (the
// instructions write them later than the compiler thinks): after the fence, after the wait.
template <int REGS>
__device__ __forceinline__ void wgmma_hold(float* d) {
#pragma unroll
    for (int i = 0; i < REGS; i++) asm volatile("" : "+f"(d[i])::"memory");
}
// The same for A fragments in registers (wgmma_bf16_rs), which the wgmma reads until its wait.
template <int REGS>
__device__ __forceinline__ void wgmma_hold(uint32_t* a) {
#pragma unroll
    for (int i = 0; i < REGS; i++) asm volatile("" : "+r"(a[i])::"memory");
}

#define WGMMA_D8(i) "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), "+f"(d[i + 5]), \
                    "+f"(d[i + 6]), "+f"(d[i + 7])
#define WGMMA_D32(i) WGMMA_D8(i), WGMMA_D8(i + 8), WGMMA_D8(i + 16), WGMMA_D8(i + 24)
#define WGMMA_REGS32 "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, " \
                     "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
#define WGMMA_REGS64 WGMMA_REGS32 ", %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, " \
                     "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
#define WGMMA_REGS128 WGMMA_REGS64 ", %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, " \
                      "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, "              \
                      "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, "   \
                      "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127"
// D (64 x N, float32) = A (64 x 16) B (16 x N) + (scale_d ? D : 0), bf16 A and B in shared memory.
// TRANS_A 0: A is K-major (rows of k), 1: M-major; TRANS_B 0: B is K-major (B^T's rows), 1:
// N-major. Warp w of the warpgroup holds D's rows 16w..16w+15; lane 4g + q holds, for each 8
// columns j, d[4j .. 4j+3] = D[g][8j+2q, +1], D[g+8][8j+2q, +1] (as mma.sync's m16n8 tile).
template <int N, int TRANS_A, int TRANS_B>
__device__ __forceinline__ void wgmma_bf16(float* d, uint64_t desc_a, uint64_t desc_b, int scale_d) {
    static_assert(N == 64 || N == 128 || N == 256, "wgmma_bf16: N is 64, 128 or 256");
    if constexpr (N == 64) {
        WGMMA_PTX("{\n .reg .pred p;\n setp.ne.b32 p, %34, 0;\n"
                  " wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {" WGMMA_REGS32 "}, %32, %33, p, 1, 1, %35, %36;\n}\n"
                  : WGMMA_D32(0)
                  : "l"(desc_a), "l"(desc_b), "r"(scale_d), "n"(TRANS_A), "n"(TRANS_B));
    } else if constexpr (N == 128) {
        WGMMA_PTX("{\n .reg .pred p;\n setp.ne.b32 p, %66, 0;\n"
                  " wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {" WGMMA_REGS64 "}, %64, %65, p, 1, 1, %67, %68;\n}\n"
                  : WGMMA_D32(0), WGMMA_D32(32)
                  : "l"(desc_a), "l"(desc_b), "r"(scale_d), "n"(TRANS_A), "n"(TRANS_B));
    } else {
        WGMMA_PTX("{\n .reg .pred p;\n setp.ne.b32 p, %130, 0;\n"
                  " wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {" WGMMA_REGS128 "}, %128, %129, p, 1, 1, %131, %132;\n}\n"
                  : WGMMA_D32(0), WGMMA_D32(32), WGMMA_D32(64), WGMMA_D32(96)
                  : "l"(desc_a), "l"(desc_b), "r"(scale_d), "n"(TRANS_A), "n"(TRANS_B));
    }
}

// The same product with A from registers (the "RS" form), B by descriptor. Warp w holds A's rows
// 16w..16w+15 as mma.sync m16n8k16 holds its A: lane 4g + q has a[0] = A[g][2q, +1], a[1] =
// A[g+8][2q, +1], a[2] = A[g][2q+8, +1], a[3] = A[g+8][2q+8, +1], the lower column in the low
// half. So the accumulators of a product, packed in pairs (d[2i], d[2i+1]) into a[i % 4] of k step
// i / 4, are the A of the next: P = softmax(S) goes on without leaving registers.
template <int N, int TRANS_B>
__device__ __forceinline__ void wgmma_bf16_rs(float* d, const uint32_t* a, uint64_t desc_b, int scale_d) {
    static_assert(N == 64 || N == 128, "wgmma_bf16_rs: N is 64 or 128");
    if constexpr (N == 64) {
        WGMMA_PTX("{\n .reg .pred p;\n setp.ne.b32 p, %37, 0;\n"
                  " wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {" WGMMA_REGS32 "}, {%32, %33, %34, %35}, %36, p, 1, 1, %38;\n}\n"
                  : WGMMA_D32(0)
                  : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(scale_d), "n"(TRANS_B));
    } else {
        WGMMA_PTX("{\n .reg .pred p;\n setp.ne.b32 p, %69, 0;\n"
                  " wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {" WGMMA_REGS64 "}, {%64, %65, %66, %67}, %68, p, 1, 1, %70;\n}\n"
                  : WGMMA_D32(0), WGMMA_D32(32)
                  : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(scale_d), "n"(TRANS_B));
    }
}

// setmaxnreg: a warpgroup gives registers back (dec) or takes them (inc), so that the copy
// warpgroup runs on few and the math warpgroups on many. REGS: a multiple of 8, 24 to 256.
template <int REGS>
__device__ __forceinline__ void setmaxnreg_dec(void) { WGMMA_PTX("setmaxnreg.dec.sync.aligned.u32 %0;\n" :: "n"(REGS)); }
template <int REGS>
__device__ __forceinline__ void setmaxnreg_inc(void) { WGMMA_PTX("setmaxnreg.inc.sync.aligned.u32 %0;\n" :: "n"(REGS)); }
#endif // CUDA_EMU

// Waits for the phase of this parity (a thread spins on try_wait; the emulator lets others run).
__device__ __forceinline__ void mbarrier_wait(uint64_t* bar, uint32_t parity) {
    while (!mbarrier_try_wait(bar, parity)) {
    }
}

// ---------- tensor maps (host) ----------
//
// The driver's cuTensorMapEncodeTiled, looked up through the runtime at first use, so that the
// programs need not link the driver library.
static PFN_cuTensorMapEncodeTiled_v12000 tensor_map_encode(void) {
    static PFN_cuTensorMapEncodeTiled_v12000 encode = NULL;
    if (encode != NULL) return encode;
    void* fn = NULL;
    cudaDriverEntryPointQueryResult found;
#if CUDART_VERSION >= 12050
    cudaError_t err = cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &found);
#else
    cudaError_t err = cudaGetDriverEntryPoint("cuTensorMapEncodeTiled", &fn, cudaEnableDefault, &found);
#endif
    if (err != cudaSuccess || found != cudaDriverEntryPointSuccess || fn == NULL)
        fail("the CUDA driver has no cuTensorMapEncodeTiled (TMA needs a CUDA 12 driver)");
    encode = (PFN_cuTensorMapEncodeTiled_v12000)fn;
    return encode;
}

// A map of the bf16 matrix at base, rows x cols with rows ld elements apart, read in boxes of
// box_rows x box_cols (box_cols * 2 <= 128 bytes), 128-byte swizzled, zeros past the edges. False
// when TMA cannot describe the matrix: base not 16-byte aligned, ld * 2 not a multiple of 16.
static bool tensor_map_bf16(CUtensorMap* map, const bf16* base, int rows, int cols, long long ld, int box_rows,
                            int box_cols) {
    if (!aligned16(base) || (ld * 2) % 16 != 0 || rows <= 0 || cols <= 0 || ld < cols) return false;
    cuuint64_t dims[2] = {(cuuint64_t)cols, (cuuint64_t)rows};
    cuuint64_t strides[1] = {(cuuint64_t)ld * 2};  // bytes from row to row (the first dimension's is the element)
    cuuint32_t box[2] = {(cuuint32_t)box_cols, (cuuint32_t)box_rows};
    cuuint32_t element_strides[2] = {1, 1};
    CUresult r = tensor_map_encode()(map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, (void*)base, dims, strides, box,
                                     element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                                     CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    return r == CUDA_SUCCESS;
}

#endif // GPT2_GPU_HOPPER_CUH

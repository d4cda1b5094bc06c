// dev/emu/race_check.cu: the emulator's race detector (dev/emu/cuda_emu.h, built with
// -DCUDA_EMU_RACE) against kernels with a known shared-memory race each, and one without. Each racy
// kernel marks its two racing lines with a comment "race: NAME"; test/test_gpu_emu.sh runs
// every kernel and requires the clean one to pass (in every schedule) and each racy one to stop
// with a report naming the kernel and exactly those two lines. Two more faults ride along: an
// index one past a __shared__ array's end (reported by the race detector's build and by
// AddressSanitizer's, through the arena's gap after each array), and a read of shared memory that
// the block never wrote, which holds what an earlier block left (reported by the race detector).
//
// Then Hopper's asynchronous copies and products (gpt2/gpu/hopper.cuh): a TMA and wgmma pipeline
// without a fault (clean_tma), a product of tiles staged by ordinary stores (clean_stores), and
// each with one fault: a read before the copy's mbarrier phase, a wait on the wrong parity, a
// write to a tile a wgmma still reads, a wgmma_wait one too shallow, a stage released just before
// the wgmma_wait that retires its reads (reported where the producer runs first: `reverse`),
// stores read by wgmma with no fence.proxy.async, and a descriptor whose swizzle is not the tensor map's (a wrong result: the
// bytes are read in the wrong places, which no detector sees, but the product does).
//
//   build/emu/race_check NAME     NAME: one of `names` below
//
// The first kernels run blocks of 64 threads, two warps, on 1024 floats; the Hopper ones a
// 64 x 64 product over k = 256. Exit 0 when it ran and its result is right, 1 when the result is
// wrong (a race the schedule happened to expose).

#include "../../gpt2/gpu/matmul_bf16.cuh"  // cp_async16, cp_async_commit, cp_async_wait; cuda_check
#include "../../gpt2/gpu/hopper.cuh"       // mbarrier, TMA, wgmma

enum { THREADS = 64, TILE = 4 * THREADS, TILES = 4 };  // a tile: 16 bytes (4 floats) per thread
enum { CLEAN, MISSING_BARRIER, REUSE_BEFORE_BARRIER, REFILL_BEFORE_BARRIER, READ_BEFORE_WAIT, PAST_THE_END, UNWRITTEN,
       CLEAN_TMA, TMA_READ_BEFORE_WAIT, WRONG_PARITY, WGMMA_WRITE_BEFORE_WAIT, SHALLOW_WAIT, RELEASE_BEFORE_WAIT,
       SWIZZLE_MISMATCH, CLEAN_STORES, MISSING_PROXY_FENCE, KERNELS };
static const char* const names[KERNELS] = {"clean", "missing_barrier", "reuse_before_barrier", "refill_before_barrier",
                                           "read_before_wait", "past_the_end", "unwritten", "clean_tma",
                                           "tma_read_before_wait", "wrong_parity", "wgmma_write_before_wait",
                                           "shallow_wait", "release_before_wait", "swizzle_mismatch", "clean_stores",
                                           "missing_proxy_fence"};

// The element of a tile that thread tid sums in the pipelines: in the other warp's half.
__host__ __device__ int other_element(int tid) { return (4 * tid + TILE / 2 + 1) % TILE; }

// The right kernel: a two-stage cp.async pipeline over 4 tiles, each thread summing a value that
// another warp's copy brought in. The refill of a buffer waits for the barrier after its last read.
__global__ void clean_kernel(float* out, const float* in) {
    __shared__ __align__(16) float tile[2][TILE];
    int tid = threadIdx.x, other = other_element(tid);
    cp_async16(&tile[0][4 * tid], in + 4 * tid, 16);
    cp_async_commit();
    float sum = 0.0f;
    for (int t = 0; t < TILES; t++) {
        if (t + 1 < TILES) cp_async16(&tile[(t + 1) % 2][4 * tid], in + (t + 1) * TILE + 4 * tid, 16);
        cp_async_commit();
        cp_async_wait<1>();  // tile t has landed (the newest group, t + 1, may be in flight)
        __syncthreads();     // ... for every thread's copy
        sum += tile[t % 2][other];
        __syncthreads();     // every warp is done with buffer t % 2 before iteration t + 1 refills it
    }
    cp_async_wait<0>();
    out[tid] = sum;
}

// Warp 1 reads what warp 0 writes, with no barrier between.
__global__ void missing_barrier_kernel(float* out, const float* in) {
    __shared__ float buf[THREADS];
    int tid = threadIdx.x;
    buf[tid] = in[tid];                   // race: missing_barrier
    out[tid] = buf[THREADS - 1 - tid];    // race: missing_barrier
}

// A buffer overwritten while another warp may still read it: the write needs a barrier before it.
__global__ void reuse_before_barrier_kernel(float* out, const float* in) {
    __shared__ float buf[THREADS];
    int tid = threadIdx.x;
    buf[tid] = in[tid];
    __syncthreads();
    float x = buf[THREADS - 1 - tid];     // race: reuse_before_barrier
    buf[tid] = 2.0f * x;                  // race: reuse_before_barrier
    __syncthreads();
    out[tid] = buf[THREADS - 1 - tid];
}

// clean_kernel without the barrier after the read: iteration t + 1 refills buffer t % 2 while
// the other warp may still be reading it in iteration t.
// (clean_kernel's lines again, on purpose: a planted race stands in a kernel of its own.)
__global__ void refill_before_barrier_kernel(float* out, const float* in) {
    __shared__ __align__(16) float tile[2][TILE];
    int tid = threadIdx.x, other = other_element(tid);
    cp_async16(&tile[0][4 * tid], in + 4 * tid, 16);
    cp_async_commit();
    float sum = 0.0f;
    for (int t = 0; t < TILES; t++) {
        if (t + 1 < TILES) cp_async16(&tile[(t + 1) % 2][4 * tid], in + (t + 1) * TILE + 4 * tid, 16);  // race: refill_before_barrier
        cp_async_commit();
        cp_async_wait<1>();
        __syncthreads();
        sum += tile[t % 2][other];        // race: refill_before_barrier
    }
    cp_async_wait<0>();
    out[tid] = sum;
}

// A thread reads its own copy's destination before waiting for the copy.
__global__ void read_before_wait_kernel(float* out, const float* in) {
    __shared__ __align__(16) float tile[TILE];
    int tid = threadIdx.x;
    cp_async16(&tile[4 * tid], in + 4 * tid, 16);  // race: read_before_wait
    cp_async_commit();
    float x = tile[4 * tid];                        // race: read_before_wait
    cp_async_wait<0>();
    __syncthreads();
    out[tid] = x + tile[4 * tid + 1];
}

// One element past the end of a shared array.
__global__ void past_the_end_kernel(float* out, const float* in) {
    __shared__ float buf[THREADS];
    int tid = threadIdx.x;
    buf[tid + 1] = in[tid];               // past_the_end: thread 63 writes buf[64]
    __syncthreads();
    out[tid] = buf[tid];
}

// Block 1 reads buf[0], which only block 0 wrote: on a GPU another block's shared memory, or
// whatever was left there; here the value block 0 left, the right one by luck.
__global__ void unwritten_kernel(float* out, const float* in) {
    __shared__ float buf[THREADS];
    int tid = threadIdx.x;
    if (blockIdx.x == 0 || tid > 0) buf[tid] = in[tid];
    __syncthreads();
    if (blockIdx.x == 1) out[tid] = buf[tid];  // unwritten: thread 0 of block 1
}

// ---------- Hopper: TMA, mbarrier, wgmma ----------
// D (64 x 64, float32) = A (64 x 256) B^T, A and B bf16 rows of k. Tiles of 64 x 64 (8 KiB, 128-byte
// swizzled), two stages: a producer thread copies by TMA, a consumer warpgroup multiplies.
enum { HK = 256, HTILE = 64 * 64 * 2, HSTAGE = 2 * HTILE, HTHREADS = 256 };

__device__ uint64_t tile_descriptor(const unsigned char* tile, int kk, int swizzle) {
    return wgmma_descriptor(smem_address(tile) + 32 * kk, 16, 1024, swizzle);
}
// D's fragments out, by wgmma's register layout (hopper.cuh).
__device__ void store_d(float* out, const float* d, int tid) {
    int row = 16 * (tid / 32) + tid % 32 / 4, col = 2 * (tid % 4);
    for (int j = 0; j < 8; j++)
        for (int i = 0; i < 4; i++) out[(row + 8 * (i / 2)) * 64 + 8 * j + col + i % 2] = d[4 * j + i];
}

// The pipeline: thread 128 copies k tile kt into stage kt % 2 once the consumers released the
// tile before it there; the consumers wait for its phase, multiply, and release a stage when the
// wgmmas that read it have retired (wgmma_wait<1>: all but the newest group), a lane of each warp,
// since a warp's wait retires its own wgmmas, not the other warps'. (The planted read
// before the wait is of tile 1: issued with tile 0, so in flight in every schedule.)
template <int FAULT>
__global__ void __launch_bounds__(HTHREADS) tma_kernel(const __grid_constant__ CUtensorMap map_a,
                                                       const __grid_constant__ CUtensorMap map_b, float* out) {
    extern __shared__ __align__(1024) unsigned char stages[];
    __shared__ uint64_t full[2], empty[2];
    int tid = threadIdx.x;
    if (tid == 0) {
        for (int s = 0; s < 2; s++) {
            mbarrier_init(&full[s], 1);
            mbarrier_init(&empty[s], 4);  // one arrival per consumer warp
        }
        mbarrier_init_fence();
    }
    __syncthreads();
    if (tid >= 128) {
        for (int kt = 0; tid == 128 && kt < HK / 64; kt++) {
            unsigned char* stage = stages + kt % 2 * HSTAGE;
            if (kt >= 2) mbarrier_wait(&empty[kt % 2], (kt / 2 - 1) % 2);
            mbarrier_arrive_expect_tx(&full[kt % 2], HSTAGE);
            tma_load_2d(stage, &map_a, kt * 64, 0, &full[kt % 2]);  // race: tma_read_before_wait wrong_parity shallow_wait release_before_wait
            tma_load_2d(stage + HTILE, &map_b, kt * 64, 0, &full[kt % 2]);
        }
        return;
    }
    float d[32];
    for (int kt = 0; kt < HK / 64; kt++) {
        unsigned char* stage = stages + kt % 2 * HSTAGE;
        if (FAULT == TMA_READ_BEFORE_WAIT && kt == 1) d[0] = stage[8 * tid];  // race: tma_read_before_wait
        mbarrier_wait(&full[kt % 2], (kt / 2) % 2 ^ (FAULT == WRONG_PARITY));
        int swizzle = FAULT == SWIZZLE_MISMATCH ? WGMMA_SWIZZLE_64B : WGMMA_SWIZZLE_128B;
        wgmma_fence();
        for (int kk = 0; kk < 4; kk++)
            wgmma_bf16<64, 0, 0>(d, tile_descriptor(stage, kk, swizzle), tile_descriptor(stage + HTILE, kk, swizzle),  // race: wrong_parity wgmma_write_before_wait shallow_wait release_before_wait
                                 kt > 0 || kk > 0);
        wgmma_commit();
        if (FAULT == WGMMA_WRITE_BEFORE_WAIT && kt == 1) stage[8 * tid] = 0;  // race: wgmma_write_before_wait
        bool release = kt > 0 && tid % 32 == 0;
        if (FAULT == RELEASE_BEFORE_WAIT && release) mbarrier_arrive(&empty[(kt - 1) % 2]);  // freed, still read
        if (FAULT == SHALLOW_WAIT) wgmma_wait<2>();
        else wgmma_wait<1>();
        if (FAULT != RELEASE_BEFORE_WAIT && release) mbarrier_arrive(&empty[(kt - 1) % 2]);
    }
    wgmma_wait<0>();
    store_d(out, d, tid);
}

// One k tile of A and B staged by ordinary 16-byte stores at their swizzled places, then one
// product: the stores need fence.proxy.async before the barrier, since wgmma reads through
// the async proxy.
template <int FAULT>
__global__ void __launch_bounds__(128) stores_kernel(const bf16* a, const bf16* b, float* out) {
    __shared__ __align__(1024) unsigned char tiles[2 * HTILE];
    int tid = threadIdx.x;
    for (int c = tid; c < 2 * 64 * 8; c += 128) {  // chunk c: 8 bf16 of tile c / 512, row c / 8 % 64
        int t = c / 512, r = c / 8 % 64, e = c % 8;
        const bf16* src = (t == 0 ? a : b) + r * HK + 8 * e;
        *reinterpret_cast<uint4*>(tiles + t * HTILE + r * 128 + 16 * (e ^ r % 8)) = *reinterpret_cast<const uint4*>(src);  // race: missing_proxy_fence
    }
    if (FAULT != MISSING_PROXY_FENCE) fence_proxy_async();
    __syncthreads();
    float d[32];
    wgmma_fence();
    for (int kk = 0; kk < 4; kk++)
        wgmma_bf16<64, 0, 0>(d, tile_descriptor(tiles, kk, WGMMA_SWIZZLE_128B),  // race: missing_proxy_fence
                             tile_descriptor(tiles + HTILE, kk, WGMMA_SWIZZLE_128B), kk > 0);
    wgmma_commit();
    wgmma_wait<0>();
    store_d(out, d, tid);
}

// Runs Hopper kernel `which` on A, B (64 x HK bf16 each): 0 when D is right.
static int run_hopper(int which) {
    bf16 h_a[64 * HK], h_b[64 * HK];
    float h_d[64 * 64];
    for (int i = 0; i < 64 * HK; i++) {  // small integers: every sum is exact in float32
        h_a[i] = __float2bfloat16((float)((i * 7 + i / HK) % 13) - 6.0f);
        h_b[i] = __float2bfloat16((float)((i * 5 + 3 * (i / HK)) % 11) - 5.0f);
    }
    bf16 *a, *b;
    float* d;
    cuda_check(cudaMalloc(&a, sizeof(h_a)));
    cuda_check(cudaMalloc(&b, sizeof(h_b)));
    cuda_check(cudaMalloc(&d, sizeof(h_d)));
    cuda_check(cudaMemcpy(a, h_a, sizeof(h_a), cudaMemcpyHostToDevice));
    cuda_check(cudaMemcpy(b, h_b, sizeof(h_b), cudaMemcpyHostToDevice));
    CUtensorMap map_a, map_b;
    if (!tensor_map_bf16(&map_a, a, 64, HK, HK, 64, 64) || !tensor_map_bf16(&map_b, b, 64, HK, HK, 64, 64))
        fail("race_check: no tensor map for a 64 x %d bf16 matrix", HK);
    int smem = 2 * HSTAGE;
    switch (which) {
#define TMA_CASE(F)                                                                                \
    case F:                                                                                        \
        cuda_check(cudaFuncSetAttribute(tma_kernel<F>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem)); \
        tma_kernel<F><<<1, HTHREADS, smem>>>(map_a, map_b, d);                                     \
        launch_check(tma_kernel);                                                                  \
        break;
    TMA_CASE(CLEAN_TMA)
    TMA_CASE(TMA_READ_BEFORE_WAIT)
    TMA_CASE(WRONG_PARITY)
    TMA_CASE(WGMMA_WRITE_BEFORE_WAIT)
    TMA_CASE(SHALLOW_WAIT)
    TMA_CASE(RELEASE_BEFORE_WAIT)
    TMA_CASE(SWIZZLE_MISMATCH)
    case CLEAN_STORES: stores_kernel<CLEAN_STORES><<<1, 128>>>(a, b, d); launch_check(stores_kernel); break;
    case MISSING_PROXY_FENCE: stores_kernel<MISSING_PROXY_FENCE><<<1, 128>>>(a, b, d); launch_check(stores_kernel); break;
    }
    cuda_check(cudaMemcpy(h_d, d, sizeof(h_d), cudaMemcpyDeviceToHost));
    int bad = 0, k_end = which >= CLEAN_STORES ? 64 : HK;  // the stores kernel multiplies the first k tile
    for (int m = 0; m < 64; m++)
        for (int n = 0; n < 64; n++) {
            float sum = 0.0f;
            for (int k = 0; k < k_end; k++) sum += __bfloat162float(h_a[m * HK + k]) * __bfloat162float(h_b[n * HK + k]);
            bad += h_d[m * 64 + n] != sum;
        }
    cuda_check(cudaFree(a));
    cuda_check(cudaFree(b));
    cuda_check(cudaFree(d));
    return bad;
}

// What thread tid's output is when no race spoils it.
static float expected(int which, int tid, const float* in) {
    switch (which) {
    case CLEAN:
    case REFILL_BEFORE_BARRIER: {
        float sum = 0.0f;
        for (int t = 0; t < TILES; t++) sum += in[t * TILE + other_element(tid)];
        return sum;
    }
    case MISSING_BARRIER: return in[THREADS - 1 - tid];
    case REUSE_BEFORE_BARRIER: return 2.0f * in[tid];
    case READ_BEFORE_WAIT: return in[4 * tid] + in[4 * tid + 1];
    case PAST_THE_END: return tid == 0 ? NAN : in[tid - 1];  // buf[0] is never written
    default: return in[tid];  // UNWRITTEN
    }
}

int main(int argc, char** argv) {
    int which = -1;
    for (int i = 0; i < KERNELS && argc == 2; i++)
        if (strcmp(argv[1], names[i]) == 0) which = i;
    if (which < 0) {
        fprintf(stderr, "usage: race_check NAME, NAME one of:");
        for (int i = 0; i < KERNELS; i++) fprintf(stderr, " %s", names[i]);
        fprintf(stderr, "\n");
        return 2;
    }
    cuda_device_init();
    if (which >= CLEAN_TMA) {
        int bad = run_hopper(which);
        printf("race_check %s: %s\n", names[which], bad ? "wrong result" : "right result");
        return bad ? 1 : 0;
    }
    float h_in[TILES * TILE], h_out[THREADS];
    for (int i = 0; i < TILES * TILE; i++) h_in[i] = (float)(i % 97) - 40.0f;
    float *in, *out;
    cuda_check(cudaMalloc(&in, sizeof(h_in)));
    cuda_check(cudaMalloc(&out, sizeof(h_out)));
    cuda_check(cudaMemcpy(in, h_in, sizeof(h_in), cudaMemcpyHostToDevice));
    switch (which) {
    case CLEAN: clean_kernel<<<1, THREADS>>>(out, in); launch_check(clean_kernel); break;
    case MISSING_BARRIER: missing_barrier_kernel<<<1, THREADS>>>(out, in); launch_check(missing_barrier_kernel); break;
    case REUSE_BEFORE_BARRIER: reuse_before_barrier_kernel<<<1, THREADS>>>(out, in); launch_check(reuse_before_barrier_kernel); break;
    case REFILL_BEFORE_BARRIER: refill_before_barrier_kernel<<<1, THREADS>>>(out, in); launch_check(refill_before_barrier_kernel); break;
    case READ_BEFORE_WAIT: read_before_wait_kernel<<<1, THREADS>>>(out, in); launch_check(read_before_wait_kernel); break;
    case PAST_THE_END: past_the_end_kernel<<<1, THREADS>>>(out, in); launch_check(past_the_end_kernel); break;
    case UNWRITTEN: unwritten_kernel<<<2, THREADS>>>(out, in); launch_check(unwritten_kernel); break;
    }
    cuda_check(cudaMemcpy(h_out, out, sizeof(h_out), cudaMemcpyDeviceToHost));
    int bad = 0;
    for (int tid = which == PAST_THE_END; tid < THREADS; tid++) bad += h_out[tid] != expected(which, tid, h_in);
    printf("race_check %s: %s\n", names[which], bad ? "wrong result" : "right result");
    cuda_check(cudaFree(in));
    cuda_check(cudaFree(out));
    return bad ? 1 : 0;
}

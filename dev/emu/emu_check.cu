// dev/emu/emu_check.cu: the emulator's own checks (dev/emu/cuda_emu.h). Kernels that break a
// rule of CUDA, one each, which it must stop at with a message: lanes of a warp at different warp
// instructions, a warp instruction in a partial warp or one that some lanes never reach, a
// __syncthreads that some threads never reach, threads waiting at different barriers, cp.async
// and ldmatrix addresses that are not 16-byte aligned or not in shared memory, copies never
// waited for, launches over the limits (dynamic shared memory too), mbarrier waits that nothing
// will complete, a wgmma's A fragments changed in registers before the wait that retires it; and, in the AddressSanitizer and UBSan build, a misaligned
// float4 and a write past the end of device memory. A real GPU hangs, faults or gives garbage on
// most of these. And one that must run right: `workers`, thousands of launches of a few blocks
// each, every launch reading what the one before wrote and each block staging its part in shared
// memory, against the same steps on the host: a launch that begins before the last one's blocks
// are done, or two blocks that share a worker's shared memory at once, would give other numbers.
// test/test_gpu_emu.sh runs each.
//
//   build/emu/emu_check NAME     (no NAME: the list)

#include "../../gpt2/gpu/matmul_bf16.cuh"  // cp_async16, cp_async_commit, cp_async_wait, ldmatrix_x4; cuda_check
#include "../../gpt2/gpu/hopper.cuh"       // mbarrier, wgmma

// Lanes 0-15 shuffle while lanes 16-31 load a matrix: the warp has diverged.
__global__ void divergent_warp_kernel(float* out) {
    __shared__ __align__(16) float tile[32 * 4];
    int lane = threadIdx.x;
    for (int i = 0; i < 4; i++) tile[4 * lane + i] = (float)lane;
    __syncwarp();
    float v = 0.0f;
    if (lane < 16) {
        v = __shfl_xor_sync(0xffffffffu, (float)lane, 1);
    } else {
        uint32_t r[4];
        ldmatrix_x4(r, &tile[4 * (lane % 8)]);
        v = (float)r[0];
    }
    out[lane] = v;
}

// A block of 48 threads: its second warp has 16 lanes, and shuffles.
__global__ void partial_warp_kernel(float* out) {
    int tid = threadIdx.x;
    out[tid] = __shfl_xor_sync(0xffffffffu, (float)tid, 1);
}

// Lanes 16-31 leave; lanes 0-15 shuffle with them.
__global__ void exited_lanes_kernel(float* out) {
    int lane = threadIdx.x;
    if (lane >= 16) return;
    out[lane] = __shfl_xor_sync(0xffffffffu, (float)lane, 1);
}

// Warp 1 leaves; warp 0 waits at a __syncthreads for it.
__global__ void exited_threads_kernel(float* out) {
    int tid = threadIdx.x;
    if (tid >= 32) return;
    __syncthreads();
    out[tid] = 1.0f;
}

// Warp 0 waits at a __syncthreads; half of warp 1 at a shuffle, the other half at the __syncthreads.
__global__ void divergent_barriers_kernel(float* out) {
    int tid = threadIdx.x;
    float v = 1.0f;
    if (tid >= 32 && tid < 48) v = __shfl_xor_sync(0xffffffffu, v, 1);
    else __syncthreads();
    out[tid] = v;
}

// A copy into shared memory 4 bytes past a 16-byte boundary.
__global__ void cp_async_misaligned_kernel(float* out, const float* in) {
    __shared__ __align__(16) float tile[32 * 4 + 4];
    int lane = threadIdx.x;
    cp_async16(&tile[4 * lane + 1], in + 4 * lane, 16);
    cp_async_commit();
    cp_async_wait<0>();
    out[lane] = tile[4 * lane + 1];
}

// A copy whose destination is device memory, not shared memory.
__global__ void cp_async_not_shared_kernel(float* out, const float* in) {
    int lane = threadIdx.x;
    cp_async16(out + 4 * lane, in + 4 * lane, 16);
    cp_async_commit();
    cp_async_wait<0>();
}

// Copies issued and committed, never waited for: they may land in the next block's shared memory.
__global__ void cp_async_unwaited_kernel(float* out, const float* in) {
    __shared__ __align__(16) float tile[32 * 4];
    int lane = threadIdx.x;
    cp_async16(&tile[4 * lane], in + 4 * lane, 16);
    cp_async_commit();
    out[lane] = 1.0f;
}

// ldmatrix with row addresses 4 bytes past a 16-byte boundary.
__global__ void ldmatrix_misaligned_kernel(float* out) {
    __shared__ __align__(16) float tile[8 * 4 + 4];
    int lane = threadIdx.x;
    if (lane < 8)
        for (int i = 0; i < 4; i++) tile[4 * lane + i + 1] = (float)lane;
    __syncwarp();
    uint32_t r[4];
    ldmatrix_x4(r, &tile[4 * (lane % 8) + 1]);
    out[lane] = (float)r[0];
}

// A kernel launched with more threads a block, or more blocks along y, than CUDA allows.
__global__ void over_limits_kernel(float* out) { out[0] = 1.0f; }

// An mbarrier of count 2 that only one thread arrives at: its waiters spin forever.
__global__ void mbarrier_deadlock_kernel(float* out) {
    __shared__ __align__(8) uint64_t bar;
    if (threadIdx.x == 0) mbarrier_init(&bar, 2);
    __syncthreads();
    if (threadIdx.x == 0) mbarrier_arrive(&bar);
    mbarrier_wait(&bar, 0);
    out[threadIdx.x] = 1.0f;
}

// A lane changes its A fragments while the wgmma that reads them is in flight (undefined in the
// PTX ISA: the tensor cores may read them any time until the wait).
__global__ void wgmma_rs_changed_kernel(float* out) {
    __shared__ __align__(1024) bf16 b[64 * 64];  // B: 64 rows of 128 bytes, K-major
    for (int i = threadIdx.x; i < 64 * 64; i += blockDim.x) b[i] = __float2bfloat16(0.0f);
    fence_proxy_async();
    __syncthreads();
    uint32_t a[4] = {0, 0, 0, 0};
    float d[32];
    wgmma_fence();
    wgmma_bf16_rs<64, 0>(d, a, wgmma_descriptor(smem_address(b), 16, 1024, WGMMA_SWIZZLE_128B), 0);
    wgmma_commit();
    a[0] = 1;  // misuse: wgmma_rs_changed
    wgmma_wait<0>();
    out[threadIdx.x % 64] = d[0];
}

// A float4 load from an address 4 bytes past a 16-byte boundary (UBSan; a fault on a GPU).
__global__ void float4_misaligned_kernel(float* out, const float* in) {
    int lane = threadIdx.x;
    float4 v = *reinterpret_cast<const float4*>(in + 4 * lane + 1);  // misuse: float4_misaligned
    out[lane] = v.x;
}

// A write one float past the end of out (AddressSanitizer; a fault or silent damage on a GPU).
__global__ void past_device_end_kernel(float* out, int n) {
    int i = threadIdx.x;
    if (i <= n) out[i] = 1.0f;  // misuse: past_device_end
}

// One launch of `workers`: block b reverses its 64 values through shared memory and mixes in k and b.
enum { CHAIN_BLOCK = 64, CHAIN_BLOCKS = 5, CHAIN_LAUNCHES = 30000 };
__global__ void chain_kernel(unsigned* data, unsigned k) {
    __shared__ unsigned tile[CHAIN_BLOCK];
    int t = threadIdx.x, i = blockIdx.x * CHAIN_BLOCK + t;
    tile[t] = data[i];
    __syncthreads();
    data[i] = tile[CHAIN_BLOCK - 1 - t] * 2654435761u + k + blockIdx.x;
}
static int check_workers(void) {
    enum { N = CHAIN_BLOCK * CHAIN_BLOCKS };
    unsigned host[N], got[N], *d;
    for (int i = 0; i < N; i++) host[i] = (unsigned)i;
    cuda_check(cudaMalloc(&d, sizeof(host)));
    cuda_check(cudaMemcpy(d, host, sizeof(host), cudaMemcpyHostToDevice));
    for (unsigned k = 0; k < CHAIN_LAUNCHES; k++) {
        int blocks = 1 + (int)(k % CHAIN_BLOCKS);  // 1 to 5 blocks: fewer and more than the workers
        chain_kernel<<<blocks, CHAIN_BLOCK>>>(d, k);
        launch_check(chain_kernel);
        unsigned before[N];
        memcpy(before, host, sizeof(host));
        for (int b = 0; b < blocks; b++)
            for (int t = 0; t < CHAIN_BLOCK; t++)
                host[b * CHAIN_BLOCK + t] = before[b * CHAIN_BLOCK + CHAIN_BLOCK - 1 - t] * 2654435761u + k + (unsigned)b;
    }
    cuda_check(cudaMemcpy(got, d, sizeof(got), cudaMemcpyDeviceToHost));
    cuda_check(cudaFree(d));
    int bad = memcmp(got, host, sizeof(got)) != 0;
    printf("emu_check workers: %d launches of 1 to %d blocks: %s\n", CHAIN_LAUNCHES, CHAIN_BLOCKS,
           bad ? "another result than the host's" : "the host's result");
    return bad;
}

static const char* const names[] = {"divergent_warp", "partial_warp", "exited_lanes", "exited_threads",
                                    "divergent_barriers", "cp_async_misaligned", "cp_async_not_shared",
                                    "cp_async_unwaited", "ldmatrix_misaligned", "big_block", "big_grid",
                                    "float4_misaligned", "past_device_end", "workers", "mbarrier_deadlock",
                                    "big_shared", "wgmma_rs_changed"};

int main(int argc, char** argv) {
    int n = (int)(sizeof(names) / sizeof(names[0])), which = -1;
    for (int i = 0; i < n && argc == 2; i++)
        if (strcmp(argv[1], names[i]) == 0) which = i;
    if (which < 0) {
        fprintf(stderr, "usage: emu_check NAME, NAME one of:");
        for (int i = 0; i < n; i++) fprintf(stderr, " %s", names[i]);
        fprintf(stderr, "\n");
        return 2;
    }
    cuda_device_init();
    if (strcmp(names[which], "workers") == 0) return check_workers();
    float *in, *out;
    cuda_check(cudaMalloc(&in, 256 * sizeof(float)));
    cuda_check(cudaMalloc(&out, 64 * sizeof(float)));
    cuda_check(cudaMemset(in, 0, 256 * sizeof(float)));
    switch (which) {
    case 0: divergent_warp_kernel<<<1, 32>>>(out); launch_check(divergent_warp_kernel); break;
    case 1: partial_warp_kernel<<<1, 48>>>(out); launch_check(partial_warp_kernel); break;
    case 2: exited_lanes_kernel<<<1, 32>>>(out); launch_check(exited_lanes_kernel); break;
    case 3: exited_threads_kernel<<<1, 64>>>(out); launch_check(exited_threads_kernel); break;
    case 4: divergent_barriers_kernel<<<1, 64>>>(out); launch_check(divergent_barriers_kernel); break;
    case 5: cp_async_misaligned_kernel<<<1, 32>>>(out, in); launch_check(cp_async_misaligned_kernel); break;
    case 6: cp_async_not_shared_kernel<<<1, 16>>>(out, in); launch_check(cp_async_not_shared_kernel); break;
    case 7: cp_async_unwaited_kernel<<<1, 32>>>(out, in); launch_check(cp_async_unwaited_kernel); break;
    case 8: ldmatrix_misaligned_kernel<<<1, 32>>>(out); launch_check(ldmatrix_misaligned_kernel); break;
    case 9: over_limits_kernel<<<1, 1025>>>(out); launch_check(over_limits_kernel); break;  // misuse: big_block
    case 10: over_limits_kernel<<<dim3(1, 65536), 32>>>(out); launch_check(over_limits_kernel); break;
    case 11: float4_misaligned_kernel<<<1, 32>>>(out, in); launch_check(float4_misaligned_kernel); break;
    case 12: past_device_end_kernel<<<1, 128>>>(out, 64); launch_check(past_device_end_kernel); break;
    case 14: mbarrier_deadlock_kernel<<<1, 64>>>(out); launch_check(mbarrier_deadlock_kernel); break;
    case 15: over_limits_kernel<<<1, 32, 64 << 10>>>(out); launch_check(over_limits_kernel); break;  // misuse: big_shared
    case 16: wgmma_rs_changed_kernel<<<1, 128>>>(out); launch_check(wgmma_rs_changed_kernel); break;
    }
    cuda_check(cudaDeviceSynchronize());
    printf("emu_check %s: ran to the end, nothing reported\n", names[which]);
    return 0;
}

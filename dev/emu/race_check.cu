// dev/emu/race_check.cu: the emulator's race detector (dev/emu/cuda_emu.h, built with
// -DCUDA_EMU_RACE) against kernels with a known shared-memory race each, and one without. Each racy
// kernel marks its two racing lines with a comment "race: NAME"; test/test_gpu_emu.sh runs
// every kernel and requires the clean one to pass (in every schedule) and each racy one to stop
// with a report naming the kernel and exactly those two lines. Two more faults ride along: an
// index one past a __shared__ array's end (reported by the race detector's build and by
// AddressSanitizer's, through the arena's gap after each array), and a read of shared memory that
// the block never wrote, which holds what an earlier block left (reported by the race detector).
//
//   build/emu/race_check NAME     NAME: clean, missing_barrier, reuse_before_barrier,
//                                 refill_before_barrier, read_before_wait, past_the_end, unwritten
//
// Every kernel runs blocks of 64 threads, two warps, on 1024 floats; exit 0 when it ran and its
// result is right, 1 when the result is wrong (a race the schedule happened to expose).

#include "../../gpt2/gpu/matmul_bf16.cuh"  // cp_async16, cp_async_commit, cp_async_wait; cuda_check

enum { THREADS = 64, TILE = 4 * THREADS, TILES = 4 };  // a tile: 16 bytes (4 floats) per thread
enum { CLEAN, MISSING_BARRIER, REUSE_BEFORE_BARRIER, REFILL_BEFORE_BARRIER, READ_BEFORE_WAIT, PAST_THE_END, UNWRITTEN,
       KERNELS };
static const char* const names[KERNELS] = {"clean", "missing_barrier", "reuse_before_barrier", "refill_before_barrier",
                                           "read_before_wait", "past_the_end", "unwritten"};

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
        fprintf(stderr, "usage: race_check clean|missing_barrier|reuse_before_barrier|refill_before_barrier|"
                        "read_before_wait|past_the_end|unwritten\n");
        return 2;
    }
    cuda_device_init();
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

// gpt2/gpu/encoder.cuh: the token and position embeddings on the GPU, forward and backward
// (gpt2/cpu_layers.h: encoder_forward, encoder_backward), for float or bf16 activations.

#ifndef GPT2_GPU_ENCODER_CUH
#define GPT2_GPU_ENCODER_CUH

#include "cuda_utils.cuh"

// out[b,t,:] = wte[inp[b,t],:] + wpe[t,:], one thread per output element (coalesced along C).
template <typename floatX>
__global__ void encoder_forward_kernel(floatX* out, const int* inp, const float* wte, const float* wpe,
                                       int B, int T, int C) {
    size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (size_t)B * T * C) return;
    int c = (int)(idx % C);
    size_t bt = idx / C;
    int t = (int)(bt % T);
    out[idx] = from_float<floatX>(wte[(size_t)inp[bt] * C + c] + wpe[(size_t)t * C + c]);
}

template <typename floatX>
static void encoder_forward_gpu(floatX* out, const int* inp, const float* wte, const float* wpe,
                                int B, int T, int C) {
    encoder_forward_kernel<floatX><<<ceil_div((size_t)B * T * C, 256), 256>>>(out, inp, wte, wpe, B, T, C);
    launch_check(encoder_forward_kernel);
}

// Generation's embeddings: the T tokens of sequence b sit at positions pos[b]..pos[b]+T-1 of
// their own sequences, so out[b,t,:] = wte[inp[b,t],:] + wpe[pos[b]+t,:]; pos is on the GPU.
template <typename floatX>
__global__ void encoder_forward_at_kernel(floatX* out, const int* inp, const int* pos, const float* wte,
                                          const float* wpe, int B, int T, int C) {
    size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (size_t)B * T * C) return;
    int c = (int)(idx % C);
    size_t bt = idx / C;
    int b = (int)(bt / T), t = (int)(bt % T);
    out[idx] = from_float<floatX>(wte[(size_t)inp[bt] * C + c] + wpe[(size_t)(pos[b] + t) * C + c]);
}

template <typename floatX>
static void encoder_forward_at_gpu(floatX* out, const int* inp, const int* pos, const float* wte, const float* wpe,
                                   int B, int T, int C) {
    encoder_forward_at_kernel<floatX><<<ceil_div((size_t)B * T * C, 256), 256>>>(out, inp, pos, wte, wpe, B, T, C);
    launch_check(encoder_forward_at_kernel);
}

// dwpe[t,c] += sum over b of dout[b,t,c]: one thread per (t, c), b in order.
template <typename floatX>
__global__ void encoder_backward_wpe_kernel(float* dwpe, const floatX* dout, int B, int T, int C) {
    size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (size_t)T * C) return;
    float sum = 0.0f;
    for (int b = 0; b < B; b++) sum += to_float(dout[(size_t)b * T * C + idx]);
    dwpe[idx] += sum;
}

// ---------- the gradient of wte ----------
//
// dwte[tok,:] += the sum of dout[p,:] over the positions p that hold tok. Each row of dwte
// receives a sum over the positions of its token (a bucket), of any length: one position, or, in a
// batch of one repeated token, all B*T of them. atomicAdd per position would be short but its sum
// order, and so its bits, would change from run to run. Instead the positions are bucketed by
// token and each bucket summed in increasing position, every output written by one thread:
//   1. sort: the B*T keys (token, position), in three kernels below. The keys are distinct, so
//      the sorted order depends on the tokens alone, never on how the threads ran; a bucket is a
//      run of keys with one token, its positions increasing.
//   2. sum: the sorted keys are cut into chunks of WTE_ROWS; one thread per (chunk, column)
//      adds its chunk's dout rows, bucket by bucket. A bucket inside one chunk is added to dwte by
//      that thread. A bucket that crosses chunks leaves one partial sum per chunk, and a second
//      kernel, from the chunk where the bucket starts, adds them in chunk order and then to dwte.
//      A long bucket is thus read by all its chunks in parallel, and its second pass adds one
//      partial per WTE_ROWS rows.
// Cost: B*T*C reads of dout, at most 2*C partials per chunk, and the sort's comparisons of
// 8-byte keys, at most L(L+1)/2 per key for L = log2(B*T) merge passes (91 at B*T = 8192,
// against C = 768 reads of dout per position).
// Why on the GPU, when the tokens came from the host: the launcher keeps its CPU twin's
// arguments, and every caller (the float32 layer table of gpt2/model.h, the bf16 path, each
// pipeline slot, dev/gpu/gpu_check.cu) has the tokens on the GPU. Bucketing them on the host would
// take either a copy back, which stops the host until the GPU has finished the backward pass so
// far, or a bucket table built at upload and passed beside the tokens through each of those
// callers; sorting 8-byte keys on the GPU costs a few small kernels and changes nothing outside
// this header.

#define WTE_SORT_BLOCK 1024  // keys, and threads, of a block of the first sort passes (16 KiB of
                             // shared memory for its two buffers)
#define WTE_ROWS 32          // sorted rows per chunk of the sum: a long bucket's second pass reads
                             // 1/32 of what its first read, and B*T = 8192 makes 256 chunks

// A sort key: the token in the high 32 bits, the position in the low ones, so that the keys sort
// by token, then by position.
__device__ __forceinline__ unsigned long long wte_key(int token, int p) {
    return ((unsigned long long)(unsigned)token << 32) | (unsigned)p;
}
__device__ __forceinline__ int key_token(unsigned long long key) { return (int)(key >> 32); }
__device__ __forceinline__ int key_position(unsigned long long key) { return (int)(key & 0xffffffffu); }

// Merge sort, one thread per key. In a pass, the sorted runs of `width` keys of `keys` ([0,
// width), [width, 2 width), ...; the last cut at n) are merged in pairs, each key going straight
// to its place in the merged run: its index in its own run plus the number of keys of the other
// run that are smaller (a binary search). Keys are distinct, so no two keys take the same place.
__device__ int merged_place(const unsigned long long* keys, int i, int n, int width) {
    long long span = 2 * (long long)width;  // 64-bit: may pass 2^31 in the last pass
    int start = (int)(i / span * span);
    int mid = (int)min(start + (long long)width, (long long)n), end = (int)min(start + span, (long long)n);
    int other_lo = i < mid ? mid : start, other_hi = i < mid ? end : mid;
    int own = i < mid ? i - start : i - mid;
    unsigned long long key = keys[i];
    int lo = other_lo, hi = other_hi;  // the first key of the other run not smaller than key
    while (lo < hi) {
        int m = lo + (hi - lo) / 2;
        if (keys[m] < key) lo = m + 1;
        else hi = m;
    }
    return start + own + (lo - other_lo);
}

// The first passes in shared memory: block b makes the keys of positions [b WTE_SORT_BLOCK,
// (b+1) WTE_SORT_BLOCK) and sorts them there (widths 1, 2, ..., WTE_SORT_BLOCK/2), two buffers
// in turn: a pass reads one and writes the other, a barrier between passes.
__global__ void encoder_backward_wte_sort_kernel(unsigned long long* sorted, const int* inp, int BT) {
    __shared__ unsigned long long buf[2][WTE_SORT_BLOCK];
    int first = blockIdx.x * WTE_SORT_BLOCK, n = min(WTE_SORT_BLOCK, BT - first), t = threadIdx.x;
    if (t < n) buf[0][t] = wte_key(inp[first + t], first + t);
    __syncthreads();
    int from = 0;
    for (int width = 1; width < n; width *= 2) {  // n is the block's: every thread takes each barrier
        if (t < n) buf[1 - from][merged_place(buf[from], t, n, width)] = buf[from][t];
        __syncthreads();
        from = 1 - from;
    }
    if (t < n) sorted[first + t] = buf[from][t];
}

// The later passes, one launch each, in global memory: runs of width WTE_SORT_BLOCK, 2
// WTE_SORT_BLOCK, ... merged from `in` into `out`.
__global__ void encoder_backward_wte_merge_kernel(unsigned long long* out, const unsigned long long* in, int BT,
                                                  int width) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= BT) return;
    out[merged_place(in, i, BT, width)] = in[i];
}

// The sum, one thread per (chunk, column c), the chunk's rows in order, a running sum per bucket.
// Where a bucket ends (the next key has another token, or the chunk ends) its sum goes to dwte if
// the bucket lies inside the chunk; else to partial (C floats, 2 per chunk): slot 0 if the bucket
// began in an earlier chunk (a later piece: then it is the chunk's first bucket, as the keys are
// sorted), slot 1 if it begins here and goes on (its first piece: the chunk's last bucket).
// Threads of a block take consecutive columns: each row of dout is read coalesced.
template <typename floatX>
__global__ void encoder_backward_wte_kernel(float* dwte, float* partial, const floatX* dout,
                                            const unsigned long long* sorted, int BT, int C) {
    int chunk = blockIdx.x, c = blockIdx.y * blockDim.x + threadIdx.x;
    if (c >= C) return;
    int first = chunk * WTE_ROWS, end = min(first + WTE_ROWS, BT);
    int before = first > 0 ? key_token(sorted[first - 1]) : -1;  // the tokens either side (-1: none)
    int after = end < BT ? key_token(sorted[end]) : -1;
    float sum = 0.0f;
    for (int i = first; i < end; i++) {
        unsigned long long key = sorted[i];  // the same for every thread of the block: one broadcast read
        int tok = key_token(key);
        sum += to_float(dout[(size_t)key_position(key) * C + c]);
        if (i + 1 < end && key_token(sorted[i + 1]) == tok) continue;  // the bucket goes on
        if (tok == before) partial[(size_t)(2 * chunk) * C + c] = sum;
        else if (i + 1 == end && tok == after) partial[(size_t)(2 * chunk + 1) * C + c] = sum;
        else dwte[(size_t)tok * C + c] += sum;
        sum = 0.0f;
    }
}

// The buckets that cross chunks: the thread of the chunk where one begins adds its first piece
// (slot 1) and the later pieces (slot 0 of the following chunks) in chunk order, up to the chunk
// where the bucket ends, then adds the sum to dwte.
__global__ void encoder_backward_wte_carry_kernel(float* dwte, const float* partial, const unsigned long long* sorted,
                                                  int BT, int C) {
    int chunk = blockIdx.x, c = blockIdx.y * blockDim.x + threadIdx.x;
    if (c >= C) return;
    int first = chunk * WTE_ROWS, end = min(first + WTE_ROWS, BT);
    if (end == BT) return;
    int tok = key_token(sorted[end - 1]);  // the chunk's last bucket
    if (key_token(sorted[end]) != tok) return;  // ends inside the chunk: already in dwte or in slot 0
    if (first > 0 && key_token(sorted[first - 1]) == tok) return;  // began in an earlier chunk
    float sum = partial[(size_t)(2 * chunk + 1) * C + c];
    for (int k = chunk + 1;; k++) {
        sum += partial[(size_t)(2 * k) * C + c];
        int k_end = min((k + 1) * WTE_ROWS, BT);
        if (k_end == BT || key_token(sorted[k_end]) != tok) break;  // the bucket ends in chunk k
    }
    dwte[(size_t)tok * C + c] += sum;
}

// The keys of inp's BT positions, sorted, in `keys` or `spare` (two buffers of BT keys, used in
// turn by the merge passes): returns the one that holds them.
static const unsigned long long* encoder_backward_wte_sort_gpu(unsigned long long* keys, unsigned long long* spare,
                                                              const int* inp, int BT) {
    encoder_backward_wte_sort_kernel<<<ceil_div(BT, WTE_SORT_BLOCK), WTE_SORT_BLOCK>>>(keys, inp, BT);
    launch_check(encoder_backward_wte_sort_kernel);
    for (int width = WTE_SORT_BLOCK; width < BT; width *= 2) {
        encoder_backward_wte_merge_kernel<<<ceil_div(BT, 256), 256>>>(spare, keys, BT, width);
        launch_check(encoder_backward_wte_merge_kernel);
        unsigned long long* merged = spare;
        spare = keys;
        keys = merged;
    }
    return keys;
}

template <typename floatX>
static void encoder_backward_wte_gpu(float* dwte, const floatX* dout, const int* inp, int BT, int C) {
    int chunks = ceil_div(BT, WTE_ROWS);
    // scratch: two buffers of BT keys (2 floats each) for the sort, then 2 partials of C per chunk
    float* scratch = scratch_floats(4 * (size_t)BT + 2 * (size_t)chunks * C);
    unsigned long long* keys = (unsigned long long*)scratch;
    float* partial = scratch + 4 * (size_t)BT;
    const unsigned long long* sorted = encoder_backward_wte_sort_gpu(keys, keys + BT, inp, BT);
    dim3 grid(chunks, ceil_div(C, 256));
    encoder_backward_wte_kernel<floatX><<<grid, 256>>>(dwte, partial, dout, sorted, BT, C);
    launch_check(encoder_backward_wte_kernel);
    encoder_backward_wte_carry_kernel<<<grid, 256>>>(dwte, partial, sorted, BT, C);
    launch_check(encoder_backward_wte_carry_kernel);
}

template <typename floatX>
static void encoder_backward_gpu(float* dwte, float* dwpe, const floatX* dout, const int* inp,
                                 int B, int T, int C) {
    encoder_backward_wpe_kernel<floatX><<<ceil_div((size_t)T * C, 256), 256>>>(dwpe, dout, B, T, C);
    launch_check(encoder_backward_wpe_kernel);
    encoder_backward_wte_gpu(dwte, dout, inp, B * T, C);
}

#endif // GPT2_GPU_ENCODER_CUH

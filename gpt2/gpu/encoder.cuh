// gpt2/gpu/encoder.cuh: the token and position embeddings on the GPU, forward and backward
// (gpt2/cpu_layers.h: encoder_forward, encoder_backward), for float or bf16 activations.

#ifndef GPT2_GPU_ENCODER_CUH
#define GPT2_GPU_ENCODER_CUH

#include "cuda_utils.cuh"

// out[b,t,:] = wte[inp[b,t],:] + wpe[t,:], a thread per W outputs: one 16-byte store (W =
// Pack16<floatX>::N: 8 bf16 or 4 floats) from as many float32 of wte and wpe; W = 1 for any C.
template <typename floatX, int W>
__global__ void encoder_forward_kernel(floatX* out, const int* inp, const float* wte, const float* wpe,
                                       int B, int T, int C) {
    size_t idx = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * W;
    if (idx >= (size_t)B * T * C) return;
    int c = (int)(idx % C);
    size_t bt = idx / C;
    int t = (int)(bt % T);
    float e[W], p[W];
    load_values<W>(e, wte + (size_t)inp[bt] * C + c);
    load_values<W>(p, wpe + (size_t)t * C + c);
    for (int j = 0; j < W; j++) e[j] += p[j];
    store_values<W>(out + idx, e);
}

// Whether a kernel may take W = Pack16<floatX>::N columns at a time: rows of whole packs, aligned.
template <typename floatX>
static bool encoder_packs(int C, bool aligned) { return C % Pack16<floatX>::N == 0 && aligned; }

template <typename floatX>
static void encoder_forward_gpu(floatX* out, const int* inp, const float* wte, const float* wpe,
                                int B, int T, int C) {
    constexpr int W = Pack16<floatX>::N;
    size_t n = (size_t)B * T * C;
    if (encoder_packs<floatX>(C, aligned16(out) && aligned16(wte) && aligned16(wpe))) {
        encoder_forward_kernel<floatX, W><<<ceil_div(n / W, 256), 256>>>(out, inp, wte, wpe, B, T, C);
    } else {
        encoder_forward_kernel<floatX, 1><<<ceil_div(n, 256), 256>>>(out, inp, wte, wpe, B, T, C);
    }
    launch_check(encoder_forward_kernel);
}

// Generation's: out[b,t,:] = wte[inp[b,t],:] + wpe[pos[b]+t,:], pos (B) on the GPU.
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

// dwpe[t,c] += sum over b of dout[b,t,c]: a thread per (t, W columns), b in order.
template <typename floatX, int W>
__global__ void encoder_backward_wpe_kernel(float* dwpe, const floatX* dout, int B, int T, int C) {
    size_t idx = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * W;
    if (idx >= (size_t)T * C) return;
    float sum[W], d[W];
    for (int j = 0; j < W; j++) sum[j] = 0.0f;
    for (int b = 0; b < B; b++) {
        load_values<W>(d, dout + (size_t)b * T * C + idx);
        for (int j = 0; j < W; j++) sum[j] += d[j];
    }
    load_values<W>(d, dwpe + idx);
    for (int j = 0; j < W; j++) d[j] += sum[j];
    store_values<W>(dwpe + idx, d);
}

// ---------- the gradient of wte ----------
//
// dwte[tok,:] += the sum of dout[p,:] over the positions p that hold tok, deterministically
// (atomicAdd's order, hence its bits, would vary): the (token, position) keys are sorted on the
// GPU, cut into chunks of WTE_ROWS; a thread per (chunk, column) sums each bucket in position
// order, and buckets crossing chunks are finished by a second kernel in chunk order. Cost, and
// why on the GPU: doc/gpu.md "Kernel notes".

#define WTE_SORT_BLOCK 1024  // keys (and threads) of a block of the first sort passes: 16 KiB
#define WTE_ROWS 32          // sorted rows per chunk of the sum

// A sort key: token in the high 32 bits, position in the low: sorted by token, then position.
__device__ __forceinline__ unsigned long long wte_key(int token, int p) {
    return ((unsigned long long)(unsigned)token << 32) | (unsigned)p;
}
__device__ __forceinline__ int key_token(unsigned long long key) { return (int)(key >> 32); }
__device__ __forceinline__ int key_position(unsigned long long key) { return (int)(key & 0xffffffffu); }

// Merge sort, a thread per key: in a pass, runs of `width` keys merge in pairs, a key's place being
// its index in its run plus the smaller keys of the other (a binary search). Keys are distinct.
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

// The first passes, in shared memory: block b sorts the keys of its WTE_SORT_BLOCK positions,
// each pass reading one buffer and writing the other.
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

// A later pass (one launch each), in global memory: runs of `width` from `in` into `out`.
__global__ void encoder_backward_wte_merge_kernel(unsigned long long* out, const unsigned long long* in, int BT,
                                                  int width) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= BT) return;
    out[merged_place(in, i, BT, width)] = in[i];
}

// The sum, a thread per (chunk, W columns from c), the chunk's rows in order. A bucket inside the
// chunk goes to dwte; else to partial: slot 0 the piece of a bucket begun earlier (the chunk's
// first), slot 1 the first piece of one that goes on (the chunk's last). Columns coalesced.
template <typename floatX, int W>
__global__ void encoder_backward_wte_kernel(float* dwte, float* partial, const floatX* dout,
                                            const unsigned long long* sorted, int BT, int C) {
    int chunk = blockIdx.x, c = (blockIdx.y * blockDim.x + threadIdx.x) * W;
    if (c >= C) return;
    int first = chunk * WTE_ROWS, end = min(first + WTE_ROWS, BT);
    int before = first > 0 ? key_token(sorted[first - 1]) : -1;  // the tokens either side (-1: none)
    int after = end < BT ? key_token(sorted[end]) : -1;
    float sum[W], d[W];
    for (int j = 0; j < W; j++) sum[j] = 0.0f;
    for (int i = first; i < end; i++) {
        unsigned long long key = sorted[i];  // the same for every thread of the block: one broadcast read
        int tok = key_token(key);
        load_values<W>(d, dout + (size_t)key_position(key) * C + c);
        for (int j = 0; j < W; j++) sum[j] += d[j];
        if (i + 1 < end && key_token(sorted[i + 1]) == tok) continue;  // the bucket goes on
        if (tok == before) {
            store_values<W>(partial + (size_t)(2 * chunk) * C + c, sum);
        } else if (i + 1 == end && tok == after) {
            store_values<W>(partial + (size_t)(2 * chunk + 1) * C + c, sum);
        } else {
            float* row = dwte + (size_t)tok * C + c;
            load_values<W>(d, row);
            for (int j = 0; j < W; j++) d[j] += sum[j];
            store_values<W>(row, d);
        }
        for (int j = 0; j < W; j++) sum[j] = 0.0f;
    }
}

// Buckets crossing chunks: the chunk where one begins adds its pieces in chunk order into dwte.
template <int W>
__global__ void encoder_backward_wte_carry_kernel(float* dwte, const float* partial, const unsigned long long* sorted,
                                                  int BT, int C) {
    int chunk = blockIdx.x, c = (blockIdx.y * blockDim.x + threadIdx.x) * W;
    if (c >= C) return;
    int first = chunk * WTE_ROWS, end = min(first + WTE_ROWS, BT);
    if (end == BT) return;
    int tok = key_token(sorted[end - 1]);  // the chunk's last bucket
    if (key_token(sorted[end]) != tok) return;  // ends inside the chunk: already in dwte or in slot 0
    if (first > 0 && key_token(sorted[first - 1]) == tok) return;  // began in an earlier chunk
    float sum[W], d[W];
    load_values<W>(sum, partial + (size_t)(2 * chunk + 1) * C + c);
    for (int k = chunk + 1;; k++) {
        load_values<W>(d, partial + (size_t)(2 * k) * C + c);
        for (int j = 0; j < W; j++) sum[j] += d[j];
        int k_end = min((k + 1) * WTE_ROWS, BT);
        if (k_end == BT || key_token(sorted[k_end]) != tok) break;  // the bucket ends in chunk k
    }
    float* row = dwte + (size_t)tok * C + c;
    load_values<W>(d, row);
    for (int j = 0; j < W; j++) d[j] += sum[j];
    store_values<W>(row, d);
}

// inp's BT keys sorted, in `keys` or `spare` (the passes alternate): returns which.
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

// W columns a thread: the same sums, in the same order, for any W.
template <typename floatX, int W>
static void encoder_backward_wte_sums_gpu(float* dwte, float* partial, const floatX* dout,
                                          const unsigned long long* sorted, int BT, int C) {
    dim3 grid(ceil_div(BT, WTE_ROWS), ceil_div(C / W, 256));
    encoder_backward_wte_kernel<floatX, W><<<grid, 256>>>(dwte, partial, dout, sorted, BT, C);
    launch_check(encoder_backward_wte_kernel);
    encoder_backward_wte_carry_kernel<W><<<grid, 256>>>(dwte, partial, sorted, BT, C);
    launch_check(encoder_backward_wte_carry_kernel);
}

template <typename floatX>
static void encoder_backward_wte_gpu(float* dwte, const floatX* dout, const int* inp, int BT, int C) {
    int chunks = ceil_div(BT, WTE_ROWS);
    // two buffers of BT keys (2 floats each), then 2 partials of C per chunk
    float* scratch = scratch_floats(4 * (size_t)BT + 2 * (size_t)chunks * C);
    unsigned long long* keys = (unsigned long long*)scratch;
    float* partial = scratch + 4 * (size_t)BT;
    const unsigned long long* sorted = encoder_backward_wte_sort_gpu(keys, keys + BT, inp, BT);
    if (encoder_packs<floatX>(C, aligned16(dwte) && aligned16(dout))) {
        encoder_backward_wte_sums_gpu<floatX, Pack16<floatX>::N>(dwte, partial, dout, sorted, BT, C);
    } else {
        encoder_backward_wte_sums_gpu<floatX, 1>(dwte, partial, dout, sorted, BT, C);
    }
}

// dwte and dwpe += the embeddings' gradients from dout (B,T,C), in a fixed order.
template <typename floatX>
static void encoder_backward_gpu(float* dwte, float* dwpe, const floatX* dout, const int* inp,
                                 int B, int T, int C) {
    constexpr int W = Pack16<floatX>::N;
    size_t n = (size_t)T * C;
    if (encoder_packs<floatX>(C, aligned16(dwpe) && aligned16(dout))) {
        encoder_backward_wpe_kernel<floatX, W><<<ceil_div(n / W, 256), 256>>>(dwpe, dout, B, T, C);
    } else {
        encoder_backward_wpe_kernel<floatX, 1><<<ceil_div(n, 256), 256>>>(dwpe, dout, B, T, C);
    }
    launch_check(encoder_backward_wpe_kernel);
    encoder_backward_wte_gpu(dwte, dout, inp, B * T, C);
}

#endif // GPT2_GPU_ENCODER_CUH

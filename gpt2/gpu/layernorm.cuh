// gpt2/gpu/layernorm.cuh: layernorm on the GPU, forward and backward (gpt2/cpu_layers.h:
// layernorm_forward, layernorm_backward), for float or bf16 activations; mean and 1/std stay
// float32. A warp per row. Rows of up to LAYERNORM_MAX_C go through registers, read once in
// 16-byte packs; other rows take the strided kernels. Why, and the bytes: doc/gpu.md "Kernel notes".

#ifndef GPT2_GPU_LAYERNORM_CUH
#define GPT2_GPU_LAYERNORM_CUH

#include <type_traits>      // std::integral_constant
#include "../arithmetic.h"  // LAYERNORM_EPS
#include "cuda_utils.cuh"

#define LAYERNORM_MAX_C 1024           // the longest row held in registers: 32 values a lane
#define LAYERNORM_ROWS 8               // warps, hence rows at a time, of a block
#define LAYERNORM_BACKWARD_BLOCKS 256  // at most; not the GPU's SMs: the same partials, hence bits, on any GPU

// Whether rows go through registers: C a whole number of 16-byte packs, at most LAYERNORM_MAX_C,
// the tensors 16-byte aligned.
template <typename floatX>
static bool layernorm_in_registers(int C, bool aligned) {
    return C % Pack16<floatX>::N == 0 && C <= LAYERNORM_MAX_C && aligned;
}

// Calls launch(std::integral_constant<int, EACH>()): EACH, the values of a row a lane holds, is
// the least of 8, 16, 24, 32 that holds C / 32, so a kernel is built for each.
template <typename Launch>
static void layernorm_each(int C, Launch launch) {
    switch (ceil_div(C, 32 * 8)) {
        case 1: launch(std::integral_constant<int, 8>()); break;
        case 2: launch(std::integral_constant<int, 16>()); break;
        case 3: launch(std::integral_constant<int, 24>()); break;
        default: launch(std::integral_constant<int, 32>()); break;
    }
}

// ---------- forward ----------

// The row in registers: lane l loads packs l, l + 32, ... (a warp's load is 512 consecutive
// bytes), then the mean and the variance of x - mean (the CPU's two passes, from registers).
template <typename floatX, int EACH>
__global__ void __launch_bounds__(256) layernorm_forward_kernel(floatX* out, float* mean, float* rstd,
                                                                const floatX* inp, const float* weight,
                                                                const float* bias, int N, int C) {
    constexpr int P = Pack16<floatX>::N;
    int row = blockIdx.x * LAYERNORM_ROWS + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (row >= N) return;  // whole warps leave: the shuffles below still see all 32 lanes
    const floatX* x_row = inp + (size_t)row * C;
    float x[EACH];
#pragma unroll
    for (int k = 0; k < EACH / P; k++) {
        int i = (k * 32 + lane) * P;
        if (i < C) load16(x + k * P, x_row + i);
    }
    float sum = 0.0f;
#pragma unroll
    for (int k = 0; k < EACH / P; k++) {
        if ((k * 32 + lane) * P >= C) continue;
        for (int e = 0; e < P; e++) sum += x[k * P + e];
    }
    float m = warp_sum(sum) / C;
    float var = 0.0f;
#pragma unroll
    for (int k = 0; k < EACH / P; k++) {
        if ((k * 32 + lane) * P >= C) continue;
        for (int e = 0; e < P; e++) {
            float d = x[k * P + e] - m;
            var += d * d;
        }
    }
    float s = 1.0f / sqrtf(warp_sum(var) / C + LAYERNORM_EPS);
    floatX* o = out + (size_t)row * C;
#pragma unroll
    for (int k = 0; k < EACH / P; k++) {
        int i = (k * 32 + lane) * P;
        if (i >= C) continue;
        float w[P], b[P], y[P];
        load_values<P>(w, weight + i);  // float32: 1 or 2 packs
        load_values<P>(b, bias + i);
        for (int e = 0; e < P; e++) y[e] = (s * (x[k * P + e] - m)) * w[e] + b[e];
        store16(o + i, y);
    }
    if (lane == 0) {
        mean[row] = m;
        rstd[row] = s;
    }
}

// Any C, any alignment: lane l takes x[l], x[l + 32], ... (coalesced), three passes over the
// row (mean, variance of x - mean, output), the second and third from L1.
template <typename floatX>
__global__ void layernorm_forward_strided_kernel(floatX* out, float* mean, float* rstd, const floatX* inp,
                                                 const float* weight, const float* bias, int N, int C) {
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    int lane = threadIdx.x % 32;
    if (row >= N) return;  // whole warps leave: the shuffles below still see all 32 lanes
    const floatX* x = inp + (size_t)row * C;
    float sum = 0.0f;
    for (int i = lane; i < C; i += 32) sum += to_float(x[i]);
    float m = warp_sum(sum) / C;
    float var = 0.0f;
    for (int i = lane; i < C; i += 32) {
        float d = to_float(x[i]) - m;
        var += d * d;
    }
    float s = 1.0f / sqrtf(warp_sum(var) / C + LAYERNORM_EPS);
    floatX* o = out + (size_t)row * C;
    for (int i = lane; i < C; i += 32) o[i] = from_float<floatX>((s * (to_float(x[i]) - m)) * weight[i] + bias[i]);
    if (lane == 0) {
        mean[row] = m;
        rstd[row] = s;
    }
}

template <typename floatX>
static void layernorm_forward_gpu(floatX* out, float* mean, float* rstd, const floatX* inp,
                                  const float* weight, const float* bias, int B, int T, int C) {
    int N = B * T, blocks = ceil_div(N, LAYERNORM_ROWS);
    if (!layernorm_in_registers<floatX>(C, aligned16(out) && aligned16(inp) && aligned16(weight) && aligned16(bias))) {
        layernorm_forward_strided_kernel<floatX><<<blocks, 32 * LAYERNORM_ROWS>>>(out, mean, rstd, inp, weight, bias, N, C);
        launch_check(layernorm_forward_strided_kernel);
        return;
    }
    layernorm_each(C, [&](auto each) {
        layernorm_forward_kernel<floatX, decltype(each)::value><<<blocks, 32 * LAYERNORM_ROWS>>>(
            out, mean, rstd, inp, weight, bias, N, C);
    });
    launch_check(layernorm_forward_kernel);
}

// ---------- backward ----------
//
// With n = (x - mean) * rstd and g = weight * dout, per row
//     dinp += (g - mean(g) - n * mean(g * n)) * rstd,
// and over all rows dweight += sum of dout * n, dbias += sum of dout. One pass reads dout and inp
// once: each warp takes rows in turn, adds its rows' dout * n and dout to its lanes' columns, and
// the block writes its warps' sums (in warp order) as one partial of 2C floats; a second kernel
// adds the blocks' partials in block order. The same bits every run, no atomics.

// The partial sums of the blocks, dweight's C then dbias's C each: dweight and dbias += their sums
// over the blocks in order. 8 warps of a block take every 8th partial of 32 columns, then add up.
__global__ void layernorm_backward_sum_kernel(float* dweight, float* dbias, const float* partial, int blocks, int C) {
    __shared__ float part[8][32];
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32, col = blockIdx.x * 32 + lane;  // of 2C
    float sum = 0.0f;
    if (col < 2 * C) {
        for (int b = warp; b < blocks; b += 8) sum += partial[(size_t)b * 2 * C + col];
    }
    part[warp][lane] = sum;
    __syncthreads();
    if (warp > 0 || col >= 2 * C) return;
    for (int w = 1; w < 8; w++) sum += part[w][lane];
    if (col < C) dweight[col] += sum;
    else dbias[col - C] += sum;
}

// The rows in registers (the forward's packs): a lane's EACH columns of dout and n, and its sums of
// dout * n and dout over its warp's rows.
template <typename floatX, int EACH>
__global__ void __launch_bounds__(256) layernorm_backward_kernel(floatX* dinp, float* partial, const floatX* dout,
                                                                 const floatX* inp, const float* weight,
                                                                 const float* mean, const float* rstd, int N, int C) {
    constexpr int P = Pack16<floatX>::N;
    __shared__ float block_sums[2 * LAYERNORM_MAX_C];  // dweight's, then dbias's: the warps' in turn
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    float dw[EACH], db[EACH];
#pragma unroll
    for (int j = 0; j < EACH; j++) dw[j] = db[j] = 0.0f;
    for (int row = blockIdx.x * LAYERNORM_ROWS + warp; row < N; row += gridDim.x * LAYERNORM_ROWS) {
        const floatX *dy_row = dout + (size_t)row * C, *x_row = inp + (size_t)row * C;
        float dy[EACH], n[EACH];
#pragma unroll
        for (int k = 0; k < EACH / P; k++) {
            int i = (k * 32 + lane) * P;
            if (i >= C) continue;
            load16(dy + k * P, dy_row + i);
            load16(n + k * P, x_row + i);
        }
        float m = mean[row], s = rstd[row];
        float g_sum = 0.0f, gn_sum = 0.0f;
#pragma unroll
        for (int k = 0; k < EACH / P; k++) {
            int i = (k * 32 + lane) * P;
            if (i >= C) continue;
            float w[P];
            load_values<P>(w, weight + i);
            for (int e = 0; e < P; e++) {
                int j = k * P + e;
                n[j] = (n[j] - m) * s;
                float g = w[e] * dy[j];
                g_sum += g;
                gn_sum += g * n[j];
                dw[j] += dy[j] * n[j];
                db[j] += dy[j];
            }
        }
        float g_mean = warp_sum(g_sum) / C, gn_mean = warp_sum(gn_sum) / C;
        floatX* dx_row = dinp + (size_t)row * C;
#pragma unroll
        for (int k = 0; k < EACH / P; k++) {
            int i = (k * 32 + lane) * P;
            if (i >= C) continue;
            float w[P], dx[P];
            load_values<P>(w, weight + i);
            load16(dx, dx_row + i);
            for (int e = 0; e < P; e++) {
                int j = k * P + e;
                dx[e] += (w[e] * dy[j] - g_mean - n[j] * gn_mean) * s;
            }
            store16(dx_row + i, dx);
        }
    }
    // the block's sums: warp 0's, then each next warp adds its own, between barriers
    for (int w = 0; w < LAYERNORM_ROWS; w++) {
        if (warp == w) {
#pragma unroll
            for (int k = 0; k < EACH / P; k++) {
                int i = (k * 32 + lane) * P;
                if (i >= C) continue;
                for (int e = 0; e < P; e++) {
                    block_sums[i + e] = (w > 0 ? block_sums[i + e] : 0.0f) + dw[k * P + e];
                    block_sums[C + i + e] = (w > 0 ? block_sums[C + i + e] : 0.0f) + db[k * P + e];
                }
            }
        }
        __syncthreads();
    }
    for (int i = threadIdx.x; i < 2 * C; i += blockDim.x) partial[(size_t)blockIdx.x * 2 * C + i] = block_sums[i];
}

// Any C, any alignment: dinp a warp per row, strided as the forward's.
template <typename floatX>
__global__ void layernorm_backward_strided_kernel(floatX* dinp, const floatX* dout, const floatX* inp,
                                                  const float* weight, const float* mean, const float* rstd,
                                                  int N, int C) {
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    int lane = threadIdx.x % 32;
    if (row >= N) return;
    const floatX* x = inp + (size_t)row * C;
    const floatX* dy = dout + (size_t)row * C;
    float m = mean[row], s = rstd[row];
    float g_sum = 0.0f, gn_sum = 0.0f;
    for (int i = lane; i < C; i += 32) {
        float g = weight[i] * to_float(dy[i]);
        g_sum += g;
        gn_sum += g * (to_float(x[i]) - m) * s;
    }
    float g_mean = warp_sum(g_sum) / C, gn_mean = warp_sum(gn_sum) / C;
    floatX* dx = dinp + (size_t)row * C;
    for (int i = lane; i < C; i += 32) {
        float n = (to_float(x[i]) - m) * s;
        dx[i] = from_float<floatX>(to_float(dx[i]) + (weight[i] * to_float(dy[i]) - g_mean - n * gn_mean) * s);
    }
}

// With the strided kernel: the column sums, block (x, y) for 32 columns and chunk y of
// COLSUM_ROWS_PER_CHUNK rows, warp w its rows w, w + 8, ...: partial[y] as the kernel above writes it.
template <typename floatX>
__global__ void layernorm_backward_params_kernel(float* partial, const floatX* dout, const floatX* inp,
                                                 const float* mean, const float* rstd, int N, int C) {
    __shared__ float dw_part[8][32], db_part[8][32];
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    int col = blockIdx.x * 32 + lane;
    int row_end = min(N, (int)(blockIdx.y + 1) * COLSUM_ROWS_PER_CHUNK);
    float dw = 0.0f, db = 0.0f;
    if (col < C) {
        for (int row = blockIdx.y * COLSUM_ROWS_PER_CHUNK + warp; row < row_end; row += 8) {
            float dy = to_float(dout[(size_t)row * C + col]);
            dw += dy * (to_float(inp[(size_t)row * C + col]) - mean[row]) * rstd[row];
            db += dy;
        }
    }
    dw_part[warp][lane] = dw;
    db_part[warp][lane] = db;
    __syncthreads();
    if (warp == 0 && col < C) {
        float dw_sum = 0.0f, db_sum = 0.0f;
        for (int w = 0; w < 8; w++) {
            dw_sum += dw_part[w][lane];
            db_sum += db_part[w][lane];
        }
        partial[(size_t)blockIdx.y * 2 * C + col] = dw_sum;
        partial[(size_t)blockIdx.y * 2 * C + C + col] = db_sum;
    }
}

// dinp, dweight and dbias += the gradients (dinp is the residual stream's: others add into it too).
template <typename floatX>
static void layernorm_backward_gpu(floatX* dinp, float* dweight, float* dbias, const floatX* dout,
                                   const floatX* inp, const float* weight, const float* mean,
                                   const float* rstd, int B, int T, int C) {
    int N = B * T, blocks;
    float* partial;
    if (layernorm_in_registers<floatX>(C, aligned16(dinp) && aligned16(dout) && aligned16(inp) && aligned16(weight))) {
        blocks = min(LAYERNORM_BACKWARD_BLOCKS, ceil_div(N, LAYERNORM_ROWS));  // N's, not the GPU's
        partial = scratch_floats((size_t)blocks * 2 * C);
        layernorm_each(C, [&](auto each) {
            layernorm_backward_kernel<floatX, decltype(each)::value><<<blocks, 32 * LAYERNORM_ROWS>>>(
                dinp, partial, dout, inp, weight, mean, rstd, N, C);
        });
        launch_check(layernorm_backward_kernel);
    } else {
        layernorm_backward_strided_kernel<floatX><<<ceil_div(N, LAYERNORM_ROWS), 32 * LAYERNORM_ROWS>>>(
            dinp, dout, inp, weight, mean, rstd, N, C);
        launch_check(layernorm_backward_strided_kernel);
        blocks = ceil_div(N, COLSUM_ROWS_PER_CHUNK);
        partial = scratch_floats((size_t)blocks * 2 * C);
        layernorm_backward_params_kernel<floatX><<<dim3(ceil_div(C, 32), blocks), 256>>>(partial, dout, inp, mean,
                                                                                          rstd, N, C);
        launch_check(layernorm_backward_params_kernel);
    }
    layernorm_backward_sum_kernel<<<ceil_div(2 * C, 32), 256>>>(dweight, dbias, partial, blocks, C);
    launch_check(layernorm_backward_sum_kernel);
}

#endif // GPT2_GPU_LAYERNORM_CUH

// gpt2/gpu/layernorm.cuh: layernorm on the GPU, forward and backward (gpt2/cpu_layers.h:
// layernorm_forward, layernorm_backward), for float or bf16 activations; mean and 1/std stay
// float32.

#ifndef GPT2_GPU_LAYERNORM_CUH
#define GPT2_GPU_LAYERNORM_CUH

#include "../arithmetic.h"  // LAYERNORM_EPS
#include "cuda_utils.cuh"

// One warp per row of C: two passes over the row (mean, then variance of x - mean, as the CPU
// does, which is more accurate than E[x^2] - E[x]^2), then the normalised output.
template <typename floatX>
__global__ void layernorm_forward_kernel(floatX* out, float* mean, float* rstd, const floatX* inp,
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
    int N = B * T;
    layernorm_forward_kernel<floatX><<<ceil_div(N, 8), 256>>>(out, mean, rstd, inp, weight, bias, N, C);
    launch_check(layernorm_forward_kernel);
}

// dinp, one warp per row: with n = (x - mean) * rstd and g = weight * dout,
// dinp += (g - mean(g) - n * mean(g * n)) * rstd.
template <typename floatX>
__global__ void layernorm_backward_kernel(floatX* dinp, const floatX* dout, const floatX* inp,
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

// Stage 1 of dweight += sum over rows of dout * n and dbias += sum over rows of dout. Block =
// 32 columns x 8 warps; warp w takes rows w, w+8, ... of its chunk, reading 32 consecutive
// floats of a row per step (coalesced). Writes partial[chunk][0][col] and partial[chunk][1][col].
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

template <typename floatX>
static void layernorm_backward_gpu(floatX* dinp, float* dweight, float* dbias, const floatX* dout,
                                   const floatX* inp, const float* weight, const float* mean,
                                   const float* rstd, int B, int T, int C) {
    int N = B * T;
    layernorm_backward_kernel<floatX><<<ceil_div(N, 8), 256>>>(dinp, dout, inp, weight, mean, rstd, N, C);
    launch_check(layernorm_backward_kernel);
    int chunks = ceil_div(N, COLSUM_ROWS_PER_CHUNK);
    float* partial = scratch_floats((size_t)chunks * 2 * C);
    dim3 grid(ceil_div(C, 32), chunks);
    layernorm_backward_params_kernel<floatX><<<grid, 256>>>(partial, dout, inp, mean, rstd, N, C);
    launch_check(layernorm_backward_params_kernel);
    sum_partials_kernel<<<ceil_div(C, 256), 256>>>(dweight, partial, chunks, 2 * C, C);
    launch_check(sum_partials_kernel);
    sum_partials_kernel<<<ceil_div(C, 256), 256>>>(dbias, partial + C, chunks, 2 * C, C);
    launch_check(sum_partials_kernel);
}

#endif // GPT2_GPU_LAYERNORM_CUH

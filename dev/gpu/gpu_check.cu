// dev/gpu/gpu_check.cu: every GPU kernel (gpt2/gpu/) against its CPU reference (gpt2/cpu_layers.h;
// gpt2/kv_pages.h for generation's attention), the whole GPU model against train_cpu.c's, and the
// kernels' speed.
//
//   make gpu-checks && build/gpu_check          all checks, then timings at GPT-2 124M sizes
//   build/gpu_check --quick                     validation at small sizes only, no timing
//   build/gpu_check matmul attention            only these; names: copy (the device's copy
//                                               bandwidth, timing only) encoder layernorm matmul
//                                               attention gelu residual classifier clip adamw model
//                                               attention_paged (generation's, against the paged cache)
//                                               matmul_bf16 attention_bf16 attention_paged_bf16
//                                               adamw_bf16 model_bf16 (the bf16 path)
//                                               memory (d12's bytes and largest batch, per precision)
//   build/gpu_check roofline                    every kernel of a training step timed against its floor
//                                               (dev/gpu/roofline.h), bf16 and float32; only when named
//   build/gpu_check_cublas matmul matmul_bf16   the matmuls timed with cuBLAS too (USE_CUBLAS), to
//                                               compare with ours on the same shapes: matmul_bf16
//                                               times each bf16 product of GPT-2 124M (forward, dinp,
//                                               dweight) at B=8 and B=64, T=1024, on wgmma (Hopper;
//                                               tiles 128 and 256 wide), mma.sync and cuBLAS, and ends
//                                               with their table
//   build/gpu_check --device                    print the device and exit (1: there is none)
//   make gpu-emu && build/emu/gpu_check --quick the same checks on the CPU emulator (dev/emu/cuda_emu.h)
//
// Validation: fresh random inputs from a fixed seed; the CPU function (gpt2/cpu_layers.h, the
// same code train_cpu.c runs) on host copies; the GPU launcher on device copies whose
// outputs were first poisoned with NaN (outputs that accumulate start from the same random
// values on both sides instead); then every output element is compared:
//     |gpu - cpu| <= atol + rtol * |cpu|,  and NaN never passes.
// Each layer runs at odd sizes (partial tiles, rows that are not float4-aligned) and, without
// --quick, at GPT-2 124M's sizes (B=4, T=1024, C=768, NH=12). The tolerances, and why they are
// not zero: the GPU adds the same float32 numbers in another order (tiles, warp trees), and its
// expf/tanhf differ from glibc's by an ulp or two. A sum of K terms of size s can then differ by
// about eps * sqrt(K) * s (eps = 6e-8); the tolerances below allow 10-100 times that, far below
// what any indexing error produces (those are O(s)). Any mismatch: exit code 1.
// Timing: 3 warm-up runs, then 20 runs each timed with CUDA events, the median; the CPU function
// is timed the same way (one warm-up, 3 runs, median) for the speedup. Memory-bound kernels report
// GB/s (the bytes they must move at least) and % of the peak bandwidth; matmuls and attention
// TFLOP/s and % of the float32 peak (gpt2/gpu/cuda_utils.cuh: cuda_device_init).
//
// The whole model: the same initial weights and batch on the CPU and the GPU; logits, loss, all
// 16 parameter gradients, then the losses and gradient norms of 10 AdamW steps must agree.

#define TRAIN_CPU_NO_MAIN
#include "../../train_cpu.c"   // the CPU model: gpt2_forward, gpt2_backward, gpt2_update, ...
#define TRAIN_GPU_NO_MAIN
#include "../../train_gpu.cu"  // its GPU twin: gpt2_forward_gpu, ..., and every launcher
#include "roofline.h"           // the rows of a training step, with their FLOPs and bytes

// ---------- helpers ----------

#include "check.cuh"          // host_random, device_poisoned, compare, median_ms_gpu, ...

static int quick = 0;

// A device copy of x in the element type of the path checked (bf16 rounds x in place first, so
// that the CPU reads what the GPU reads), an output of that type poisoned with NaN, and a host
// copy in float32.
template <typename floatX> static floatX* to_device_as(float* x, size_t n);
template <> float* to_device_as<float>(float* x, size_t n) { return to_device(x, n); }
template <> bf16* to_device_as<bf16>(float* x, size_t n) { return to_device_bf16(x, n); }
template <typename floatX>
static floatX* device_poisoned_as(size_t n) {
    floatX* d;
    cuda_check(cudaMalloc((void**)&d, n * sizeof(floatX)));
    cuda_check(cudaMemset(d, 0xff, n * sizeof(floatX)));  // NaN in either type
    return d;
}
static float* to_host_as(const float* d, size_t n) { return to_host(d, n); }
static float* to_host_as(const bf16* d, size_t n) { return to_host_bf16(d, n); }

// Fails the check when a product meant to run split along k would not, or one meant to run
// unsplit would, so that a change of the plan cannot quietly leave a path untested. The split
// shapes have few tiles (2 to 4 of 64x64: split on any GPU of 3 SMs or more, the emulator says
// 132) and k of 3 x SPLITK_MIN_K or more; the unsplit ones k under 2 x SPLITK_MIN_K.
static void expect_split(const char* what, int slices, bool split) {
    if ((slices > 1) == split) return;
    printf("  FAIL %-34s runs in %d slices of k: this check is meant for the %s path\n", what, slices,
           split ? "split-K" : "unsplit");
    failures++;
}

// Median milliseconds of f() on the CPU: one warm-up run, then 3 timed runs.
template <typename F>
static double median_ms_cpu(F f) {
    const int runs = 3;
    f();
    double ms[runs];
    for (int i = 0; i < runs; i++) {
        double t0 = now_seconds();
        f();
        ms[i] = (now_seconds() - t0) * 1e3;
    }
    return median(ms, runs);
}

// One timing line: flops > 0 reports TFLOP/s, else bytes reports GB/s.
static void report(const char* what, double ms_gpu, double ms_cpu, double flops, double bytes) {
    if (flops > 0) {
        printf("  time %-26s GPU %8.3f ms %7.2f TFLOP/s (%4.1f%% of peak) | CPU %9.1f ms | speedup %6.0fx\n",
               what, ms_gpu, flops / ms_gpu / 1e9, 100.0 * flops / (ms_gpu * 1e-3) / cuda_device.peak_flops,
               ms_cpu, ms_cpu / ms_gpu);
    } else {
        printf("  time %-26s GPU %8.3f ms %7.1f GB/s    (%4.1f%% of peak) | CPU %9.1f ms | speedup %6.0fx\n",
               what, ms_gpu, bytes / ms_gpu / 1e6, 100.0 * bytes / (ms_gpu * 1e-3) / cuda_device.peak_bandwidth,
               ms_cpu, ms_cpu / ms_gpu);
    }
}

// Times the GPU and the CPU version of one operation and prints their line (report).
template <typename G, typename F>
static void time_both(const char* what, G gpu, F cpu, double flops, double bytes) {
    double g = median_ms_gpu(gpu);
    report(what, g, median_ms_cpu(cpu), flops, bytes);
}

// ---------- layers ----------

// The embeddings in either element type of the activations (wte and wpe stay float32): out is
// one addition, exact in float and off by its rounding in bf16; the gradients are float32 sums.
template <typename floatX>
static void check_encoder(int B, int T, int C, int V, int bench) {
    const int bf = sizeof(floatX) == 2;
    printf("encoder %s B=%d T=%d C=%d V=%d\n", bf ? "bf16" : "float", B, T, C, V);
    size_t BT = (size_t)B * T, BTC = BT * C;
    int* inp = host_tokens(BT, V < 1000 ? V : 1000);  // a small range: tokens repeat, as in text
    float* wte = host_random((size_t)V * C, -1, 1);
    float* wpe = host_random((size_t)T * C, -1, 1);
    float* out = host_zeros(BTC);
    int* d_inp = to_device_int(inp, BT);
    float *d_wte = to_device(wte, (size_t)V * C), *d_wpe = to_device(wpe, (size_t)T * C);
    floatX* d_out = device_poisoned_as<floatX>(BTC);
    encoder_forward(out, inp, wte, wpe, B, T, C);
    encoder_forward_gpu(d_out, d_inp, d_wte, d_wpe, B, T, C);
    float* got = to_host_as(d_out, BTC);
    compare_host("encoder_forward out", got, out, BTC, 0.0f, bf ? BF16_RTOL : 0.0f, NULL);  // one addition: exact
    free(got);

    float* dout = host_random(BTC, -1, 1);
    float* dwte = host_random((size_t)V * C, -1, 1);
    float* dwpe = host_random((size_t)T * C, -1, 1);
    floatX* d_dout = to_device_as<floatX>(dout, BTC);
    float *d_dwte = to_device(dwte, (size_t)V * C), *d_dwpe = to_device(dwpe, (size_t)T * C);
    encoder_backward(dwte, dwpe, dout, inp, B, T, C);
    encoder_backward_gpu(d_dwte, d_dwpe, d_dout, d_inp, B, T, C);
    compare("encoder_backward dwte", d_dwte, dwte, (size_t)V * C, 1e-5f, 1e-5f);
    compare("encoder_backward dwpe", d_dwpe, dwpe, (size_t)T * C, 1e-5f, 1e-5f);
    if (bench) {
        double a = sizeof(floatX);
        time_both("encoder_forward", [&] { encoder_forward_gpu(d_out, d_inp, d_wte, d_wpe, B, T, C); },
                  [&] { encoder_forward(out, inp, wte, wpe, B, T, C); }, 0, BTC * (8 + a));
        time_both("encoder_backward", [&] { encoder_backward_gpu(d_dwte, d_dwpe, d_dout, d_inp, B, T, C); },
                  [&] { encoder_backward(dwte, dwpe, dout, inp, B, T, C); }, 0, BTC * (8 + a));
    }
    free(inp); free(wte); free(wpe); free(out); free(dout); free(dwte); free(dwpe);
    cuda_check(cudaFree(d_inp)); cuda_check(cudaFree(d_wte)); cuda_check(cudaFree(d_wpe)); cuda_check(cudaFree(d_out));
    cuda_check(cudaFree(d_dout)); cuda_check(cudaFree(d_dwte)); cuda_check(cudaFree(d_dwpe));
}

// Layernorm in either element type: the GPU reads what the CPU reads (bf16 inputs rounded on the
// host first); a bf16 output may differ by its rounding too, BF16_RTOL of it more. dinp, dweight and dbias
// start from random values (the launcher adds into them), and a second run from the same start
// must give the same bits.
template <typename floatX>
static void check_layernorm(int B, int T, int C, int bench) {
    const int bf = sizeof(floatX) == 2;
    const float rtol = 1e-5f + (bf ? BF16_RTOL : 0.0f), dinp_rtol = 1e-4f + (bf ? BF16_RTOL : 0.0f);
    printf("layernorm %s B=%d T=%d C=%d\n", bf ? "bf16" : "float", B, T, C);
    size_t BT = (size_t)B * T, BTC = BT * C;
    float* inp = host_random(BTC, -2, 3);  // mean 0.5: the mean subtraction matters
    float* w = host_random(C, 0.5f, 1.5f);
    float* b = host_random(C, -0.5f, 0.5f);
    float *out = host_zeros(BTC), *mean = host_zeros(BT), *rstd = host_zeros(BT);
    floatX* d_inp = to_device_as<floatX>(inp, BTC);
    float *d_w = to_device(w, C), *d_b = to_device(b, C);
    floatX* d_out = device_poisoned_as<floatX>(BTC);
    float *d_mean = device_poisoned(BT), *d_rstd = device_poisoned(BT);
    layernorm_forward(out, mean, rstd, inp, w, b, B, T, C);
    layernorm_forward_gpu(d_out, d_mean, d_rstd, d_inp, d_w, d_b, B, T, C);
    float* got = to_host_as(d_out, BTC);
    compare_host("layernorm_forward out", got, out, BTC, 1e-5f, rtol, NULL);
    free(got);
    compare("layernorm_forward mean", d_mean, mean, BT, 1e-6f, 1e-5f);
    compare("layernorm_forward rstd", d_rstd, rstd, BT, 1e-6f, 1e-5f);

    float* dout = host_random(BTC, -1, 1);
    float *dinp = host_random(BTC, -1, 1), *dw = host_random(C, -1, 1), *db = host_random(C, -1, 1);
    floatX *d_dout = to_device_as<floatX>(dout, BTC), *d_dinp = to_device_as<floatX>(dinp, BTC);
    float *d_dw = to_device(dw, C), *d_db = to_device(db, C);
    floatX* d_dinp0 = to_device_as<floatX>(dinp, BTC);  // the start, for the second run
    float *d_dw0 = to_device(dw, C), *d_db0 = to_device(db, C);
    layernorm_backward(dinp, dw, db, dout, inp, w, mean, rstd, B, T, C);
    layernorm_backward_gpu(d_dinp, d_dw, d_db, d_dout, d_inp, d_w, d_mean, d_rstd, B, T, C);
    got = to_host_as(d_dinp, BTC);
    compare_host("layernorm_backward dinp", got, dinp, BTC, 1e-5f, dinp_rtol, NULL);
    free(got);
    float sum_atol = 1e-6f * sqrtf((float)BT) * 10;  // sums over B*T rows
    compare("layernorm_backward dweight", d_dw, dw, C, sum_atol, 1e-4f);
    compare("layernorm_backward dbias", d_db, db, C, sum_atol, 1e-4f);
    layernorm_backward_gpu(d_dinp0, d_dw0, d_db0, d_dout, d_inp, d_w, d_mean, d_rstd, B, T, C);
    int same = 1;
    for (int k = 0; k < 3; k++) {
        const void *x = k == 0 ? (const void*)d_dinp : k == 1 ? (const void*)d_dw : (const void*)d_db;
        const void *y = k == 0 ? (const void*)d_dinp0 : k == 1 ? (const void*)d_dw0 : (const void*)d_db0;
        size_t bytes = k == 0 ? BTC * sizeof(floatX) : C * sizeof(float);
        char *hx = (char*)malloc_check(bytes), *hy = (char*)malloc_check(bytes);
        cuda_check(cudaMemcpy(hx, x, bytes, cudaMemcpyDeviceToHost));
        cuda_check(cudaMemcpy(hy, y, bytes, cudaMemcpyDeviceToHost));
        same = same && memcmp(hx, hy, bytes) == 0;
        free(hx); free(hy);
    }
    printf("  %s %-34s %s\n", same ? "ok  " : "FAIL", "layernorm_backward twice", same ? "the same bits" : "different bits");
    if (!same) failures++;
    if (bench) {
        double a = sizeof(floatX);
        time_both("layernorm_forward", [&] { layernorm_forward_gpu(d_out, d_mean, d_rstd, d_inp, d_w, d_b, B, T, C); },
                  [&] { layernorm_forward(out, mean, rstd, inp, w, b, B, T, C); }, 0, 2.0 * BTC * a);
        time_both("layernorm_backward", [&] { layernorm_backward_gpu(d_dinp, d_dw, d_db, d_dout, d_inp, d_w, d_mean, d_rstd, B, T, C); },
                  [&] { layernorm_backward(dinp, dw, db, dout, inp, w, mean, rstd, B, T, C); }, 0, 4.0 * BTC * a);
    }
    free(inp); free(w); free(b); free(out); free(mean); free(rstd); free(dout); free(dinp); free(dw); free(db);
    cuda_check(cudaFree(d_inp)); cuda_check(cudaFree(d_w)); cuda_check(cudaFree(d_b)); cuda_check(cudaFree(d_out));
    cuda_check(cudaFree(d_mean)); cuda_check(cudaFree(d_rstd)); cuda_check(cudaFree(d_dout)); cuda_check(cudaFree(d_dinp));
    cuda_check(cudaFree(d_dw)); cuda_check(cudaFree(d_db)); cuda_check(cudaFree(d_dinp0)); cuda_check(cudaFree(d_dw0));
    cuda_check(cudaFree(d_db0));
}

// The shapes of layernorm's paths (gpt2/gpu/layernorm.cuh): rows in registers (C a whole number
// of 16-byte packs, at most LAYERNORM_MAX_C) or strided (any other C), in both element types.
static void check_layernorm_cases(void) {
    const int shapes[][3] = {
        {3, 37, 67},    // odd C: strided; 111 rows, no multiple of a block's 8
        {2, 37, 768},   // GPT-2's C: 24 values a lane (float 6 packs, bf16 3)
        {1, 7, 100},    // float in registers, 25 packs: lanes 25-31 idle; bf16 strided (100 % 8)
        {1, 9, 264},    // 16 values a lane, some lanes with one pack more than others
        {1, 9, 1024},   // the longest row in registers: 32 a lane
        {1, 5, 1032},   // past it: strided
        {3, 700, 32},   // 2100 rows: more than the backward's 256 blocks of 8 warps, rows in turn
    };
    for (const auto& s : shapes) {
        check_layernorm<float>(s[0], s[1], s[2], 0);
        check_layernorm<bf16>(s[0], s[1], s[2], 0);
    }
}

// The slices gemm_fp32 cuts a single product of this shape into.
static int fp32_slices(int M, int N, int K) {
    int slice_k;
    return gemm_fp32_slices(gemm_fp32_args(NULL, 0, NULL, 0, NULL, 0, M, N, K), 1, &slice_k);
}

static void check_matmul(int B, int T, int C, int OC, int use_bias, int bench) {
    size_t BT = (size_t)B * T;
    // the products' slices of k (split-K): forward, dinp, dweight
    int s_out = fp32_slices((int)BT, OC, C), s_dinp = fp32_slices((int)BT, C, OC), s_dw = fp32_slices(OC, C, (int)BT);
    printf("matmul B=%d T=%d C=%d OC=%d%s; split-K slices: out %d, dinp %d, dweight %d\n", B, T, C, OC,
           use_bias ? "" : " (no bias)", s_out, s_dinp, s_dw);
    float* inp = host_random(BT * C, -1, 1);
    float* w = host_random((size_t)OC * C, -1, 1);
    float* bias = use_bias ? host_random(OC, -1, 1) : NULL;
    float* out = host_zeros(BT * OC);
    float *d_inp = to_device(inp, BT * C), *d_w = to_device(w, (size_t)OC * C);
    float* d_bias = use_bias ? to_device(bias, OC) : NULL;
    float* d_out = device_poisoned(BT * OC);
    matmul_forward(out, inp, w, bias, B, T, C, OC);
    matmul_forward_gpu(d_out, d_inp, d_w, d_bias, B, T, C, OC);
    compare("matmul_forward out", d_out, out, BT * OC, fp32_sum_atol(C), 1e-5f);

    float* dout = host_random(BT * OC, -1, 1);
    float *dinp = host_random(BT * C, -1, 1), *dw = host_random((size_t)OC * C, -1, 1);
    float* db = use_bias ? host_random(OC, -1, 1) : NULL;
    float *d_dout = to_device(dout, BT * OC), *d_dinp = to_device(dinp, BT * C), *d_dw = to_device(dw, (size_t)OC * C);
    float* d_db = use_bias ? to_device(db, OC) : NULL;
    matmul_backward(dinp, dw, db, dout, inp, w, B, T, C, OC);
    matmul_backward_gpu(d_dinp, d_dw, d_db, d_dout, d_inp, d_w, B, T, C, OC);
    compare("matmul_backward dinp", d_dinp, dinp, BT * C, fp32_sum_atol(OC), 1e-5f);
    compare("matmul_backward dweight", d_dw, dw, (size_t)OC * C, fp32_sum_atol(BT), 1e-5f);
    if (use_bias) compare("matmul_backward dbias", d_db, db, OC, fp32_sum_atol(BT), 1e-5f);
    if (bench) {
        double flops = 2.0 * BT * C * OC;
        time_both("matmul_forward", [&] { matmul_forward_gpu(d_out, d_inp, d_w, d_bias, B, T, C, OC); },
                  [&] { matmul_forward(out, inp, w, bias, B, T, C, OC); }, flops, 0);
        time_both("matmul_backward", [&] { matmul_backward_gpu(d_dinp, d_dw, d_db, d_dout, d_inp, d_w, B, T, C, OC); },
                  [&] { matmul_backward(dinp, dw, db, dout, inp, w, B, T, C, OC); }, 2 * flops, 0);
    }
    free(inp); free(w); free(bias); free(out); free(dout); free(dinp); free(dw); free(db);
    cuda_check(cudaFree(d_inp)); cuda_check(cudaFree(d_w)); cuda_check(cudaFree(d_bias)); cuda_check(cudaFree(d_out));
    cuda_check(cudaFree(d_dout)); cuda_check(cudaFree(d_dinp)); cuda_check(cudaFree(d_dw)); cuda_check(cudaFree(d_db));
}

// One product C = alpha op(A) op(B) [+ bias] [+ C] through gemm_fp32 against a double-precision
// reference, for the layouts and the alpha that the linear layers (check_matmul) do not use;
// twice when it runs split along k, which must give the same bits. Tolerance as check_matmul's.
static void check_gemm_fp32(int M, int N, int K, bool ta, bool tb, float alpha, int bias_and_accumulate) {
    char what[96];
    int slices = fp32_slices(M, N, K);
    snprintf(what, sizeof(what), "sgemm %dx%dx%d %s%s a=%g%s", M, N, K, ta ? "T" : "N", tb ? "T" : "N", alpha,
             bias_and_accumulate ? " bias +=" : "");
    if (slices > 1) snprintf(what + strlen(what), sizeof(what) - strlen(what), " split %d", slices);
    size_t MN = (size_t)M * N;
    float *a = host_random((size_t)M * K, -1, 1), *b = host_random((size_t)K * N, -1, 1);
    float *bias = host_random(N, -1, 1), *c = host_random(MN, -1, 1);
    long long lda = ta ? M : K, ldb = tb ? K : N;
    float *d_a = to_device(a, (size_t)M * K), *d_b = to_device(b, (size_t)K * N), *d_bias = to_device(bias, N);
    float *d_c = bias_and_accumulate ? to_device(c, MN) : device_poisoned(MN);
    float* expect = (float*)malloc_check(MN * sizeof(float));
    for (int m = 0; m < M; m++)
        for (int n = 0; n < N; n++) {
            double sum = 0.0;
            for (int k = 0; k < K; k++) {
                sum += (double)a[ta ? (size_t)k * lda + m : (size_t)m * lda + k] *
                       b[tb ? (size_t)n * ldb + k : (size_t)k * ldb + n];
            }
            double v = alpha * sum;
            if (bias_and_accumulate) v += (double)bias[n] + c[(size_t)m * N + n];
            expect[(size_t)m * N + n] = (float)v;
        }
    GemmFp32Args g = gemm_fp32_args(d_a, lda, d_b, ldb, d_c, N, M, N, K);
    g.alpha = alpha;
    if (bias_and_accumulate) {
        g.bias = d_bias;
        g.accumulate = 1;
    }
    gemm_fp32(g, ta, tb, 1);
    float* got = to_host(d_c, MN);
    compare_host(what, got, expect, MN, fp32_sum_atol(K), 1e-5f, NULL);
    if (slices > 1) {
        float* d_c2 = bias_and_accumulate ? to_device(c, MN) : device_poisoned(MN);
        g.C = d_c2;
        gemm_fp32(g, ta, tb, 1);
        float* got2 = to_host(d_c2, MN);
        int same = memcmp(got, got2, MN * sizeof(float)) == 0;
        printf("  %s %-34s %s\n", same ? "ok  " : "FAIL", "the same again", same ? "the same bits" : "different bits");
        if (!same) failures++;
        free(got2);
        cuda_check(cudaFree(d_c2));
    }
    free(a); free(b); free(bias); free(c); free(expect); free(got);
    cuda_check(cudaFree(d_a)); cuda_check(cudaFree(d_b)); cuda_check(cudaFree(d_bias)); cuda_check(cudaFree(d_c));
}

static void check_attention(int B, int T, int C, int NH, int bench) {
    printf("attention B=%d T=%d C=%d NH=%d\n", B, T, C, NH);
    size_t BT = (size_t)B * T, att_n = (size_t)B * NH * T * T;
    int hs = C / NH;
    float* inp = host_random(BT * 3 * C, -1, 1);
    float *out = host_zeros(BT * C), *preatt = host_zeros(att_n), *att = host_zeros(att_n);
    float* d_inp = to_device(inp, BT * 3 * C);
    float *d_out = device_poisoned(BT * C), *d_preatt = device_poisoned(att_n), *d_att = device_poisoned(att_n);
    attention_forward(out, preatt, att, inp, B, T, C, NH);
    attention_forward_gpu(d_out, d_preatt, d_att, d_inp, B, T, C, NH);
    // preatt is only defined on the causal part (t2 <= t): the GPU leaves the rest unwritten
    unsigned char* causal = (unsigned char*)malloc_check(att_n);
    for (size_t i = 0; i < att_n; i++) causal[i] = (i % T) <= ((i / T) % T);
    float* h_preatt = to_host(d_preatt, att_n);
    compare_host("attention_forward preatt (t2<=t)", h_preatt, preatt, att_n, 1e-5f * sqrtf((float)hs), 1e-5f, causal);
    compare("attention_forward att", d_att, att, att_n, 1e-6f, 1e-4f);
    compare("attention_forward out", d_out, out, BT * C, 1e-5f, 1e-4f);

    float* dout = host_random(BT * C, -1, 1);
    float* dinp = host_random(BT * 3 * C, -1, 1);
    float *dpreatt = host_zeros(att_n), *datt = host_zeros(att_n);
    float *d_dout = to_device(dout, BT * C), *d_dinp = to_device(dinp, BT * 3 * C);
    float *d_dpreatt = device_poisoned(att_n), *d_datt = device_poisoned(att_n);  // scratch: never read unwritten
    attention_backward(dinp, dpreatt, datt, dout, inp, att, B, T, C, NH);
    attention_backward_gpu(d_dinp, d_dpreatt, d_datt, d_dout, d_inp, d_att, B, T, C, NH);
    compare("attention_backward dinp (dqkv)", d_dinp, dinp, BT * 3 * C, 1e-5f * sqrtf((float)T), 1e-4f);
    if (bench) {
        // causal: QK^T and att V each 2*hs flops per (t, t2 <= t) pair, ~T^2/2 pairs per (b, h)
        double flops = 2.0 * 2.0 * hs * (double)B * NH * T * (T + 1) / 2.0;
        time_both("attention_forward", [&] { attention_forward_gpu(d_out, d_preatt, d_att, d_inp, B, T, C, NH); },
                  [&] { attention_forward(out, preatt, att, inp, B, T, C, NH); }, flops, 0);
        time_both("attention_backward", [&] { attention_backward_gpu(d_dinp, d_dpreatt, d_datt, d_dout, d_inp, d_att, B, T, C, NH); },
                  [&] { attention_backward(dinp, dpreatt, datt, dout, inp, att, B, T, C, NH); }, 2 * flops, 0);
    }
    free(inp); free(out); free(preatt); free(att); free(causal); free(h_preatt); free(dout); free(dinp);
    free(dpreatt); free(datt);
    cuda_check(cudaFree(d_inp)); cuda_check(cudaFree(d_out)); cuda_check(cudaFree(d_preatt)); cuda_check(cudaFree(d_att));
    cuda_check(cudaFree(d_dout)); cuda_check(cudaFree(d_dinp)); cuda_check(cudaFree(d_dpreatt)); cuda_check(cudaFree(d_datt));
}

// The device's memory bandwidth as a program can use it: a device-to-device copy of 1 GiB,
// counting the bytes read and the bytes written, against the peak from the memory clock. The
// memory-bound kernels' GB/s are best read against this figure.
static void time_copy(void) {
    size_t n = (size_t)1 << 28;  // floats: 1 GiB
    float* a = device_poisoned(n);
    float* b = device_poisoned(n);
    double ms = median_ms_gpu([&] { cuda_check(cudaMemcpy(b, a, n * sizeof(float), cudaMemcpyDeviceToDevice)); });
    double bytes = 2.0 * n * sizeof(float);
    printf("  time %-26s GPU %8.3f ms %7.1f GB/s    (%4.1f%% of peak) | the measured bandwidth limit\n",
           "device copy 1 GiB", ms, bytes / ms / 1e6, 100.0 * bytes / (ms * 1e-3) / cuda_device.peak_bandwidth);
    cuda_check(cudaFree(a));
    cuda_check(cudaFree(b));
}

static void check_gelu(int N, int bench) {
    printf("gelu N=%d\n", N);
    float* inp = host_random(N, -5, 5);
    float* out = host_zeros(N);
    float* d_inp = to_device(inp, N);
    float* d_out = device_poisoned(N);
    gelu_forward(out, inp, N);
    gelu_forward_gpu(d_out, d_inp, N);
    compare("gelu_forward out", d_out, out, N, 1e-6f, 1e-5f);  // tanhf: a few ulps apart
    float *dout = host_random(N, -1, 1), *dinp = host_random(N, -1, 1);
    float *d_dout = to_device(dout, N), *d_dinp = to_device(dinp, N);
    gelu_backward(dinp, inp, dout, N);
    gelu_backward_gpu(d_dinp, d_inp, d_dout, N);
    compare("gelu_backward dinp", d_dinp, dinp, N, 1e-6f, 1e-5f);
    if (bench) {
        time_both("gelu_forward", [&] { gelu_forward_gpu(d_out, d_inp, N); },
                  [&] { gelu_forward(out, inp, N); }, 0, 2.0 * N * 4);
        time_both("gelu_backward", [&] { gelu_backward_gpu(d_dinp, d_inp, d_dout, N); },
                  [&] { gelu_backward(dinp, inp, dout, N); }, 0, 4.0 * N * 4);
    }
    free(inp); free(out); free(dout); free(dinp);
    cuda_check(cudaFree(d_inp)); cuda_check(cudaFree(d_out)); cuda_check(cudaFree(d_dout)); cuda_check(cudaFree(d_dinp));
}

static void check_residual(int N, int bench) {
    printf("residual N=%d\n", N);
    float *a = host_random(N, -1, 1), *b = host_random(N, -1, 1), *out = host_zeros(N);
    float *d_a = to_device(a, N), *d_b = to_device(b, N), *d_out = device_poisoned(N);
    residual_forward(out, a, b, N);
    residual_forward_gpu(d_out, d_a, d_b, N);
    compare("residual_forward out", d_out, out, N, 0.0f, 0.0f);
    float *dout = host_random(N, -1, 1), *da = host_random(N, -1, 1), *db = host_random(N, -1, 1);
    float *d_dout = to_device(dout, N), *d_da = to_device(da, N), *d_db = to_device(db, N);
    residual_backward(da, db, dout, N);
    residual_backward_gpu(d_da, d_db, d_dout, N);
    compare("residual_backward dinp1", d_da, da, N, 0.0f, 0.0f);
    compare("residual_backward dinp2", d_db, db, N, 0.0f, 0.0f);
    if (bench) {
        time_both("residual_forward", [&] { residual_forward_gpu(d_out, d_a, d_b, N); },
                  [&] { residual_forward(out, a, b, N); }, 0, 3.0 * N * 4);
        time_both("residual_backward", [&] { residual_backward_gpu(d_da, d_db, d_dout, N); },
                  [&] { residual_backward(da, db, dout, N); }, 0, 5.0 * N * 4);
    }
    free(a); free(b); free(out); free(dout); free(da); free(db);
    cuda_check(cudaFree(d_a)); cuda_check(cudaFree(d_b)); cuda_check(cudaFree(d_out));
    cuda_check(cudaFree(d_dout)); cuda_check(cudaFree(d_da)); cuda_check(cudaFree(d_db));
}

// The fused classifier against the CPU's three functions: softmax_forward, crossentropy_forward
// and crossentropy_softmax_backward with dlosses = 1/(B*T), the gradient of the mean loss; in
// either element type (bf16 logits rounded on the host first, dlogits rounded: BF16_RTOL more).
template <typename floatX>
static void check_classifier(int B, int T, int V, int Vp, float lo, float hi, int bench) {
    const int bf = sizeof(floatX) == 2;
    printf("classifier %s B=%d T=%d V=%d Vp=%d, logits in [%g, %g)\n", bf ? "bf16" : "float", B, T, V, Vp, lo, hi);
    size_t BT = (size_t)B * T, n = BT * Vp;
    float* logits = host_random(n, lo, hi);  // padding columns hold junk too: it must be ignored
    int* targets = host_tokens(BT, V);
    float *probs = host_zeros(n), *losses = host_zeros(BT), *dlogits = host_zeros(n), *dlosses = host_zeros(BT);
    for (size_t i = 0; i < BT; i++) dlosses[i] = 1.0f / (float)BT;
    floatX* d_logits = to_device_as<floatX>(logits, n);
    int* d_targets = to_device_int(targets, BT);
    float* d_losses = device_poisoned(BT);
    floatX* d_dlogits = device_poisoned_as<floatX>(n);
    softmax_forward(probs, logits, B, T, V, Vp);
    crossentropy_forward(losses, probs, targets, B, T, Vp);
    crossentropy_softmax_backward(dlogits, dlosses, probs, targets, B, T, V, Vp);
    fused_classifier_gpu(d_dlogits, d_losses, d_logits, d_targets, B, T, V, Vp);
    compare("fused_classifier losses", d_losses, losses, BT, 1e-5f, 1e-5f);
    float* separate = to_host_as(d_dlogits, n);
    compare_host("fused_classifier dlogits", separate, dlogits, n, 1e-11f, 1e-4f + (bf ? BF16_RTOL : 0.0f),
                 NULL);  // entries ~ p/(B*T)
    // in place, as train_gpu runs it (each slot's logits become their gradient): the same bits
    floatX* d_inplace = to_device_as<floatX>(logits, n);
    fused_classifier_gpu(d_inplace, d_losses, d_inplace, d_targets, B, T, V, Vp);
    float* inplace = to_host_as(d_inplace, n);
    compare_host("fused_classifier dlogits in place", inplace, separate, n, 0.0f, 0.0f, NULL);
    free(separate);
    free(inplace);
    cuda_check(cudaFree(d_inplace));
    if (bench) {
        time_both("fused_classifier", [&] { fused_classifier_gpu(d_dlogits, d_losses, d_logits, d_targets, B, T, V, Vp); },
                  [&] {
                      softmax_forward(probs, logits, B, T, V, Vp);
                      crossentropy_forward(losses, probs, targets, B, T, Vp);
                      crossentropy_softmax_backward(dlogits, dlosses, probs, targets, B, T, V, Vp);
                  }, 0, 2.0 * n * sizeof(floatX));
    }
    free(logits); free(targets); free(probs); free(losses); free(dlogits); free(dlosses);
    cuda_check(cudaFree(d_logits)); cuda_check(cudaFree(d_targets)); cuda_check(cudaFree(d_losses));
    cuda_check(cudaFree(d_dlogits));
}

// The classifier's paths (gpt2/gpu/classifier.cuh): 16-byte packs (Vp a whole number of them) or
// one value at a time, in both element types.
static void check_classifier_cases(void) {
    struct { int B, T, V, Vp; float lo, hi; } shapes[] = {
        {3, 7, 1000, 1024, -4, 4},      // packs; the last ones all padding
        {2, 3, 1000, 1001, -4, 4},      // odd Vp: one value at a time
        {1, 3, 1, 8, -4, 4},            // one logit: most threads hold none
        {1, 2, 50257, 50304, -10, 10},  // GPT-2's: one real logit in the last pack that has any
        {2, 2, 300, 304, 100, 110},     // large logits: exp(x) overflows without the max
    };
    for (const auto& s : shapes) {
        check_classifier<float>(s.B, s.T, s.V, s.Vp, s.lo, s.hi, 0);
        check_classifier<bf16>(s.B, s.T, s.V, s.Vp, s.lo, s.hi, 0);
    }
}

// The global norm and the clip factor after a scale (1/parts: gradient accumulation), as the
// trainers' loops compute them: train_gpu.cu's gpt2_grad_norm_gpu (on the GPU, into the step's
// scalars) against train_cpu.c's gpt2_grad_norm and clip_factor, on a model of one tensor whose
// gradients start `offset` floats past a 16-byte boundary (the norm's vector loads then start
// later); a non-finite gradient must clear `finite`, which stops AdamW.
static void check_clip(size_t n, size_t offset, int parts, float max_norm, int bench) {
    printf("clip n=%zu offset=%zu parts=%d max_norm=%g\n", n, offset, parts, max_norm);
    float grad_scale = 1.0f / (float)parts;
    float* grads = host_random(n, -0.01f, 0.01f);
    GPT2 cpu, gpu;
    memset(&cpu, 0, sizeof(cpu));
    cpu.num_parameters = cpu.num_padded = cpu.opt_count = cpu.param_sizes[0] = n;
    cpu.shard.tp = cpu.shard.embed = cpu.shard.head = 1;
    cpu.grads_memory = grads;
    gpu = cpu;
    float* d_grads = device_poisoned(n + offset);
    gpu.grads_memory = d_grads + offset;
    cuda_check(cudaMemcpy(gpu.grads_memory, grads, n * sizeof(float), cudaMemcpyHostToDevice));
    float norm = gpt2_grad_norm(&cpu, grad_scale), factor = clip_factor(norm, grad_scale, max_norm);
    gpt2_grad_norm_gpu(&gpu, parts, max_norm);
    StepScalars s = step_scalars_to_host(&gpu);
    compare_scalar("grad_norm norm", s.norm, norm, 0.0, 1e-6);
    compare_scalar("grad_norm clip factor", s.grad_factor, factor, 0.0, 1e-6);
    check_flag("grad_norm finite", s.finite == 1);
    float inf = INFINITY;
    cuda_check(cudaMemcpy(gpu.grads_memory + n / 2, &inf, sizeof(float), cudaMemcpyHostToDevice));
    gpt2_grad_norm_gpu(&gpu, parts, max_norm);
    check_flag("grad_norm not finite with an infinite gradient", step_scalars_to_host(&gpu).finite == 0);
    if (bench) {
        cuda_check(cudaMemcpy(gpu.grads_memory, grads, n * sizeof(float), cudaMemcpyHostToDevice));
        time_both("global norm", [&] { gpt2_grad_norm_gpu(&gpu, 1, 1.0f); },
                  [&] { gpt2_grad_norm(&cpu, 1.0f); }, 0, 1.0 * n * 4);
    }
    free(grads);
    cuda_check(cudaFree(d_grads));
    cuda_check(cudaFree(gpu.step_gpu));
}

// The norm over several ranges of the gradients (what -tp, -pp and ZeRO-1 leave a process: some
// tensors, or part of them), as train_cpu adds them: each range's sum of squares, then the ranges
// in order; against train_cpu.c's sum_of_squares on the same ranges.
static void check_norm_ranges(void) {
    size_t n = 100003, offset[3] = {0, 5003, 60001}, count[3] = {1000, 40000, 40002};
    printf("norm over 3 ranges of %zu gradients\n", n);
    float* grads = host_random(n, -0.01f, 0.01f);
    GPT2 gpu;
    memset(&gpu, 0, sizeof(gpu));
    float* d_grads = to_device(grads, n);
    double squares = 0.0;
    for (int r = 0; r < 3; r++) squares += sum_of_squares(grads + offset[r], count[r]);
    float norm = (float)(0.5f * sqrt(squares));
    step_scalars_of_gpu(&gpu, d_grads, offset, count, 3, 0.5f, 1.0f, 2);
    StepScalars s = step_scalars_to_host(&gpu);
    compare_scalar("norm ranges: sum of squares", s.squares[NORM_RANGES], squares, 0.0, 1e-6);
    compare_scalar("norm ranges: norm", s.norm, norm, 0.0, 1e-6);
    free(grads);
    cuda_check(cudaFree(d_grads));
    cuda_check(cudaFree(gpu.step_gpu));
}

// A small model shape for the optimizer and whole-model checks: V=1000 < Vp=1024 keeps padding.
static GPT2Config tiny_config(void) {
    return gpt2_config(128, 1000, 2, 2, 64, 1024);  // maxT V L NH C Vp
}

// The start of an AdamW check: a fresh model on the CPU with random gradients and moments (v
// positive), whose parameters the caller copies to a GPU model; then those gradients and moments
// into the GPU model.
static void adamw_case(GPT2* cpu, GPT2Config config, const char* what) {
    printf("%s L=%d C=%d V=%d\n", what, config.num_layers, config.channels, config.vocab_size);
    gpt2_build_fresh(cpu, config, 7);
    size_t n = cpu->num_parameters;
    cpu->grads_memory = host_random(n, -0.1f, 0.1f);
    cpu->m_memory = host_random(n, -0.01f, 0.01f);
    cpu->v_memory = host_random(n, 0.0f, 1e-4f);
}
static void adamw_state_to_gpu(GPT2* gpu, const GPT2* cpu) {
    size_t bytes = cpu->num_parameters * sizeof(float);
    cuda_check(cudaMemcpy(gpu->grads_memory, cpu->grads_memory, bytes, cudaMemcpyHostToDevice));
    cuda_check(cudaMemcpy(gpu->m_memory, cpu->m_memory, bytes, cudaMemcpyHostToDevice));
    cuda_check(cudaMemcpy(gpu->v_memory, cpu->v_memory, bytes, cudaMemcpyHostToDevice));
}

// The step's scalars AdamW reads (gpt2/gpu/optimizer.cuh), set from the host: its clip factor
// and whether to update at all.
static void set_step_scalars(GPT2* gpu, float grad_factor, int finite) {
    StepScalars s = step_scalars_to_host(gpu);
    s.grad_factor = grad_factor;
    s.finite = finite;
    step_scalars_to_gpu(gpu, &s);
}

// AdamW against gpt2_update, with weight decay, so that the decay grouping is checked too, and
// a clip factor; then a step whose loss or norm was not finite, which must change nothing.
static void check_adamw(GPT2Config config, int bench) {
    GPT2 cpu, gpu;
    adamw_case(&cpu, config, "adamw");
    size_t n = cpu.num_parameters;
    gpt2_build_gpu(&gpu, &cpu, 1, 1);
    adamw_state_to_gpu(&gpu, &cpu);
    gpt2_update(&cpu, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 3, 0.37f);
    set_step_scalars(&gpu, 0.37f, 1);
    gpt2_update_gpu(&gpu, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 3);
    compare("adamw params", gpu.params_memory, cpu.params_memory, n, 1e-7f, 1e-6f);
    compare("adamw m", gpu.m_memory, cpu.m_memory, n, 1e-9f, 1e-6f);
    compare("adamw v", gpu.v_memory, cpu.v_memory, n, 1e-12f, 1e-6f);
    set_step_scalars(&gpu, 1.0f, 0);
    gpt2_update_gpu(&gpu, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 4);
    compare("adamw skipped: params", gpu.params_memory, cpu.params_memory, n, 1e-7f, 1e-6f);
    compare("adamw skipped: m", gpu.m_memory, cpu.m_memory, n, 1e-9f, 1e-6f);
    set_step_scalars(&gpu, 1.0f, 1);
    if (bench) {
        time_both("adamw", [&] { gpt2_update_gpu(&gpu, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 3); },
                  [&] { gpt2_update(&cpu, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 3, 1.0f); }, 0, 7.0 * n * 4);
    }
    gpt2_free_gpu(&gpu);
    gpt2_free(&cpu);
}

// ---------- the whole model ----------

// Compares the 16 gradient tensors, each with atol relative to its own largest entry: a
// gradient's small entries are differences of larger terms and carry their absolute error.
static void compare_grads(GPT2* gpu, GPT2* cpu, float rel_atol, float rtol) {
    float* g = to_host(gpu->grads_memory, gpu->num_parameters);
    size_t offset = 0;
    for (int k = 0; k < NUM_PARAMETER_TENSORS; k++) {
        size_t n = cpu->param_sizes[k];
        float maxabs = 0.0f;
        for (size_t i = 0; i < n; i++) maxabs = fmaxf(maxabs, fabsf(cpu->grads_memory[offset + i]));
        char what[64];
        snprintf(what, sizeof(what), "grad %s", PARAMETERS[k].name);
        compare_host(what, g + offset, cpu->grads_memory + offset, n, rel_atol * maxabs, rtol, NULL);
        offset += n;
    }
    free(g);
}

// The start of a whole-model check: a fresh model on the CPU, whose weights the caller copies to
// the GPU, and a random batch of B x T inputs and targets.
static void model_case(GPT2* cpu, GPT2Config config, int B, int T, int** inputs, int** targets) {
    gpt2_build_fresh(cpu, config, 42);
    // the batch from a seed of its own, so that `gpu_check model` draws the batch a full run does
    uint64_t saved = rng_state;
    rng_state = 42;
    *inputs = host_tokens((size_t)B * T, config.vocab_size);
    *targets = host_tokens((size_t)B * T, config.vocab_size);
    rng_state = saved;
}

// The same weights and batch on both: logits, loss, every gradient, then 10 AdamW steps whose
// losses and gradient norms must agree. Tolerances (float32 through a whole network, sums in a
// different order at every layer): logits 1e-4 + 1e-4 |x|; loss 1e-5 relative; gradients
// 1e-3 of the tensor's largest entry + 1e-2 relative; step losses 1e-4 and gradient norms 1e-3
// relative (the optimizer amplifies the first differences a little each step).
// The steps' learning rate is 1e-4 (MODEL_STEPS_LR). At 1e-3 GPT-2 124M's steps on one random
// batch are chaotic (the gradient norm jumps from 2 to 25 and back, the loss rises and falls),
// and AdamW's first updates, about lr times the sign of each gradient entry, turn the rounding of
// entries near zero into whole-lr differences: two correct CPU builds that sum in different
// orders ended 10 steps 1.4e-3 apart in the gradient norm (an H200 failed this check on that
// alone). At 1e-4 the same pairs of builds, over 4 batches, stay within 3.1e-6 of each other in
// the loss and 9.1e-6 in the norm, 30 and 100 times inside the tolerances, while the loss still
// falls from 10.9 to between 1.1 and 1.7.
#define MODEL_STEPS_LR 1e-4f
static void check_model(GPT2Config config, int B, int T, int steps) {
    printf("model L=%d NH=%d C=%d V=%d Vp=%d, B=%d T=%d, %d AdamW steps\n", config.num_layers,
           config.num_heads, config.channels, config.vocab_size, config.padded_vocab_size, B, T, steps);
    GPT2 cpu, gpu;
    int *inputs, *targets;
    model_case(&cpu, config, B, T, &inputs, &targets);
    gpt2_build_gpu(&gpu, &cpu, B, T);
    size_t BT = (size_t)B * T;

    // the logits of a forward pass without targets: with them, the GPU's become their gradient
    gpt2_forward(&cpu, inputs, NULL, B, T);
    gpt2_forward_gpu(&gpu, inputs, NULL, B, T);
    compare("model logits", gpu.acts.logits, cpu.acts.logits, BT * config.padded_vocab_size, 1e-4f, 1e-4f);
    gpt2_forward(&cpu, inputs, targets, B, T);
    gpt2_forward_gpu(&gpu, inputs, targets, B, T);
    compare_scalar("model loss", stage_loss_gpu(&gpu), cpu.mean_loss, 0.0, 1e-5);
    gpt2_zero_grad(&cpu);
    gpt2_backward(&cpu, 1);
    gpt2_zero_grad_gpu(&gpu);
    gpt2_backward_gpu(&gpu);
    compare_grads(&gpu, &cpu, 1e-3f, 1e-2f);

    for (int step = 1; step <= steps; step++) {
        if (step > 1) {
            gpt2_forward(&cpu, inputs, targets, B, T);
            gpt2_forward_gpu(&gpu, inputs, targets, B, T);
            gpt2_zero_grad(&cpu);
            gpt2_backward(&cpu, 1);
            gpt2_zero_grad_gpu(&gpu);
            gpt2_backward_gpu(&gpu);
        }
        float norm = gpt2_grad_norm(&cpu, 1.0f);
        gpt2_grad_norm_gpu(&gpu, 1, 1.0f);
        gpt2_update(&cpu, MODEL_STEPS_LR, 0.9f, 0.95f, 1e-8f, 0.1f, step, clip_factor(norm, 1.0f, 1.0f));
        gpt2_update_gpu(&gpu, MODEL_STEPS_LR, 0.9f, 0.95f, 1e-8f, 0.1f, step);
        StepScalars s = step_scalars_to_host(&gpu);
        float d_norm = s.norm;
        char what[64];
        snprintf(what, sizeof(what), "step %d loss %.6f", step, cpu.mean_loss);
        compare_scalar(what, s.last_loss, cpu.mean_loss, 0.0, 1e-4);
        snprintf(what, sizeof(what), "step %d grad norm %.6f", step, norm);
        compare_scalar(what, d_norm, norm, 0.0, 1e-3);
    }
    free(inputs);
    free(targets);
    gpt2_free_gpu(&gpu);
    gpt2_free(&cpu);
}

// ---------- the bf16 path ----------
//
// Tolerances, from bf16's 8 significant bits: rounding a value to bf16 changes it by at most half
// a unit in its last place, which is 2^-8 of the value at worst (just above a power of two); the
// checks allow exactly that, 2^-8 of the value, for the one rounding of an output. Products of two bf16 numbers are exact in float32, so a tensor-core product differs
// from the exact sum of the same bf16 inputs only by float32 rounding in the sum (its order is
// the hardware's): at most K * 2^-24 of sum |a_k b_k| in the worst case; 1e-5 of it is allowed
// (170 times float32's epsilon, enough for K in the thousands, and still far below the O(1)
// errors a wrong index gives). The reference gets the same bf16 inputs as the GPU, so what is
// checked is the kernel, not bf16's rounding of its inputs.

static double gelu_ref(double x) { return 0.5 * x * (1.0 + tanh(0.7978845608028654 * (x + 0.044715 * x * x * x))); }
static double gelu_grad_ref(double x) {
    double th = tanh(0.7978845608028654 * (x + 0.044715 * x * x * x));
    return 0.5 * (1.0 + th) + 0.5 * x * (1.0 - th * th) * 0.7978845608028654 * (1.0 + 3.0 * 0.044715 * x * x);
}

enum { MMA_PLAIN, MMA_BIAS_RESIDUAL, MMA_GELU, MMA_GELU_BACKWARD, MMA_F32_ACCUMULATE, MMA_VARIANTS };
static const char* MMA_VARIANT_NAMES[MMA_VARIANTS] = {"plain", "bias+residual", "gelu", "gelu backward", "f32 +="};

// Whether gemm_bf16 runs on the wgmma kernel where TMA can read the operands (Hopper, an sm_90a
// build, not forced onto mma.sync); the checks of each path assert which kernel ran.
static bool wgmma_path(void) { return !gemm_bf16_mma_sync_only && wgmma_available(); }

// The wgmma kernel's tile width in the checks: WGMMA_BN (what the programs run), or 256.
static int wgmma_bn = WGMMA_BN;
static void run_gemm_bf16(GemmBf16Args g, bool ta, bool tb, bool out_f32) {
    if (wgmma_bn == 256) gemm_bf16<256>(g, ta, tb, out_f32);
    else gemm_bf16<WGMMA_BN>(g, ta, tb, out_f32);
}

// The slices gemm_bf16 cuts a product of this shape into, on the path it takes.
static int bf16_slices(int M, int N, int K) {
    int slice_k;
    GemmBf16Args g = gemm_bf16_args(NULL, 0, NULL, 0, NULL, 0, M, N, K);
    if (!wgmma_path()) return gemm_bf16_slices(g, &slice_k);
    return wgmma_bn == 256 ? gemm_bf16_wgmma_slices<256>(g, &slice_k) : gemm_bf16_wgmma_slices<WGMMA_BN>(g, &slice_k);
}

// Fails the check when the product ran on the other kernel than `wgmma` says.
static void expect_wgmma(const char* what, long long runs_before, bool wgmma) {
    bool ran = gemm_bf16_wgmma_runs > runs_before;
    if (ran == wgmma) return;
    printf("  FAIL %-34s ran on %s, meant for %s\n", what, ran ? "wgmma" : "mma.sync", wgmma ? "wgmma" : "mma.sync");
    failures++;
}

// One product C (M, N) = op(A) op(B) through gemm_bf16, with the given layouts and epilogue,
// against a double-precision reference on the same bf16 inputs; on the wgmma kernel when `wgmma`
// (asserted), else on mma.sync.
static void check_gemm_bf16(int M, int N, int K, bool ta, bool tb, int variant, bool wgmma = false) {
    char what[96];
    int slices = bf16_slices(M, N, K);
    char split[24] = "";
    if (slices > 1) snprintf(split, sizeof(split), " split %d", slices);
    snprintf(what, sizeof(what), "%s %dx%dx%d %s%s %s%s", !wgmma ? "mma" : wgmma_bn == 256 ? "wgmma256" : "wgmma", M,
             N, K, ta ? "T" : "N", tb ? "T" : "N", MMA_VARIANT_NAMES[variant], split);
    long long runs = gemm_bf16_wgmma_runs;
    float* a = host_random((size_t)M * K, -1, 1);
    float* b = host_random((size_t)K * N, -1, 1);
    bf16 *d_a = to_device_bf16(a, (size_t)M * K), *d_b = to_device_bf16(b, (size_t)K * N);
    long long lda = ta ? M : K, ldb = tb ? K : N;
    // the exact product and the size of its terms
    double* ref = (double*)malloc_check((size_t)M * N * sizeof(double));
    double max_terms = 0.0;
    for (int m = 0; m < M; m++)
        for (int n = 0; n < N; n++) {
            double sum = 0.0, terms = 0.0;
            for (int k = 0; k < K; k++) {
                double p = (double)a[ta ? (size_t)k * lda + m : (size_t)m * lda + k] *
                           (double)b[tb ? (size_t)n * ldb + k : (size_t)k * ldb + n];
                sum += p;
                terms += fabs(p);
            }
            ref[(size_t)m * N + n] = sum;
            if (terms > max_terms) max_terms = terms;
        }
    float atol = 1e-5f * (float)max_terms + 1e-6f;
    size_t MN = (size_t)M * N;
    float* expect = (float*)malloc_check(MN * sizeof(float));
    float* bias = host_random(N, -1, 1);
    float* extra = host_random(MN, -2, 2);  // residual, GELU's input, or the old C
    float* d_bias = to_device(bias, N);
    bf16* d_extra16 = to_device_bf16(extra, MN);
    GemmBf16Args g = gemm_bf16_args(d_a, lda, d_b, ldb, NULL, N, M, N, K);
    float* got = NULL;
    if (variant == MMA_F32_ACCUMULATE) {
        float* d_c = to_device(extra, MN);  // the bf16-rounded values, as float32
        g.C = d_c;
        g.accumulate = 1;
        run_gemm_bf16(g, ta, tb, true);
        for (size_t i = 0; i < MN; i++) expect[i] = (float)(extra[i] + ref[i]);
        got = to_host(d_c, MN);
        compare_host(what, got, expect, MN, atol, 1e-6f, NULL);
        cuda_check(cudaFree(d_c));
    } else {
        bf16* d_c = device_poisoned_bf16(MN);
        bf16* d_aux = variant == MMA_GELU ? device_poisoned_bf16(MN) : NULL;
        g.C = d_c;
        if (variant == MMA_BIAS_RESIDUAL) { g.bias = d_bias; g.residual = d_extra16; }
        if (variant == MMA_GELU) { g.bias = d_bias; g.aux = d_aux; g.epilogue = EPI_GELU; }
        if (variant == MMA_GELU_BACKWARD) { g.aux = d_extra16; g.epilogue = EPI_GELU_BACKWARD; }
        run_gemm_bf16(g, ta, tb, false);
        got = to_host_bf16(d_c, MN);
        float* pre = NULL;
        if (variant == MMA_GELU) {
            // the pre-activation first; then GELU of what was stored, as the kernel computes it
            pre = to_host_bf16(d_aux, MN);
            for (size_t i = 0; i < MN; i++) expect[i] = (float)(ref[i] + bias[i % N]);
            snprintf(what + strlen(what), sizeof(what) - strlen(what), " pre");
            compare_host(what, pre, expect, MN, atol, BF16_RTOL, NULL);
            what[strlen(what) - 4] = '\0';
            for (size_t i = 0; i < MN; i++) expect[i] = (float)gelu_ref(pre[i]);
            compare_host(what, got, expect, MN, 1e-6f, BF16_RTOL, NULL);
        } else {
            for (size_t i = 0; i < MN; i++) {
                double v = ref[i];
                if (variant == MMA_BIAS_RESIDUAL) v += bias[i % N] + extra[i];
                if (variant == MMA_GELU_BACKWARD) v *= gelu_grad_ref(extra[i]);
                expect[i] = (float)v;
            }
            compare_host(what, got, expect, MN, atol * 1.2f, BF16_RTOL, NULL);  // gelu' <= 1.13
        }
        free(pre);
        cuda_check(cudaFree(d_c));
        cuda_check(cudaFree(d_aux));
    }
    expect_wgmma(what, runs, wgmma);
    free(a); free(b); free(ref); free(expect); free(bias); free(extra); free(got);
    cuda_check(cudaFree(d_a)); cuda_check(cudaFree(d_b)); cuda_check(cudaFree(d_bias)); cuda_check(cudaFree(d_extra16));
}

// A split-K product run twice on the same inputs must give the same bits: its slices' partial
// sums are added in a fixed order.
static void check_gemm_bf16_twice(int M, int N, int K, bool ta, bool tb, bool wgmma = false) {
    char what[96];
    snprintf(what, sizeof(what), "%s %dx%dx%d %s%s twice", wgmma ? "wgmma" : "mma", M, N, K, ta ? "T" : "N",
             tb ? "T" : "N");
    long long runs = gemm_bf16_wgmma_runs;
    float *a = host_random((size_t)M * K, -1, 1), *b = host_random((size_t)K * N, -1, 1);
    bf16 *d_a = to_device_bf16(a, (size_t)M * K), *d_b = to_device_bf16(b, (size_t)K * N);
    size_t MN = (size_t)M * N;
    float *d_c1 = device_poisoned(MN), *d_c2 = device_poisoned(MN);
    GemmBf16Args g = gemm_bf16_args(d_a, ta ? M : K, d_b, tb ? K : N, d_c1, N, M, N, K);
    expect_split(what, bf16_slices(M, N, K), true);
    run_gemm_bf16(g, ta, tb, true);
    g.C = d_c2;
    run_gemm_bf16(g, ta, tb, true);
    float *c1 = to_host(d_c1, MN), *c2 = to_host(d_c2, MN);
    int same = memcmp(c1, c2, MN * sizeof(float)) == 0;
    printf("  %s %-34s %s\n", same ? "ok  " : "FAIL", what, same ? "the same bits" : "different bits");
    if (!same) failures++;
    expect_wgmma(what, runs, wgmma);
    free(a); free(b); free(c1); free(c2);
    cuda_check(cudaFree(d_a)); cuda_check(cudaFree(d_b)); cuda_check(cudaFree(d_c1)); cuda_check(cudaFree(d_c2));
}

// Every layout and epilogue at sizes that exercise the edges, in both tile sizes (as for the SGEMM),
// then split along k; on the mma.sync kernel, which Hopper too runs when TMA cannot read the operands.
static void check_gemm_bf16_small(void) {
    gemm_bf16_mma_sync_only = 1;
    int num_sms = cuda_num_sms;
    const int shapes[][3] = {
        {37, 67, 45},     // nothing a multiple of 8: rows not 16-byte aligned, element-wise loads
        {64, 128, 64},    // aligned and whole tiles: cp.async everywhere
        {200, 136, 328},  // partial tiles at every edge, k over several pipeline stages
        {5, 8, 1},        // tiny: one k
    };
    for (int pass = 0; pass < 2; pass++) {
        cuda_num_sms = pass == 0 ? num_sms : 1;
        printf("(%s tiles)\n", pass == 0 ? "64x64" : "128x128");
        for (int s = 0; s < 4; s++) {
            char what[64];
            snprintf(what, sizeof(what), "mma %dx%dx%d", shapes[s][0], shapes[s][1], shapes[s][2]);
            expect_split(what, bf16_slices(shapes[s][0], shapes[s][1], shapes[s][2]), false);
            for (int layout = 0; layout < 4; layout++) {
                check_gemm_bf16(shapes[s][0], shapes[s][1], shapes[s][2], layout & 1, layout & 2, MMA_PLAIN);
            }
        }
        for (int variant = MMA_BIAS_RESIDUAL; variant < MMA_VARIANTS; variant++) {
            check_gemm_bf16(200, 136, 328, variant == MMA_F32_ACCUMULATE, false, variant);
            check_gemm_bf16(37, 67, 45, false, true, variant);
        }
        // generation's products: one token of each of 1 or 3 sequences, a tile's rows mostly
        // empty, with the epilogues of its block (matmul_residual_fwd, matmul_gelu_fwd)
        for (int rows = 1; rows <= 3; rows += 2) {
            check_gemm_bf16(rows, 136, 64, false, true, MMA_BIAS_RESIDUAL);
            check_gemm_bf16(rows, 136, 64, false, true, MMA_GELU);
        }
    }
    cuda_num_sms = num_sms;
    // Split-K (64x64 tiles): few tiles and a long k. Every layout; every epilogue, on rows that
    // are 16-byte aligned (the wide path of the epilogue) and rows that are not (element by
    // element); the last slice shorter than the others and ending inside a k tile (777, 1000);
    // one row, as generation's products run; and the same bits twice. The shapes above, with k
    // under 2 x SPLITK_MIN_K, ran unsplit (asserted).
    printf("(64x64 tiles, split-K)\n");
    const int split_shapes[][3] = {{70, 76, 1000}, {37, 67, 777}, {64, 136, 1024}, {1, 136, 768}};
    for (int s = 0; s < 4; s++) {
        char what[64];
        snprintf(what, sizeof(what), "mma %dx%dx%d", split_shapes[s][0], split_shapes[s][1], split_shapes[s][2]);
        expect_split(what, bf16_slices(split_shapes[s][0], split_shapes[s][1], split_shapes[s][2]), true);
    }
    for (int layout = 0; layout < 4; layout++) check_gemm_bf16(70, 76, 1000, layout & 1, layout & 2, MMA_PLAIN);
    for (int variant = MMA_BIAS_RESIDUAL; variant < MMA_VARIANTS; variant++) {
        check_gemm_bf16(37, 67, 777, variant == MMA_F32_ACCUMULATE, false, variant);
        check_gemm_bf16(64, 136, 1024, variant == MMA_F32_ACCUMULATE, variant != MMA_F32_ACCUMULATE, variant);
    }
    check_gemm_bf16(1, 136, 768, false, true, MMA_BIAS_RESIDUAL);
    check_gemm_bf16(1, 136, 768, false, true, MMA_GELU);
    check_gemm_bf16_twice(37, 67, 777, true, false);
    check_gemm_bf16_twice(64, 136, 1024, false, true);
    gemm_bf16_mma_sync_only = 0;
}

// The wgmma kernel (Hopper): every layout and epilogue, ragged edges, split-K, the fall-back to
// mma.sync. TMA needs rows of A and B a multiple of 8 elements, so the shapes that use TA or !TB
// have M or N a multiple of 8; C's rows need not.
static void check_gemm_bf16_wgmma(void) {
    if (!wgmma_available()) {
        printf("(wgmma: skipped, not a 9.0 GPU with sm_90a code)\n");
        return;
    }
    int num_sms = cuda_num_sms;
    printf("(wgmma, 128x%d tiles)\n", WGMMA_BN);
    const int shapes[][3] = {
        {200, 136, 72},   // partial tiles at every edge, the second k tile partial
        {128, 128, 64},   // one whole tile, one k tile
        {72, 40, 24},     // k under one tile
        {8, 16, 8},       // tiny
    };
    for (int s = 0; s < 4; s++) {
        char what[64];
        snprintf(what, sizeof(what), "wgmma %dx%dx%d", shapes[s][0], shapes[s][1], shapes[s][2]);
        expect_split(what, bf16_slices(shapes[s][0], shapes[s][1], shapes[s][2]), false);
        for (int layout = 0; layout < 4; layout++)
            check_gemm_bf16(shapes[s][0], shapes[s][1], shapes[s][2], layout & 1, layout & 2, MMA_PLAIN, true);
    }
    // one block walking 4 tiles of 6 k tiles: the ring wraps inside a tile and runs on across tiles
    cuda_num_sms = 1;
    for (int layout = 0; layout < 4; layout++) check_gemm_bf16(200, 136, 328, layout & 1, layout & 2, MMA_PLAIN, true);
    cuda_num_sms = num_sms;
    // the epilogues, on C rows 16-byte aligned (wide pieces) and not (67 columns, element by element)
    for (int variant = MMA_BIAS_RESIDUAL; variant < MMA_VARIANTS; variant++) {
        check_gemm_bf16(200, 136, 72, variant == MMA_F32_ACCUMULATE, false, variant, true);
        check_gemm_bf16(40, 67, 64, false, true, variant, true);
    }
    for (int rows = 1; rows <= 3; rows += 2) {  // generation's products
        check_gemm_bf16(rows, 136, 64, false, true, MMA_BIAS_RESIDUAL, true);
        check_gemm_bf16(rows, 136, 64, false, true, MMA_GELU, true);
    }
    // split-K: one or two tiles and a long k, the last slice shorter and ending inside a k tile
    printf("(wgmma, split-K)\n");
    const int split_shapes[][3] = {{72, 80, 1000}, {40, 67, 776}, {64, 136, 1024}};
    for (int s = 0; s < 3; s++) {
        char what[64];
        snprintf(what, sizeof(what), "wgmma %dx%dx%d", split_shapes[s][0], split_shapes[s][1], split_shapes[s][2]);
        expect_split(what, bf16_slices(split_shapes[s][0], split_shapes[s][1], split_shapes[s][2]), true);
    }
    for (int layout = 0; layout < 4; layout++) check_gemm_bf16(72, 80, 1000, layout & 1, layout & 2, MMA_PLAIN, true);
    for (int variant = MMA_BIAS_RESIDUAL; variant < MMA_VARIANTS; variant++) {
        bool acc = variant == MMA_F32_ACCUMULATE;  // dweight's layout
        check_gemm_bf16(64, 136, 1024, acc, !acc, variant, true);
        if (!acc) check_gemm_bf16(40, 67, 776, false, true, variant, true);
    }
    check_gemm_bf16_twice(72, 80, 1000, true, false, true);
    check_gemm_bf16_twice(64, 136, 1024, false, true, true);
    // 256-wide tiles (4 stages), which gpu_check times beside the programs' 128: a ragged shape in
    // every layout (the second column of tiles 8 wide), the epilogues, a split product
    printf("(wgmma, 128x256 tiles)\n");
    wgmma_bn = 256;
    for (int layout = 0; layout < 4; layout++) check_gemm_bf16(200, 264, 200, layout & 1, layout & 2, MMA_PLAIN, true);
    for (int variant = MMA_BIAS_RESIDUAL; variant < MMA_VARIANTS; variant++)
        check_gemm_bf16(200, 136, 72, variant == MMA_F32_ACCUMULATE, false, variant, true);
    check_gemm_bf16(72, 80, 1000, true, false, MMA_PLAIN, true);
    wgmma_bn = WGMMA_BN;
    // rows of A or B not a multiple of 8 elements: TMA cannot read them, mma.sync runs
    printf("(wgmma's fall-back to mma.sync)\n");
    for (int layout = 0; layout < 4; layout++) check_gemm_bf16(37, 67, 45, layout & 1, layout & 2, MMA_PLAIN, false);
}

// One timing line of the bf16 path: TFLOP/s and % of the bf16 tensor-core peak.
static void report_bf16(const char* what, double ms, double flops) {
    printf("  time %-34s GPU %8.3f ms %7.2f TFLOP/s (%4.1f%% of bf16 peak)\n", what, ms, flops / ms / 1e9,
           100.0 * flops / (ms * 1e-3) / peak_flops_bf16());
}

// Random bf16 in [-1, 1) from a hash of the index: matrices of gigabytes, filled on the GPU.
__global__ void random_bf16_kernel(bf16* x, size_t n, uint32_t seed) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    uint32_t h = (uint32_t)i * 2654435761u ^ (uint32_t)(i >> 32) ^ seed;
    h ^= h >> 15; h *= 0x2c1b3c6du; h ^= h >> 12; h *= 0x297a2d39u; h ^= h >> 15;
    x[i] = __float2bfloat16((float)(h >> 8) * 0x1p-23f - 1.0f);
}
static bf16* device_random_bf16(size_t n, uint32_t seed) {
    bf16* d;
    cuda_check(cudaMalloc(&d, n * sizeof(bf16)));
    random_bf16_kernel<<<ceil_div(n, 256), 256>>>(d, n, seed);
    launch_check(random_bf16_kernel);
    return d;
}

// The three products of a bf16 linear layer: the forward, and the backward's two.
enum { PRODUCT_FORWARD, PRODUCT_DINP, PRODUCT_DWEIGHT, PRODUCTS };
static const char* const product_names[PRODUCTS] = {"forward", "dinp", "dweight"};
// One row of the table time_matmul_bf16 ends with: milliseconds per kernel (0: not run).
enum { KERNEL_WGMMA, KERNEL_WGMMA256, KERNEL_MMA, KERNEL_CUBLAS, KERNELS_TIMED };
static const char* const kernel_names[KERNELS_TIMED] = {"wgmma", "wgmma256", "mma", "cublas"};
struct MatmulTiming {
    char what[48];
    double flops, ms[KERNELS_TIMED];
};
static MatmulTiming matmul_timings[64];
static int n_matmul_timings;

// The bf16 linear layer (N x C) -> (N x OC) of GPT-2 124M, each product timed alone as the model
// calls it (forward: out = inp w^T, bf16 out; dinp = dout w, bf16; dweight += dout^T inp, float32)
// on each kernel gemm_bf16 has here (wgmma on Hopper, with 128 and 256 wide tiles; mma.sync), and
// on cuBLAS's bf16 GEMM with the same layouts and output types in the USE_CUBLAS build.
static void time_matmul_bf16(const char* name, int B, int N, int C, int OC) {
    size_t NC = (size_t)N * C, NOC = (size_t)N * OC, OCC = (size_t)OC * C;
    bf16 *d_inp = device_random_bf16(NC, 1), *d_w = device_random_bf16(OCC, 2), *d_dout = device_random_bf16(NOC, 3);
    bf16 *d_out = device_poisoned_bf16(NOC), *d_dinp = device_poisoned_bf16(NC);
    float* d_dw;
    cuda_check(cudaMalloc(&d_dw, OCC * sizeof(float)));
    cuda_check(cudaMemset(d_dw, 0, OCC * sizeof(float)));
    for (int product = 0; product < PRODUCTS; product++) {
        MatmulTiming* t = &matmul_timings[n_matmul_timings++];
        snprintf(t->what, sizeof(t->what), "B=%d %s %s", B, name, product_names[product]);
        t->flops = 2.0 * N * C * OC;
        for (int k = 0; k < KERNELS_TIMED; k++) t->ms[k] = 0.0;
        GemmBf16Args g;  // as matmul_forward_gpu and matmul_backward_set_dinp_of set them up
        bool ta = false, tb = false, out_f32 = false;
        if (product == PRODUCT_FORWARD) {
            g = gemm_bf16_args(d_inp, C, d_w, C, d_out, OC, N, OC, C);
            tb = true;
        } else if (product == PRODUCT_DINP) {
            g = gemm_bf16_args(d_dout, OC, d_w, C, d_dinp, C, N, C, OC);
        } else {
            g = gemm_bf16_args(d_dout, OC, d_inp, C, d_dw, C, OC, C, N);
            g.accumulate = 1;
            ta = out_f32 = true;
        }
        for (int k = wgmma_available() ? KERNEL_WGMMA : KERNEL_MMA; k <= KERNEL_MMA; k++) {
            gemm_bf16_mma_sync_only = k == KERNEL_MMA;
            wgmma_bn = k == KERNEL_WGMMA256 ? 256 : WGMMA_BN;
            t->ms[k] = median_ms_gpu([&] { run_gemm_bf16(g, ta, tb, out_f32); });
            char what[96];
            snprintf(what, sizeof(what), "%s %s", kernel_names[k], t->what);
            report_bf16(what, t->ms[k], t->flops);
        }
        gemm_bf16_mma_sync_only = 0;
        wgmma_bn = WGMMA_BN;
#ifdef USE_CUBLAS
        // row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T
        float one = 1.0f, zero = 0.0f;
        t->ms[KERNEL_CUBLAS] = median_ms_gpu([&] {
            if (product == PRODUCT_FORWARD)
                cublas_check(cublasGemmEx(cublas_handle, CUBLAS_OP_T, CUBLAS_OP_N, OC, N, C, &one, d_w, CUDA_R_16BF, C,
                                          d_inp, CUDA_R_16BF, C, &zero, d_out, CUDA_R_16BF, OC, CUBLAS_COMPUTE_32F,
                                          CUBLAS_GEMM_DEFAULT));
            else if (product == PRODUCT_DINP)
                cublas_check(cublasGemmEx(cublas_handle, CUBLAS_OP_N, CUBLAS_OP_N, C, N, OC, &one, d_w, CUDA_R_16BF, C,
                                          d_dout, CUDA_R_16BF, OC, &zero, d_dinp, CUDA_R_16BF, C, CUBLAS_COMPUTE_32F,
                                          CUBLAS_GEMM_DEFAULT));
            else
                cublas_check(cublasGemmEx(cublas_handle, CUBLAS_OP_N, CUBLAS_OP_T, C, OC, N, &one, d_inp, CUDA_R_16BF, C,
                                          d_dout, CUDA_R_16BF, OC, &one, d_dw, CUDA_R_32F, C, CUBLAS_COMPUTE_32F,
                                          CUBLAS_GEMM_DEFAULT));
        });
        char what[96];
        snprintf(what, sizeof(what), "%s %s", kernel_names[KERNEL_CUBLAS], t->what);
        report_bf16(what, t->ms[KERNEL_CUBLAS], t->flops);
#endif
    }
    cuda_check(cudaFree(d_inp)); cuda_check(cudaFree(d_w)); cuda_check(cudaFree(d_dout));
    cuda_check(cudaFree(d_out)); cuda_check(cudaFree(d_dinp)); cuda_check(cudaFree(d_dw));
}

// The table of time_matmul_bf16's rows: each kernel's TFLOP/s, and ours (gemm_bf16's choice
// here: wgmma at WGMMA_BN on Hopper) as a multiple of cuBLAS's speed (its time over ours).
static void report_matmul_table(void) {
    printf("\n| product (T=1024) | wgmma TFLOP/s | wgmma 128x256 TFLOP/s | mma.sync TFLOP/s | cuBLAS TFLOP/s | "
           "ours / cuBLAS |\n");
    printf("|---|---:|---:|---:|---:|---:|\n");
    for (int i = 0; i < n_matmul_timings; i++) {
        const MatmulTiming* t = &matmul_timings[i];
        printf("| %s |", t->what);
        for (int k = 0; k < KERNELS_TIMED; k++)
            if (t->ms[k] > 0) printf(" %.1f |", t->flops / t->ms[k] / 1e9);
            else printf(" - |");
        double ours = t->ms[KERNEL_WGMMA] > 0 ? t->ms[KERNEL_WGMMA] : t->ms[KERNEL_MMA];
        if (t->ms[KERNEL_CUBLAS] > 0) printf(" %.2fx |\n", t->ms[KERNEL_CUBLAS] / ours);
        else printf(" - |\n");
    }
}

// Flash attention against the CPU's attention (gpt2/cpu_layers.h, float32, which stores the
// scores) on the same bf16 inputs: out (rounded once to bf16: rtol 2^-8), lse (float32 on both
// sides: 2^-16 of its largest value), dq, dk, dv (rounded once each). atol: 2^-13 of the largest
// value of the output (of the three gradients, for the backward), about 100 times the float32
// noise of sums in another order and of exp2f, and far below the O(1) errors of a wrong mask or
// index. One correction makes the comparison fair:
// the GPU's backward computes D_i = dO_i . o_i from the bf16 output it stored, where the CPU in
// effect uses its exact float32 output; dS = P (dP - D) is linear in D, so the CPU's dq and dk
// get the exact effect of the GPU's D added (-scale dD_i sum_j P_ij k_j, and the same for dk):
// the CPU's backward given the GPU's output, held to the tolerances above. Also: two backward
// runs must give the same bits (no atomics).
// The tensor-core kernels (FLASH_TENSOR_CORES) round two more things to bf16 on the way into
// their second products, as FlashAttention-2 does: P before O = P V and dV = P^T dO, dS before
// dK = dS^T Q and dQ = dS K. Each rounding moves a term of those sums by at most 2^-9 of itself,
// so a value may move by 2^-9 of the sum of its terms' magnitudes: out_id by 2^-9 sum_j P_ij |v_jd|,
// dv_jd by 2^-9 sum_i P_ij |dO_id|, dk_jd by 2^-9 scale sum_i |dS_ij| |q_id|, dq_id by 2^-9 scale
// sum_j |dS_ij| |k_jd|. Twice those bounds, computed per value from the CPU's P and dS, are added
// to the tolerances above: a bound, where a wrong index or mask gives errors of the size of the
// sums themselves.
// FLASH_WGMMA's forward rounds P as they do (its backward is theirs); backward 0: the forward only.
static void check_attention_bf16(int B, int T, int C, int NH, int bench, FlashKernels kernels, int backward = 1) {
    int hs = C / NH;
    bool mma = kernels != FLASH_CUDA_CORES;  // FLASH_WGMMA: the wgmma forward, the mma.sync backward
    const char* kind = kernels == FLASH_WGMMA ? "wgmma forward" : mma ? "tensor cores" : "CUDA cores";
    printf("attention bf16 (flash, %s) B=%d T=%d C=%d NH=%d, head size %d%s\n", kind, B, T, C, NH, hs,
           backward ? "" : ", forward only");
    size_t BT = (size_t)B * T, n_qkv = BT * 3 * C, n_out = BT * C, n_lse = (size_t)B * NH * T;
    size_t n_att = (size_t)B * NH * T * T;
    float scale = 1.0f / sqrtf((float)hs);
    float* qkv = host_random(n_qkv, -2, 2);
    bf16* d_qkv = to_device_bf16(qkv, n_qkv);
    float *out = host_zeros(n_out), *preatt = host_zeros(n_att), *att = host_zeros(n_att);
    attention_forward(out, preatt, att, qkv, B, T, C, NH);
    float* lse = (float*)malloc_check(n_lse * sizeof(float));
    attention_lse_ref(lse, preatt, n_lse, T);
    bf16* d_out = device_poisoned_bf16(n_out);
    float* d_lse = device_poisoned(n_lse);
    flash_attention_forward_with(kernels, d_out, d_lse, d_qkv, B, T, C, NH);
    float* out_gpu = to_host_bf16(d_out, n_out);
    // the bounds of the tensor cores' bf16 P and dS (above), per value; zero for the CUDA cores
    float *slack_out = host_zeros(n_out), *slack_qkv = host_zeros(n_qkv);
    const double u2 = 2.0 / 512;  // twice a bf16 rounding's 2^-9
    if (mma) attention_out_bf16_slack(slack_out, att, qkv, B, T, C, NH);
    compare_host_slack("flash forward out", out_gpu, out, n_out, max_abs(out, n_out) / 8192, BF16_RTOL, NULL,
                       slack_out);
    compare("flash forward lse", d_lse, lse, n_lse, max_abs(lse, n_lse) / 65536, 0.0f);
    // useful flops of causal attention: half of the 2 T^2 hs of each of the forward's two products
    // per head, and of the backward's five (S again, dP, dV, dK, dQ)
    double fwd = 2.0 * B * NH * (double)T * T * hs, bwd = 2.5 * fwd;
    char what[64];
    snprintf(what, sizeof(what), "flash attention forward (%s)", kernels == FLASH_WGMMA ? "wgmma" : kind);
    if (bench)
        report_bf16(what, median_ms_gpu([&] { flash_attention_forward_with(kernels, d_out, d_lse, d_qkv, B, T, C, NH); }),
                    fwd);
    if (!backward) {
        free(qkv); free(out); free(preatt); free(att); free(lse); free(out_gpu); free(slack_out); free(slack_qkv);
        cuda_check(cudaFree(d_qkv)); cuda_check(cudaFree(d_out)); cuda_check(cudaFree(d_lse));
        return;
    }

    float* dout = host_random(n_out, -2, 2);
    bf16* d_dout = to_device_bf16(dout, n_out);
    float *dqkv = host_zeros(n_qkv), *dpreatt = host_zeros(n_att), *datt = host_zeros(n_att);
    attention_backward(dqkv, dpreatt, datt, dout, qkv, att, B, T, C, NH);
    for (int b = 0; b < B; b++)  // the CPU's dq and dk given the GPU's D (above)
        for (int h = 0; h < NH; h++)
            for (int i = 0; i < T; i++) {
                size_t oi = ((size_t)b * T + i) * C + h * hs;
                double dD = 0.0;
                for (int d = 0; d < hs; d++) dD += (double)dout[oi + d] * ((double)out_gpu[oi + d] - out[oi + d]);
                const float* q = qkv + ((size_t)b * T + i) * 3 * C + h * hs;
                float* dq = dqkv + ((size_t)b * T + i) * 3 * C + h * hs;
                for (int j = 0; j <= i; j++) {
                    double w = -scale * dD * att[(((size_t)b * NH + h) * T + i) * T + j];
                    const float* k = qkv + ((size_t)b * T + j) * 3 * C + C + h * hs;
                    float* dk = dqkv + ((size_t)b * T + j) * 3 * C + C + h * hs;
                    for (int d = 0; d < hs; d++) {
                        dq[d] += (float)(w * k[d]);
                        dk[d] += (float)(w * q[d]);
                    }
                }
            }
    for (int b = 0; b < B && mma; b++)  // the bounds of the backward's bf16 P and dS (above)
        for (int h = 0; h < NH; h++)
            for (int i = 0; i < T; i++)
                for (int j = 0; j <= i; j++) {
                    size_t ij = (((size_t)b * NH + h) * T + i) * T + j;
                    double p = u2 * att[ij], ds = u2 * scale * fabs(dpreatt[ij]);
                    const float* qi = qkv + ((size_t)b * T + i) * 3 * C + h * hs;
                    const float* kj = qkv + ((size_t)b * T + j) * 3 * C + C + h * hs;
                    const float* doi = dout + ((size_t)b * T + i) * C + h * hs;
                    float* sq = slack_qkv + ((size_t)b * T + i) * 3 * C + h * hs;
                    float* sk = slack_qkv + ((size_t)b * T + j) * 3 * C + C + h * hs;
                    for (int d = 0; d < hs; d++) {
                        sq[d] += (float)(ds * fabs(kj[d]));
                        sk[d] += (float)(ds * fabs(qi[d]));
                        sk[C + d] += (float)(p * fabs(doi[d]));  // dv
                    }
                }
    bf16 *d_dqkv = device_poisoned_bf16(n_qkv), *d_dqkv2 = device_poisoned_bf16(n_qkv);
    flash_attention_backward_with(kernels, d_dqkv, d_dout, d_qkv, d_out, d_lse, B, T, C, NH);
    flash_attention_backward_with(kernels, d_dqkv2, d_dout, d_qkv, d_out, d_lse, B, T, C, NH);
    float *dqkv_gpu = to_host_bf16(d_dqkv, n_qkv), *dqkv_gpu2 = to_host_bf16(d_dqkv2, n_qkv);
    // atol from the largest of all three gradients: dq and dk may be all zero up to float32 noise
    // (at T = 1 the softmax has one entry, whose gradient vanishes), dv = P^T dO never is
    const char* names[3] = {"flash backward dq", "flash backward dk", "flash backward dv"};
    unsigned char* mask = (unsigned char*)malloc_check(n_qkv);
    float maxref = max_abs(dqkv, n_qkv);
    for (int p = 0; p < 3; p++) {
        for (size_t i = 0; i < n_qkv; i++) mask[i] = (i % (3 * C)) / C == (size_t)p;
        compare_host_slack(names[p], dqkv_gpu, dqkv, n_qkv, maxref / 8192, BF16_RTOL, mask, slack_qkv);
    }
    int same = memcmp(dqkv_gpu, dqkv_gpu2, n_qkv * sizeof(float)) == 0;
    printf("  %s flash backward twice             %s\n", same ? "ok  " : "FAIL", same ? "the same bits" : "different bits");
    if (!same) failures++;
    snprintf(what, sizeof(what), "flash attention backward (%s)", mma ? "tensor cores" : kind);
    if (bench && kernels != FLASH_WGMMA)  // (its backward is FLASH_TENSOR_CORES's)
        report_bf16(what, median_ms_gpu([&] {
                        flash_attention_backward_with(kernels, d_dqkv, d_dout, d_qkv, d_out, d_lse, B, T, C, NH);
                    }), bwd);
    free(qkv); free(out); free(preatt); free(att); free(lse); free(out_gpu); free(dout); free(dqkv);
    free(dpreatt); free(datt); free(dqkv_gpu); free(dqkv_gpu2); free(mask); free(slack_out); free(slack_qkv);
    cuda_check(cudaFree(d_qkv)); cuda_check(cudaFree(d_out)); cuda_check(cudaFree(d_lse));
    cuda_check(cudaFree(d_dout)); cuda_check(cudaFree(d_dqkv)); cuda_check(cudaFree(d_dqkv2));
}

// The bf16 model against train_cpu's float32 one, same weights and batch: the loss, then every
// parameter gradient as a whole tensor, ||gpu - cpu|| / ||cpu||. bf16 rounds every activation
// and activation gradient, at every layer, by up to u = 2^-8 of itself, errors that are
// independent from value to value: a gradient, built from a few such roundings along the way
// from the loss, is off by about u to 2u in norm (0.4-0.8%), the loss, a mean over B*T
// positions, by far less. Allowed: gradients 0.02 (5u) of their norm, the loss 1e-3 relative;
// an error in a layer's backward is of the order of the whole gradient.
static void check_model_bf16(GPT2Config config, int B, int T) {
    printf("model bf16 L=%d NH=%d C=%d V=%d Vp=%d, B=%d T=%d\n", config.num_layers, config.num_heads,
           config.channels, config.vocab_size, config.padded_vocab_size, B, T);
    GPT2 cpu;
    GPT2BF16 gpu;
    int *inputs, *targets;
    model_case(&cpu, config, B, T, &inputs, &targets);
    gpt2_build_bf16(&gpu, &cpu, B, T);
    gpt2_forward(&cpu, inputs, targets, B, T);
    gpt2_forward_gpu(&gpu, inputs, targets, B, T);
    compare_scalar("model bf16 loss", stage_loss_gpu(&gpu.base), cpu.mean_loss, 0.0, 1e-3);
    gpt2_zero_grad(&cpu);
    gpt2_backward(&cpu, 1);
    gpt2_zero_grad_gpu(&gpu.base);
    gpt2_backward_gpu(&gpu);
    float* g = to_host(gpu.base.grads_memory, gpu.base.num_parameters);
    size_t offset = 0;
    for (int k = 0; k < NUM_PARAMETER_TENSORS; k++) {
        size_t n = cpu.param_sizes[k];
        double diff = 0.0, norm = 0.0;
        for (size_t i = 0; i < n; i++) {
            double d = (double)g[offset + i] - cpu.grads_memory[offset + i];
            diff += d * d;
            norm += (double)cpu.grads_memory[offset + i] * cpu.grads_memory[offset + i];
        }
        double rel = norm > 0 ? sqrt(diff / norm) : sqrt(diff);
        int ok = rel <= 0.02;  // false for NaN
        printf("  %s grad %-29s relative error %.4f (allowed 0.02)\n", ok ? "ok  " : "FAIL", PARAMETERS[k].name, rel);
        if (!ok) failures++;
        offset += n;
    }
    free(g);
    free(inputs);
    free(targets);
    gpt2_free_bf16(&gpu);
    gpt2_free(&cpu);
}

// AdamW of the bf16 path (gpt2_update_gpu on a GPT2BF16) against gpt2_update: the float32 master parameters,
// and the bf16 copy that the next forward and backward read, which must hold each parameter's
// new value rounded to bf16: exactly the rounding of the GPU's new master value (a copy written
// from the old one, or not at all, differs by the update or is the NaN it starts as here).
static void check_adamw_bf16(GPT2Config config) {
    GPT2 cpu;
    GPT2BF16 gpu;
    adamw_case(&cpu, config, "adamw bf16");
    size_t n = cpu.num_parameters;
    gpt2_build_bf16(&gpu, &cpu, 1, 1);
    GPT2* base = &gpu.base;
    adamw_state_to_gpu(base, &cpu);
    cuda_check(cudaMemset(gpu.params16, 0xff, n * sizeof(bf16)));  // NaN
    gpt2_update(&cpu, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 3, 1.0f);
    gpt2_update_gpu(&gpu, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 3);
    compare("adamw bf16 params", base->params_memory, cpu.params_memory, n, 1e-7f, 1e-6f);
    float* master = to_host(base->params_memory, n);
    float* copy = to_host_bf16(gpu.params16, n);
    for (size_t i = 0; i < n; i++) master[i] = __bfloat162float(__float2bfloat16(master[i]));
    compare_host("adamw bf16 copy = bf16(params)", copy, master, n, 0.0f, 0.0f, NULL);
    free(master);
    free(copy);
    gpt2_free_bf16(&gpu);
    gpt2_free(&cpu);
}

// ---------- attention against the paged key-value cache (generation) ----------

// One layer's paged caches for a check, B sequences that held pos[b] positions each and take T
// new tokens, on the host and the GPU. The sequences' pages are drawn at random from a pool with
// 3 spare pages, so that they are neither contiguous nor in order; a page table's entries past
// its sequence's pages are -1 (a kernel that reads one reads far outside the pool, which
// AddressSanitizer reports). The rows of the positions held are random; every other row of the
// pool is NaN, so that a row read that should not be, or a value stored in the wrong place, shows.
template <typename floatX>
struct PagedCase {
    int hs, max_len, prefill, max_pages;
    int* pos;              // (B)
    int* table;            // (B, max_pages) the page tables
    size_t n_pool;         // floats in each of key and value
    float* key;            // the host pool: (num_pages, NH, KV_PAGE, hs)
    float* value;
    unsigned char* mask;   // (n_pool) 1 on the rows of the sequences' positions, held and new
    LayerCache cpu;        // the host's cache, on the arrays above
    LayerCacheOf<floatX> gpu;  // the GPU's: device copies of the pool, the tables and pos; scratch
};

template <typename floatX>
static PagedCase<floatX> paged_case(int B, int T, int C, int NH, const int* pos) {
    PagedCase<floatX> pc;
    pc.hs = C / NH;
    pc.max_len = 0;
    pc.prefill = 1;
    pc.pos = (int*)malloc_check(B * sizeof(int));
    for (int b = 0; b < B; b++) {
        pc.pos[b] = pos[b];
        if (pos[b] + T > pc.max_len) pc.max_len = pos[b] + T;
        if (pos[b] != 0) pc.prefill = 0;
    }
    pc.max_pages = kv_pages_for(pc.max_len) + 1;  // a row stride longer than any table
    int num_pages = 3;
    for (int b = 0; b < B; b++) num_pages += kv_pages_for(pos[b] + T);
    int* order = (int*)malloc_check(num_pages * sizeof(int));
    for (int i = 0; i < num_pages; i++) order[i] = i;
    for (int i = num_pages - 1; i > 0; i--) {  // shuffled (Fisher-Yates)
        int j = (int)(random_u32(&rng_state) % (uint32_t)(i + 1)), swap = order[i];
        order[i] = order[j];
        order[j] = swap;
    }
    pc.table = (int*)malloc_check((size_t)B * pc.max_pages * sizeof(int));
    for (int i = 0; i < B * pc.max_pages; i++) pc.table[i] = -1;
    for (int b = 0, next = 0; b < B; b++)
        for (int p = 0; p < kv_pages_for(pos[b] + T); p++) pc.table[b * pc.max_pages + p] = order[next++];
    free(order);
    pc.n_pool = (size_t)num_pages * NH * KV_PAGE * pc.hs;
    pc.key = host_zeros(pc.n_pool);
    pc.value = host_zeros(pc.n_pool);
    for (size_t i = 0; i < pc.n_pool; i++) pc.key[i] = pc.value[i] = NAN;
    pc.mask = (unsigned char*)calloc_check(pc.n_pool, 1);
    for (int b = 0; b < B; b++)
        for (int p = 0; p < pos[b] + T; p++)
            for (int h = 0; h < NH; h++) {
                size_t row = kv_row(pc.table + b * pc.max_pages, p, h, NH, pc.hs);
                memset(pc.mask + row, 1, pc.hs);
                for (int i = 0; p < pos[b] && i < pc.hs; i++) {
                    pc.key[row + i] = -2.0f + 4.0f * random_f32(&rng_state);
                    pc.value[row + i] = -2.0f + 4.0f * random_f32(&rng_state);
                }
            }
    LayerCache cpu = {pc.key, pc.value, pc.table, pc.pos, pc.max_pages, pc.max_len, pc.prefill, NULL, 0};
    pc.cpu = cpu;
    size_t n_scratch = attention_paged_scratch_floats(B, T, NH, pc.hs, pc.max_len);
    LayerCacheOf<floatX> gpu = {to_device_as<floatX>(pc.key, pc.n_pool), to_device_as<floatX>(pc.value, pc.n_pool),
                                to_device_int(pc.table, (size_t)B * pc.max_pages), to_device_int(pc.pos, B),
                                pc.max_pages, pc.max_len, pc.prefill, device_poisoned(n_scratch), n_scratch};
    pc.gpu = gpu;
    return pc;
}

template <typename floatX>
static void paged_case_free(PagedCase<floatX>* pc) {
    free(pc->pos); free(pc->table); free(pc->key); free(pc->value); free(pc->mask);
    cuda_check(cudaFree(pc->gpu.key)); cuda_check(cudaFree(pc->gpu.value)); cuda_check(cudaFree((void*)pc->gpu.pages));
    cuda_check(cudaFree((void*)pc->gpu.pos)); cuda_check(cudaFree(pc->gpu.scratch));
}

// attention_paged_forward_gpu against attention_forward_paged (gpt2/kv_pages.h) on the same
// cache (PagedCase) and qkv. Compared: out (float32: 1e-6 + 1e-5 |x|, sums in another order and
// the GPU's expf; bf16: the one rounding of the output, and in a prefill the bound of flash
// attention's bf16 P, below); the pool on the
// sequences' rows, exactly (the new rows are copies, the others untouched), and outside them
// (still NaN); and the last sequence run alone against its rows of the batch, bit for bit (the
// split does not depend on the batch).
template <typename floatX>
static void check_attention_paged(int B, int T, int C, int NH, const int* pos, int bench) {
    int bf = sizeof(floatX) == sizeof(bf16);
    PagedCase<floatX> pc = paged_case<floatX>(B, T, C, NH, pos);
    printf("attention paged%s B=%d T=%d C=%d NH=%d, head size %d%s, positions held:", bf ? " bf16" : "", B, T, C,
           NH, pc.hs, pc.prefill ? ", prefill" : "");
    for (int b = 0; b < B; b++) printf(" %d", pos[b]);
    printf("\n");
    size_t n_qkv = (size_t)B * T * 3 * C, n_out = (size_t)B * T * C, n_pool = pc.n_pool;
    float* qkv = host_random(n_qkv, -2, 2);
    floatX* d_qkv = to_device_as<floatX>(qkv, n_qkv);
    floatX* d_out = device_poisoned_as<floatX>(n_out);
    float* out = host_zeros(n_out);
    attention_forward_paged(out, &pc.cpu, qkv, B, T, C, NH);
    attention_paged_forward_gpu(d_out, &pc.gpu, d_qkv, B, T, C, NH);
    float* got = to_host_as(d_out, n_out);
    // A bf16 prefill runs flash attention on the tensor cores, which rounds P to bf16 before P V:
    // out_id moves by up to 2^-9 sum_j P_ij |v_jd| <= 2^-9 max |v| (check_attention_bf16 holds
    // those kernels to the bound per value); twice that is added here.
    float atol = bf ? max_abs(out, n_out) / 8192 : 1e-6f;
    if (bf && pc.prefill) atol += 2.0f / 512 * max_abs(qkv, n_qkv);
    compare_host("paged attention out", got, out, n_out, atol, bf ? BF16_RTOL : 1e-5f, NULL);
    float *got_key = to_host_as(pc.gpu.key, n_pool), *got_value = to_host_as(pc.gpu.value, n_pool);
    compare_host("paged attention keys in the pool", got_key, pc.key, n_pool, 0.0f, 0.0f, pc.mask);
    compare_host("paged attention values in the pool", got_value, pc.value, n_pool, 0.0f, 0.0f, pc.mask);
    size_t stray = 0;
    for (size_t i = 0; i < n_pool; i++)
        stray += !pc.mask[i] && (got_key[i] == got_key[i] || got_value[i] == got_value[i]);  // not NaN
    printf("  %s paged attention rest of the pool   %s\n", stray == 0 ? "ok  " : "FAIL",
           stray == 0 ? "untouched" : "written");
    if (stray > 0) failures++;

    // the last sequence alone: its own page table, position and qkv, a batch of one
    LayerCacheOf<floatX> alone = pc.gpu;
    alone.pages = pc.gpu.pages + (size_t)(B - 1) * pc.max_pages;
    alone.pos = pc.gpu.pos + (B - 1);
    alone.max_len = pos[B - 1] + T;
    floatX* d_alone = device_poisoned_as<floatX>((size_t)T * C);
    attention_paged_forward_gpu(d_alone, &alone, d_qkv + (size_t)(B - 1) * T * 3 * C, 1, T, C, NH);
    float* got_alone = to_host_as(d_alone, (size_t)T * C);
    int same = memcmp(got_alone, got + (size_t)(B - 1) * T * C, (size_t)T * C * sizeof(float)) == 0;
    printf("  %s paged attention alone = in batch   %s\n", same ? "ok  " : "FAIL", same ? "the same bits" : "different bits");
    if (!same) failures++;
    if (bench) {
        double bytes = (double)n_qkv / 3 * 2 * sizeof(floatX);  // q read, out written
        for (int b = 0; b < B; b++) bytes += 2.0 * (pos[b] + T) * C * sizeof(floatX);  // every key and value
        time_both(bf ? "paged attention bf16" : "paged attention",
                  [&] { attention_paged_forward_gpu(d_out, &pc.gpu, d_qkv, B, T, C, NH); },
                  [&] { attention_forward_paged(out, &pc.cpu, qkv, B, T, C, NH); }, 0, bytes);
    }
    free(qkv); free(out); free(got); free(got_key); free(got_value); free(got_alone);
    cuda_check(cudaFree(d_qkv)); cuda_check(cudaFree(d_out)); cuda_check(cudaFree(d_alone));
    paged_case_free(&pc);
}

// The cases, for either path: a decode step (T=1) of 5 sequences, 4 about a page's edge and one
// over 6 chunks (its last chunk has one position); prefills of whole prompts (bf16: through
// flash attention); 3 tokens on top of caches, where sequence 1's tokens at positions 62 and 63
// fit one chunk and its token at 64 takes two; each head size. Without --quick, the decode step
// of GPT-2 124M at a full context of 1024, for one sequence and for 16, timed.
template <typename floatX>
static void check_attention_paged_cases(int bench) {
    const int decode[5] = {0, 14, 15, 16, 320};
    check_attention_paged<floatX>(5, 1, 64, 4, decode, 0);
    check_attention_paged<floatX>(5, 1, 128, 2, decode, 0);
    const int prefill[2] = {0, 0};
    check_attention_paged<floatX>(1, 37, 128, 2, prefill, 0);
    check_attention_paged<floatX>(2, 37, 64, 4, prefill, 0);
    const int extend[3] = {5, 62, 200};
    check_attention_paged<floatX>(3, 3, 96, 3, extend, 0);
    check_attention_paged<floatX>(3, 3, 128, 1, extend, 0);
    if (!quick) {
        int full[16];
        for (int b = 0; b < 16; b++) full[b] = 1023;
        check_attention_paged<floatX>(1, 1, 768, 12, full, bench);
        check_attention_paged<floatX>(16, 1, 768, 12, full, bench);
    }
}

// Generation on the GPU (gpt2/gpu/generate.cuh, float32, as infer_gpu and train_gpu's samples run
// it) against train_cpu.c's full forward pass: three prompts of 5, 62 and 100 tokens prefilled
// one by one, then one decode step of all three at their own positions, through the paged cache.
// Each pass's last logits within 1e-4 + 1e-4 |x| (the same products and attention, in other
// orders, through two layers).
static void check_generation(void) {
    GPT2Config c = tiny_config();
    const int B = 3, len[B] = {5, 62, 100}, Vp = c.padded_vocab_size, P = kv_pages_for(101);
    printf("generation (generate.cuh, float32) prompts of 5 62 100 tokens, then one decode step\n");
    GPT2 model;
    gpt2_build_fresh(&model, c, 42);
    float* d_params = to_device(model.params_memory, model.num_parameters);
    ParameterTensors d_all;
    point_tensors((float**)&d_all, d_params, model.param_sizes, NUM_PARAMETER_TENSORS);
    EngineDevice gen = generator_gpu_device(c, d_all, d_all, B, B * P);
    int tokens[B][101], table[B * P], pos[B], last[B];
    for (int i = 0; i < B * P; i++) table[i] = i;  // sequence b: pages b*P ...
    for (int b = 0; b < B; b++) {
        for (int t = 0; t <= len[b]; t++) tokens[b][t] = (int)(random_u32(&rng_state) % c.vocab_size);
    }
    float* logits = (float*)malloc_check((size_t)B * Vp * sizeof(float));
    for (int pass = 0; pass < 2; pass++) {  // the prompts, then one token of each
        if (pass == 0) {
            for (int b = 0; b < B; b++) {
                pos[0] = 0;
                EnginePass ep = engine_pass(1, len[b], tokens[b], pos, table + b * P, P);
                gen.forward(gen.ctx, &ep, logits + (size_t)b * Vp);
            }
        } else {
            for (int b = 0; b < B; b++) {
                last[b] = tokens[b][len[b]];
                pos[b] = len[b];
            }
            EnginePass ep = engine_pass(B, 1, last, pos, table, P);
            gen.forward(gen.ctx, &ep, logits);
        }
        for (int b = 0; b < B; b++) {
            int T = len[b] + pass;  // the tokens the CPU runs: the prompt, and the decoded one
            gpt2_forward(&model, tokens[b], NULL, 1, T);
            char what[64];
            snprintf(what, sizeof(what), "generation %s, sequence %d", pass == 0 ? "prefill" : "decode", b);
            compare_host(what, logits + (size_t)b * Vp, model.acts.logits + (size_t)(T - 1) * Vp, Vp, 1e-4f, 1e-4f,
                         NULL);
        }
    }
    free(logits);
    generator_gpu_device_free<float>(&gen);
    cuda_check(cudaFree(d_params));
    gpt2_free(&model);
}

// ---------- the wte gradient's buckets ----------
//
// encoder_backward's dwte adds to each token's row the dout rows of the positions holding that
// token; the GPU sorts the positions by token and sums each bucket in chunks of sorted rows, a
// bucket that crosses chunks in two passes (gpt2/gpu/encoder.cuh). These cases shape the buckets:
// one token at every position (one bucket through every chunk), all tokens distinct (every bucket
// one position, in shuffled order), and a mix as in text (frequencies falling as 1/rank: a few
// long buckets, many of one), each with float and with bf16 dout and at C = 67 (a column a
// thread) and 72 (16-byte packs a thread), at B x T = 3 x 701 = 2103: a
// multiple of neither the 32 rows of a chunk nor the 1024 keys a block sorts in shared memory,
// so the last chunk and the last sort block are partial, and two merge passes run in global
// memory. The values (dout, dwte and dwpe before) are multiples of 2^-6 in [-1, 1]: a sum of up
// to 2104 of them is a multiple of 2^-6 below 2^12, 18 significant bits, exact in float32 in any
// order, and each is exact in bf16 (7 significant bits). So the GPU must give the CPU's bits
// exactly (tolerance 0), and a row summed twice, missed or read at another position shows.
// Then, on random floats, whose sums do depend on the order, two runs must give the same bits.

static float* host_grid(size_t n) {
    float* x = (float*)malloc_check(n * sizeof(float));
    for (size_t i = 0; i < n; i++) x[i] = (float)((int)(random_u32(&rng_state) % 129) - 64) / 64.0f;
    return x;
}

template <typename floatX>
static void check_encoder_backward_buckets(const char* tokens, const int* inp, int B, int T, int C, int V) {
    const char* type = sizeof(floatX) == 2 ? "bf16" : "float";
    size_t BT = (size_t)B * T, BTC = BT * C, VC = (size_t)V * C, TC = (size_t)T * C;
    printf("encoder_backward %s, %s dout, B=%d T=%d C=%d V=%d\n", tokens, type, B, T, C, V);
    float *dout = host_grid(BTC), *dwte = host_grid(VC), *dwpe = host_grid(TC);
    floatX* d_dout = to_device_as<floatX>(dout, BTC);
    int* d_inp = to_device_int(inp, BT);
    float *d_dwte = to_device(dwte, VC), *d_dwpe = to_device(dwpe, TC);
    encoder_backward(dwte, dwpe, dout, inp, B, T, C);
    encoder_backward_gpu(d_dwte, d_dwpe, d_dout, d_inp, B, T, C);
    compare("encoder_backward dwte (exact)", d_dwte, dwte, VC, 0.0f, 0.0f);
    compare("encoder_backward dwpe (exact)", d_dwpe, dwpe, TC, 0.0f, 0.0f);
    cuda_check(cudaFree(d_dout));
    free(dout); free(dwte); free(dwpe);

    dout = host_random(BTC, -1, 1);
    dwte = host_random(VC, -1, 1);
    d_dout = to_device_as<floatX>(dout, BTC);
    float* runs[2];
    for (int r = 0; r < 2; r++) {
        cuda_check(cudaMemcpy(d_dwte, dwte, VC * sizeof(float), cudaMemcpyHostToDevice));
        encoder_backward_gpu(d_dwte, d_dwpe, d_dout, d_inp, B, T, C);
        runs[r] = to_host(d_dwte, VC);
    }
    int same = memcmp(runs[0], runs[1], VC * sizeof(float)) == 0;
    printf("  %s %-34s %s\n", same ? "ok  " : "FAIL", "encoder_backward dwte twice", same ? "the same bits" : "different bits");
    if (!same) failures++;
    free(runs[0]); free(runs[1]); free(dout); free(dwte);
    cuda_check(cudaFree(d_dout)); cuda_check(cudaFree(d_inp)); cuda_check(cudaFree(d_dwte)); cuda_check(cudaFree(d_dwpe));
}

// The bucketing itself: the GPU's sorted keys (encoder_backward_wte_sort_gpu) against the host's.
// The sums above cannot see every wrong order: rows of one token left apart by a bad sort would
// still be added, each run by its own thread, to the same row of dwte, a race between blocks on a
// GPU that the emulator, running blocks one after another, never shows.
static int cmp_u64(const void* a, const void* b) {
    unsigned long long x = *(const unsigned long long*)a, y = *(const unsigned long long*)b;
    return x < y ? -1 : x > y;
}
static void check_encoder_backward_sort(const char* tokens, const int* inp, int BT) {
    printf("encoder_backward sort, %s, B*T=%d\n", tokens, BT);
    size_t bytes = (size_t)BT * sizeof(unsigned long long);
    unsigned long long* want = (unsigned long long*)malloc_check(bytes);
    unsigned long long* got = (unsigned long long*)malloc_check(bytes);
    for (int p = 0; p < BT; p++) want[p] = ((unsigned long long)(unsigned)inp[p] << 32) | (unsigned)p;
    qsort(want, BT, sizeof(unsigned long long), cmp_u64);
    unsigned long long *d_keys, *d_spare;
    cuda_check(cudaMalloc((void**)&d_keys, bytes));
    cuda_check(cudaMalloc((void**)&d_spare, bytes));
    int* d_inp = to_device_int(inp, BT);
    const unsigned long long* d_sorted = encoder_backward_wte_sort_gpu(d_keys, d_spare, d_inp, BT);
    cuda_check(cudaMemcpy(got, d_sorted, bytes, cudaMemcpyDeviceToHost));
    int same = memcmp(got, want, bytes) == 0;
    printf("  %s %-34s %s\n", same ? "ok  " : "FAIL", "encoder_backward sort by token",
           same ? "the host's order" : "another order than the host's");
    if (!same) failures++;
    free(want); free(got);
    cuda_check(cudaFree(d_keys)); cuda_check(cudaFree(d_spare)); cuda_check(cudaFree(d_inp));
}

static void check_encoder_backward_bucket_cases(void) {
    const int B = 3, T = 701, BT = B * T;
    int* inp = (int*)malloc_check(BT * sizeof(int));
    for (int pass = 0; pass < 3; pass++) {
        const char* tokens;
        int V;
        if (pass == 0) {
            tokens = "one token everywhere";
            V = 50;
            for (int p = 0; p < BT; p++) inp[p] = 37;
        } else if (pass == 1) {
            tokens = "all tokens distinct";
            V = 2500;
            int* perm = (int*)malloc_check(V * sizeof(int));  // a shuffle of 0..V-1: the sort has work
            for (int i = 0; i < V; i++) perm[i] = i;
            for (int i = V - 1; i > 0; i--) {
                int j = (int)(random_u32(&rng_state) % (uint32_t)(i + 1)), x = perm[i];
                perm[i] = perm[j];
                perm[j] = x;
            }
            memcpy(inp, perm, BT * sizeof(int));
            free(perm);
        } else {
            tokens = "a mix as in text";
            V = 1000;
            for (int p = 0; p < BT; p++) {  // V^u - 1, u uniform in [0, 1): token k with chance ~ 1/(k+1)
                inp[p] = (int)pow((double)V, random_f32(&rng_state)) - 1;
            }
        }
        check_encoder_backward_sort(tokens, inp, BT);
        for (int C : {67, 72}) {  // one column a thread; 16-byte packs (9 of bf16, 18 of float)
            check_encoder_backward_buckets<float>(tokens, inp, B, T, C, V);
            check_encoder_backward_buckets<bf16>(tokens, inp, B, T, C, V);
        }
    }
    free(inp);
}

// ---------- the roofline: each kernel of a training step against its floor ----------
//
// build/gpu_check roofline: GPT-2 124M at B=8, T=1024 as train_gpu trains it, in bf16 and in
// float32. Every row of dev/gpu/roofline.h (a kernel, or a launcher of a few) is run through the
// launcher train_gpu calls, on a model built as train_gpu builds it and on its own tensors, after
// one whole step has filled them; timed as everything here is (the median of 20 runs), a layer's
// rows on layer 0 and multiplied by L. Each is printed beside its floor for an H100 SXM (the
// spec sheet's peaks, as in doc/gpu.md) and for this GPU (its peaks as cuda_device_init computes
// them), with the share of this GPU's floor it reaches. Then the whole step (train_gpu.cu's
// loop on one GPU: zero, forward, backward, norm and clip, AdamW), timed the same way: it adds
// what the rows leave out, the gaps between launches and the host's waits for the losses and the
// norm. With --quick: a tiny model and batch, every launcher once, to check that each row runs
// (test/test_gpu_emu.sh runs it on the emulator, whose times are the CPU's); at full size the
// emulator refuses.

// The timing of a row: the median of 20 runs, or with --quick one run.
template <typename F>
static double roofline_ms(F f) {
    return quick ? median_ms_gpu(f, 0, 1) : median_ms_gpu(f);
}

// A batch of B x T: the start of Tiny Shakespeare (what train_gpu reads first) where the model
// has GPT-2's vocabulary and the file is there, else random ids. Real text matters to the encoder's
// backward pass, whose work depends on how often tokens repeat.
static const char* roofline_batch(GPT2Config c, int B, int T, int** inputs, int** targets) {
    const char* path = "data/tinyshakespeare_train.bin";
    size_t BT = (size_t)B * T;
    FILE* f = c.vocab_size == GPT2_VOCAB ? fopen(path, "rb") : NULL;
    if (f == NULL) {
        *inputs = host_tokens(BT, c.vocab_size);
        *targets = host_tokens(BT, c.vocab_size);
        return "random tokens";
    }
    fclose(f);
    DataLoader dl;
    dataloader_init(&dl, path, B, T, 0, 1, 1, c.vocab_size, 0, 0);
    dataloader_next_batch(&dl);
    *inputs = (int*)malloc_check(BT * sizeof(int));
    *targets = (int*)malloc_check(BT * sizeof(int));
    memcpy(*inputs, dl.inputs, BT * sizeof(int));
    memcpy(*targets, dl.targets, BT * sizeof(int));
    dataloader_free(&dl);
    return path;
}

// This GPU's peaks, as train_gpu's MFU uses them (gpt2/gpu/cuda_utils.cuh).
static RooflinePeaks roofline_device_peaks(void) {
    RooflinePeaks p = {peak_flops_bf16(), cuda_device.peak_flops, cuda_device.peak_bandwidth};
    return p;
}

// The measured table: per row, all its calls of a step; then the sums and the whole step.
static void roofline_print_measured(const Roofline* r, const double* ms, double step_ms) {
    RooflinePeaks h100 = roofline_h100(), here = roofline_device_peaks();
    printf("| # | kernel | launcher | calls | H100 floor ms | floor here ms | measured ms | of floor here "
           "| bound here |\n");
    printf("| ---: | --- | --- | ---: | ---: | ---: | ---: | ---: | --- |\n");
    double sum_h100 = 0, sum_here = 0, sum_ms = 0;
    for (int i = 0; i < r->n; i++) {
        const RooflineRow* row = &r->rows[i];
        int compute;
        double f_h100 = roofline_floor_s(row, h100, NULL) * 1e3, f_here = roofline_floor_s(row, here, &compute) * 1e3;
        double m = ms[i] * row->count;
        printf("| %d | %s | `%s` | %d | %.3f | %.3f | %.3f | %.0f%% | %s |\n", i + 1, row->what, row->launcher,
               row->count, f_h100, f_here, m, 100 * f_here / m, compute ? "compute" : "memory");
        sum_h100 += f_h100;
        sum_here += f_here;
        sum_ms += m;
    }
    printf("| | **the rows** | | | **%.3f** | **%.3f** | **%.3f** | **%.0f%%** | |\n", sum_h100, sum_here, sum_ms,
           100 * sum_here / sum_ms);
    double tokens = (double)r->B * r->T;
    printf("\nthe whole step, measured: %.3f ms, %.0f tokens/s (the rows add up to %.0f%% of it); the floor "
           "allows %.0f tokens/s on an H100 SXM, %.0f on this GPU\n", step_ms, tokens / (step_ms * 1e-3),
           100 * sum_ms / step_ms, tokens / (sum_h100 * 1e-3), tokens / (sum_here * 1e-3));
}

// Times every row of r with run(op), after one step (so that every tensor holds what a step
// leaves in it), then the whole step; prints the table.
template <typename Run, typename Step>
static void roofline_measure(const Roofline* r, Run run, Step step) {
    if (!roofline_check(r)) failures++;
    step();
    cuda_check(cudaDeviceSynchronize());
    double ms[ROOFLINE_MAX_ROWS];
    for (int i = 0; i < r->n; i++) ms[i] = roofline_ms([&] { run(r->rows[i].op); });
    roofline_print_measured(r, ms, roofline_ms(step));
}

// The float32 path: the rows' launchers as train_gpu.cu's gpt2_forward_gpu, gpt2_backward_gpu and its
// training loop call them, on layer 0 where a row is a layer's.
static void roofline_fp32(GPT2Config c, int B, int T, const int* inputs, const int* targets) {
    GPT2 host, m;
    gpt2_build_fresh(&host, c, 42);
    gpt2_build_gpu(&m, &host, B, T);
    gpt2_forward_gpu(&m, inputs, targets, B, T);  // lays the slot out for B x T, the batch on the GPU
    Roofline r;
    roofline_build(&r, c, B, T, 0);
    Shard s = m.shard;
    int C = c.channels, NH = c.num_heads, L = c.num_layers, V = c.vocab_size, Vp = c.padded_vocab_size;
    int BTC = B * T * C;
    ParameterTensors p = m.params, g = m.grads;
    ParameterTensors w0 = shard_parameters_of_layer(p, c, s, 0), g0 = shard_parameters_of_layer(g, c, s, 0);
    ActivationTensors a = m.acts, da = m.grads_acts;
    ActivationTensors a0 = shard_activations_of_layer(a, c, s, B, T, 0);
    ActivationTensors da0 = shard_activations_of_layer(da, c, s, B, T, 0);
    ActivationTensors last = shard_activations_of_layer(a, c, s, B, T, L - 1);
    ActivationTensors dlast = shard_activations_of_layer(da, c, s, B, T, L - 1);
    const float* x = a.encoded;  // layer 0's input, and dx its gradient
    float* dx = da.encoded;
    int* tokens = gpt2_slot_inputs(&m);
    // the one row whose bytes the launcher can report: they must be the table's
    for (int i = 0; i < r.n; i++) {
        if (r.rows[i].op != OP_ZERO_ACT_GRADS) continue;
        double cleared = (double)gpt2_zero_activation_grads_gpu(&m);
        int ok = cleared == r.rows[i].bytes;
        printf("  %s roofline: gpt2_zero_activation_grads_gpu clears %.0f bytes, the table counts %.0f\n",
               ok ? "ok  " : "FAIL", cleared, r.rows[i].bytes);
        if (!ok) failures++;
    }
    auto run = [&](RooflineOp op) {
        switch (op) {
        case OP_ZERO_GRADS: gpt2_zero_grad_gpu(&m); break;
        case OP_ENCODER_FWD: encoder_forward_gpu(a.encoded, tokens, p.wte, p.wpe, B, T, C); break;
        case OP_LN1_FWD: layernorm_forward_gpu(a0.ln1, a0.ln1_mean, a0.ln1_rstd, x, w0.ln1w, w0.ln1b, B, T, C); break;
        case OP_QKV_FWD: matmul_forward_gpu(a0.qkv, a0.ln1, w0.qkvw, w0.qkvb, B, T, C, 3 * C); break;
        case OP_ATTENTION_FWD: attention_forward_gpu(a0.atty, a0.preatt, a0.att, a0.qkv, B, T, C, NH); break;
        case OP_ATTPROJ_FWD: matmul_forward_gpu(a0.attproj, a0.atty, w0.attprojw, w0.attprojb, B, T, C, C); break;
        case OP_RESIDUAL2_FWD: residual_forward_gpu(a0.residual2, x, a0.attproj, BTC); break;
        case OP_LN2_FWD:
            layernorm_forward_gpu(a0.ln2, a0.ln2_mean, a0.ln2_rstd, a0.residual2, w0.ln2w, w0.ln2b, B, T, C);
            break;
        case OP_FC_FWD: matmul_forward_gpu(a0.fch, a0.ln2, w0.fcw, w0.fcb, B, T, C, 4 * C); break;
        case OP_GELU_FWD: gelu_forward_gpu(a0.fch_gelu, a0.fch, 4 * BTC); break;
        case OP_FCPROJ_FWD: matmul_forward_gpu(a0.fcproj, a0.fch_gelu, w0.fcprojw, w0.fcprojb, B, T, 4 * C, C); break;
        case OP_RESIDUAL3_FWD: residual_forward_gpu(a0.residual3, a0.residual2, a0.fcproj, BTC); break;
        case OP_LNF_FWD:
            layernorm_forward_gpu(a.lnf, a.lnf_mean, a.lnf_rstd, last.residual3, p.lnfw, p.lnfb, B, T, C);
            break;
        case OP_LOGITS_FWD: matmul_forward_gpu(a.logits, a.lnf, p.wte, NULL, B, T, C, Vp); break;
        case OP_CLASSIFIER:
            fused_classifier_gpu(a.logits, a.losses, a.logits, gpt2_slot_targets(&m), B, T, V, Vp);
            break;
        case OP_ZERO_ACT_GRADS: gpt2_zero_activation_grads_gpu(&m); break;
        case OP_LOGITS_BWD: matmul_backward_gpu(da.lnf, g.wte, NULL, da.logits, a.lnf, p.wte, B, T, C, Vp); break;
        case OP_LNF_BWD:
            layernorm_backward_gpu(dlast.residual3, g.lnfw, g.lnfb, da.lnf, last.residual3, p.lnfw, a.lnf_mean,
                                   a.lnf_rstd, B, T, C);
            break;
        case OP_RESIDUAL3_BWD: residual_backward_gpu(da0.residual2, da0.fcproj, da0.residual3, BTC); break;
        case OP_FCPROJ_BWD:
            matmul_backward_gpu(da0.fch_gelu, g0.fcprojw, g0.fcprojb, da0.fcproj, a0.fch_gelu, w0.fcprojw, B, T,
                                4 * C, C);
            break;
        case OP_GELU_BWD: gelu_backward_gpu(da0.fch, a0.fch, da0.fch_gelu, 4 * BTC); break;
        case OP_FC_BWD: matmul_backward_gpu(da0.ln2, g0.fcw, g0.fcb, da0.fch, a0.ln2, w0.fcw, B, T, C, 4 * C); break;
        case OP_LN2_BWD:
            layernorm_backward_gpu(da0.residual2, g0.ln2w, g0.ln2b, da0.ln2, a0.residual2, w0.ln2w, a0.ln2_mean,
                                   a0.ln2_rstd, B, T, C);
            break;
        case OP_RESIDUAL2_BWD: residual_backward_gpu(dx, da0.attproj, da0.residual2, BTC); break;
        case OP_ATTPROJ_BWD:
            matmul_backward_gpu(da0.atty, g0.attprojw, g0.attprojb, da0.attproj, a0.atty, w0.attprojw, B, T, C, C);
            break;
        case OP_ATTENTION_BWD:
            attention_backward_gpu(da0.qkv, da0.preatt, da0.att, da0.atty, a0.qkv, a0.att, B, T, C, NH);
            break;
        case OP_QKV_BWD:
            matmul_backward_gpu(da0.ln1, g0.qkvw, g0.qkvb, da0.qkv, a0.ln1, w0.qkvw, B, T, C, 3 * C);
            break;
        case OP_LN1_BWD:
            layernorm_backward_gpu(dx, g0.ln1w, g0.ln1b, da0.ln1, x, w0.ln1w, a0.ln1_mean, a0.ln1_rstd, B, T, C);
            break;
        case OP_ENCODER_BWD: encoder_backward_gpu(g.wte, g.wpe, da.encoded, tokens, B, T, C); break;
        case OP_MEAN_LOSS: mean_loss_gpu(&m, a.losses, B * T, 1); break;
        case OP_GRAD_NORM: gpt2_grad_norm_gpu(&m, 1, 1.0f); break;
        case OP_ADAMW: gpt2_update_gpu(&m, 3e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, 1); break;
        default: fail("roofline: float32 has no row %d", (int)op);
        }
    };
    roofline_measure(&r, run, [&] {
        gpt2_zero_grad_gpu(&m);
        gpt2_forward_gpu(&m, inputs, targets, B, T);
        gpt2_backward_gpu(&m);
        gpt2_grad_norm_gpu(&m, 1, 1.0f);
        gpt2_update_gpu(&m, 3e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, 1);
    });
    gpt2_free_gpu(&m);
    gpt2_free(&host);
}

// The bf16 path: the rows' launchers as train_gpu.cu's bf16 gpt2_forward_gpu, gpt2_backward_gpu
// and its training loop call them, on layer 0 where a row is a layer's.
static void roofline_bf16(GPT2Config c, int B, int T, const int* inputs, const int* targets) {
    GPT2 host;
    GPT2BF16 m;
    gpt2_build_fresh(&host, c, 42);
    gpt2_build_bf16(&m, &host, B, T);
    GPT2* base = &m.base;
    gpt2_forward_gpu(&m, inputs, targets, B, T);  // the batch on the GPU, the layout for B x T
    Roofline r;
    roofline_build(&r, c, B, T, 1);
    Shard s = base->shard;
    int C = c.channels, NH = c.num_heads, L = c.num_layers, V = c.vocab_size, Vp = c.padded_vocab_size;
    ParameterTensors p = base->params, g = base->grads, g0 = shard_parameters_of_layer(g, c, s, 0);
    ParameterTensorsOf<bf16> w = weights_bf16(&m), w0 = shard_parameters_of_layer(w, c, s, 0);
    ActivationTensorsOf<bf16> a = activations_bf16(&m, 0), last = activations_bf16(&m, L - 1);
    ActivationTensorsOf<bf16> da = activation_grads_bf16(&m);
    const bf16* x = a.encoded;  // layer 0's input; its gradient goes to dresidual (da.residual3)
    int* tokens = gpt2_slot_inputs(base);
    auto run = [&](RooflineOp op) {
        switch (op) {
        case OP_ZERO_GRADS: gpt2_zero_grad_gpu(base); break;
        case OP_ENCODER_FWD: encoder_forward_gpu(a.encoded, tokens, p.wte, p.wpe, B, T, C); break;
        case OP_LN1_FWD: layernorm_forward_gpu(a.ln1, a.ln1_mean, a.ln1_rstd, x, w0.ln1w, w0.ln1b, B, T, C); break;
        case OP_QKV_FWD: matmul_forward_gpu(a.qkv, a.ln1, w0.qkvw, w0.qkvb, B, T, C, 3 * C); break;
        case OP_ATTENTION_FWD: flash_attention_forward_gpu(a.atty, a.att_lse, a.qkv, B, T, C, NH); break;
        case OP_ATTPROJ_FWD:
            matmul_residual_forward_gpu(a.residual2, a.atty, w0.attprojw, w0.attprojb, x, B, T, C, C);
            break;
        case OP_LN2_FWD:
            layernorm_forward_gpu(a.ln2, a.ln2_mean, a.ln2_rstd, a.residual2, w0.ln2w, w0.ln2b, B, T, C);
            break;
        case OP_FC_FWD: matmul_gelu_forward_gpu(a.fch_gelu, a.fch, a.ln2, w0.fcw, w0.fcb, B, T, C, 4 * C); break;
        case OP_FCPROJ_FWD:
            matmul_residual_forward_gpu(a.residual3, a.fch_gelu, w0.fcprojw, w0.fcprojb, a.residual2, B, T, 4 * C, C);
            break;
        case OP_LNF_FWD:
            layernorm_forward_gpu(a.lnf, a.lnf_mean, a.lnf_rstd, last.residual3, p.lnfw, p.lnfb, B, T, C);
            break;
        case OP_LOGITS_FWD: matmul_forward_gpu(a.logits, a.lnf, w.wte, NULL, B, T, C, Vp); break;
        case OP_CLASSIFIER:
            fused_classifier_gpu(a.logits, a.losses, a.logits, gpt2_slot_targets(base), B, T, V, Vp);
            break;
        case OP_LOGITS_BWD: matmul_backward_set_dinp_gpu(da.lnf, g.wte, NULL, a.logits, a.lnf, w.wte, B, T, C, Vp); break;
        case OP_ZERO_ACT_GRADS: cuda_check(cudaMemset(da.residual3, 0, (size_t)B * T * C * sizeof(bf16))); break;
        case OP_LNF_BWD:
            layernorm_backward_gpu(da.residual3, g.lnfw, g.lnfb, da.lnf, last.residual3, p.lnfw, a.lnf_mean,
                                   a.lnf_rstd, B, T, C);
            break;
        case OP_FCPROJ_BWD:
            gelu_matmul_backward_set_dinp_gpu(da.fch, g0.fcprojw, g0.fcprojb, da.fcproj, a.fch_gelu, w0.fcprojw, a.fch, B, T,
                                              4 * C, C);
            break;
        case OP_FC_BWD: matmul_backward_set_dinp_gpu(da.ln2, g0.fcw, g0.fcb, da.fch, a.ln2, w0.fcw, B, T, C, 4 * C); break;
        case OP_LN2_BWD:
            layernorm_backward_gpu(da.residual2, g0.ln2w, g0.ln2b, da.ln2, a.residual2, w0.ln2w, a.ln2_mean,
                                   a.ln2_rstd, B, T, C);
            break;
        case OP_ATTPROJ_BWD:
            matmul_backward_set_dinp_gpu(da.atty, g0.attprojw, g0.attprojb, da.attproj, a.atty, w0.attprojw, B, T, C, C);
            break;
        case OP_ATTENTION_BWD:
            flash_attention_backward_set_dinp_gpu(da.qkv, da.atty, a.qkv, a.atty, a.att_lse, B, T, C, NH);
            break;
        case OP_QKV_BWD: matmul_backward_set_dinp_gpu(da.ln1, g0.qkvw, g0.qkvb, da.qkv, a.ln1, w0.qkvw, B, T, C, 3 * C); break;
        case OP_LN1_BWD:
            layernorm_backward_gpu(da.residual3, g0.ln1w, g0.ln1b, da.ln1, x, w0.ln1w, a.ln1_mean, a.ln1_rstd, B, T, C);
            break;
        case OP_ENCODER_BWD: encoder_backward_gpu(g.wte, g.wpe, (const bf16*)da.encoded, tokens, B, T, C); break;
        case OP_MEAN_LOSS: mean_loss_gpu(base, a.losses, B * T, 1); break;
        case OP_GRAD_NORM: gpt2_grad_norm_gpu(base, 1, 1.0f); break;
        case OP_ADAMW: gpt2_update_gpu(&m, 3e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, 1); break;
        default: fail("roofline: bf16 has no row %d", (int)op);
        }
    };
    roofline_measure(&r, run, [&] {
        gpt2_zero_grad_gpu(base);
        gpt2_forward_gpu(&m, inputs, targets, B, T);
        gpt2_backward_gpu(&m);
        gpt2_grad_norm_gpu(base, 1, 1.0f);
        gpt2_update_gpu(&m, 3e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, 1);
    });
    gpt2_free_bf16(&m);
    gpt2_free(&host);
}

// Both paths at GPT-2 124M's shapes (B=8, T=1024: train_gpu's defaults), or with --quick on a tiny
// model; bf16 where the GPU has bf16 tensor cores.
static void check_roofline(void) {
    GPT2Config c = quick ? tiny_config() : gpt2_config_for_depth(12);
    int B = quick ? 2 : 8, T = quick ? 32 : 1024;
#ifdef CUDA_EMU
    if (!quick) fail("roofline: the emulator would take hours at GPT-2 124M's size; run it --quick");
    printf("(the emulator: the times below are the CPU's, a check that every row runs, not a measurement)\n");
#endif
    int *inputs, *targets;
    const char* batch = roofline_batch(c, B, T, &inputs, &targets);
    printf("roofline L=%d C=%d NH=%d V=%d Vp=%d, B=%d T=%d (%s); this GPU's floors from its peaks: %.0f TFLOP/s "
           "bf16 tensor, %.1f TFLOP/s float32, %.0f GB/s\n", c.num_layers, c.channels, c.num_heads, c.vocab_size,
           c.padded_vocab_size, B, T, batch, peak_flops_bf16() / 1e12, cuda_device.peak_flops / 1e12,
           cuda_device.peak_bandwidth / 1e9);
    if (cuda_device.prop.major >= 8) {
        printf("\nbf16 (train_gpu -p bf16)\n\n");
        roofline_bf16(c, B, T, inputs, targets);
    }
    printf("\nfloat32 (train_gpu -p fp32)\n\n");
    roofline_fp32(c, B, T, inputs, targets);
    free(inputs);
    free(targets);
}

// ---------- main ----------

// gemm_fp32 picks 128x128 tiles when there are enough of them for the SMs: pretending the GPU has
// one SM makes the small checks run the 128x128 kernels too. So each runs in both tile sizes.
static void check_matmul_small(void) {
    int num_sms = cuda_num_sms;
    for (int pass = 0; pass < 2; pass++) {
        cuda_num_sms = pass == 0 ? num_sms : 1;
        printf("(%s tiles)\n", pass == 0 ? "64x64" : "128x128");
        check_matmul(3, 37, 67, 131, 1, 0);   // nothing a multiple of 4: the scalar paths
        check_matmul(2, 64, 64, 192, 0, 0);   // aligned: the float4 paths
        check_matmul(1, 300, 260, 520, 1, 0); // partial edge tiles
        check_matmul(3, 1, 64, 192, 1, 0);    // three rows: a step of generation for 3 sequences
    }
    cuda_num_sms = num_sms;
    // Split-K (64x64 tiles): few tiles and a long k, as dweight's products have (k = B*T). Above,
    // only dinp of the 300-row case (k = 520) split; here the edges again (1041 = 65 x 16 + 1,
    // nothing a multiple of 4), every layout, alpha, bias and the old C, and an unsplit control.
    printf("(64x64 tiles, split-K)\n");
    expect_split("dweight of 53x37, k 1041", fp32_slices(53, 37, 1041), true);
    expect_split("dweight of 40x24, k 1024", fp32_slices(40, 24, 1024), true);
    expect_split("sgemm 37x53x200", fp32_slices(37, 53, 200), false);
    check_matmul(3, 347, 37, 53, 1, 0);   // dweight 53x37 over k = 1041: split
    check_matmul(4, 256, 24, 40, 1, 0);   // dweight 40x24 over k = 1024, float4 rows: split
    for (int layout = 0; layout < 4; layout++) {
        check_gemm_fp32(37, 53, 1041, layout & 1, layout & 2, 0.5f, 1);
        check_gemm_fp32(64, 128, 768, layout & 1, layout & 2, 1.0f, layout == 0);
    }
    check_gemm_fp32(37, 53, 200, false, false, 0.5f, 1);  // unsplit
}

static void check_attention_small(void) {
    int num_sms = cuda_num_sms;
    for (int pass = 0; pass < 2; pass++) {
        cuda_num_sms = pass == 0 ? num_sms : 1;
        printf("(%s tiles)\n", pass == 0 ? "64x64" : "128x128");
        check_attention(2, 37, 24, 3, 0);     // hs = 8, T not a multiple of anything
        check_attention(1, 300, 128, 2, 0);   // hs = 64, T over two tiles: skipped causal tiles
    }
    cuda_num_sms = num_sms;
}

// Whether the command line names it: for the sections that run only when asked for.
static int named(int argc, char** argv, const char* name) {
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], name) == 0) return 1;
    }
    return 0;
}

static int wanted(int argc, char** argv, const char* name) {
    int any = 0;
    for (int i = 1; i < argc; i++) {
        if (argv[i][0] == '-') continue;
        any = 1;
        if (strcmp(argv[i], name) == 0) return 1;
    }
    return !any;
}

// The bf16 path's sections (main's are the float32 path's), with GPT-2 124M's shapes for timing.
static void check_bf16_path(int argc, char** argv, int bench) {
    const int B = 4, T = 1024, C = 768, NH = 12, Vp = 50304;
    if (wanted(argc, argv, "matmul_bf16")) {
        check_gemm_bf16_small();
        check_gemm_bf16_wgmma();
        if (!quick) {
            for (int b : {8, 64}) {  // GPT-2 124M's products at B = 8 and 64 (T = 1024)
                const int N = b * T;
                time_matmul_bf16("qkv", b, N, C, 3 * C);
                time_matmul_bf16("attproj", b, N, C, C);
                time_matmul_bf16("fc", b, N, C, 4 * C);
                time_matmul_bf16("fcproj", b, N, 4 * C, C);
                time_matmul_bf16("classifier", b, N, C, Vp);
            }
            report_matmul_table();
        }
    }
    if (wanted(argc, argv, "attention_bf16")) {
        // both kernels, every compiled head size (16, 32, 64, 128); T below, at and past the 64- and
        // 128-row blocks and the 32- and 64-row tiles, the stage rings wrapping (T = 200: the
        // forward's second block takes 4 key tiles through 3 stages); T = 1
        for (FlashKernels k : {FLASH_CUDA_CORES, FLASH_TENSOR_CORES}) {
            check_attention_bf16(2, 29, 32, 2, 0, k);
            check_attention_bf16(1, 70, 64, 2, 0, k);
            check_attention_bf16(2, 67, 128, 2, 0, k);
            check_attention_bf16(1, 33, 256, 2, 0, k);
            check_attention_bf16(1, 1, 64, 1, 0, k);
            check_attention_bf16(1, 150, 64, 4, 0, k);
            check_attention_bf16(1, 97, 256, 2, 0, k);
            check_attention_bf16(2, 200, 128, 2, 0, k);
            check_attention_bf16(3, 130, 64, 2, 0, k);
            if (!quick) check_attention_bf16(B, T, C, NH, bench, k);
        }
        // the Hopper forward at its head sizes (64, 128): T past its 128-row blocks, the second
        // consumer's rows partly or wholly past T, 5 or 6 key tiles (its 4 stages wrap); the
        // backward (mma.sync's) after it once, as the backward reads out and lse
        if (wgmma_available()) {
            const int shapes[][5] = {{2, 67, 128, 2, 1}, {1, 1, 64, 1, 0}, {1, 97, 256, 2, 0},
                                     {2, 193, 192, 3, 0}, {1, 300, 128, 2, 0}, {1, 330, 256, 2, 0}};  // B, T, C, NH, backward
            for (const auto& s : shapes) check_attention_bf16(s[0], s[1], s[2], s[3], 0, FLASH_WGMMA, s[4]);
            if (!quick) check_attention_bf16(B, T, C, NH, bench, FLASH_WGMMA, 0);
        } else {
            printf("(attention bf16, wgmma forward: skipped, not a 9.0 GPU with sm_90a code)\n");
        }
    }
    if (wanted(argc, argv, "attention_paged_bf16")) check_attention_paged_cases<bf16>(bench);
    if (!quick && wanted(argc, argv, "memory")) {
        // what GPT-2 124M at T=1024 needs, per precision, and the largest B this GPU holds
        GPT2Config d12 = gpt2_config_for_depth(12);
        size_t n = 0, sizes[NUM_PARAMETER_TENSORS], layer[NUM_PARAMETER_TENSORS];
        parameter_sizes(sizes, layer, d12);
        n = sum_sizes(sizes, NUM_PARAMETER_TENSORS);
        size_t total = cuda_device.prop.totalGlobalMem, usable = total - ((size_t)1 << 30);  // 1 GiB: CUDA's own
        printf("memory of d12 at T=1024, of %.1f GiB less 1 GiB for CUDA itself\n", total / 1073741824.0);
        printf("  fp32: %.2f GiB + %.3f GiB per sequence: largest B = %d\n",
               gpt2_fp32_bytes(d12, n, 0, 1024) / 1073741824.0,
               (gpt2_fp32_bytes(d12, n, 2, 1024) - gpt2_fp32_bytes(d12, n, 1, 1024)) / 1073741824.0,
               largest_batch(gpt2_fp32_bytes, d12, n, 1024, usable));
        printf("  bf16: %.2f GiB + %.3f GiB per sequence: largest B = %d\n",
               gpt2_bf16_bytes(d12, n, 0, 1024) / 1073741824.0,
               (gpt2_bf16_bytes(d12, n, 2, 1024) - gpt2_bf16_bytes(d12, n, 1, 1024)) / 1073741824.0,
               largest_batch(gpt2_bf16_bytes, d12, n, 1024, usable));
    }
    if (wanted(argc, argv, "adamw_bf16")) check_adamw_bf16(tiny_config());
    if (wanted(argc, argv, "model_bf16")) {
        check_model_bf16(tiny_config(), 3, 61);
        if (!quick) check_model_bf16(gpt2_config_for_depth(12), 2, 64);
    }
}


int main(int argc, char** argv) {
    int device_only = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--quick") == 0) quick = 1;
        else if (strcmp(argv[i], "--device") == 0) device_only = 1;
        else if (argv[i][0] == '-') {
            fprintf(stderr, "usage: %s [--quick | --device] [copy encoder layernorm matmul attention gelu residual "
                    "classifier clip adamw model attention_paged matmul_bf16 attention_bf16 attention_paged_bf16 "
                    "adamw_bf16 model_bf16 memory roofline]\n", argv[0]);
            return 1;
        }
    }
#ifdef USE_CUBLAS
    cuda_make_target = "build/gpu_check_cublas";  // named by the errors that say to rebuild
#else
    cuda_make_target = "build/gpu_check";
#endif
    cuda_device_init();  // no device: one line, exit 1
    cuda_device_print(0);
    if (device_only) return 0;
    int bench = !quick;
    // GPT-2 124M's shapes, with a batch that the CPU reference finishes in seconds
    const int B = 4, T = 1024, C = 768, NH = 12, V = 50257, Vp = 50304;
    if (!quick && wanted(argc, argv, "copy")) time_copy();
    if (wanted(argc, argv, "encoder")) {
        for (int c : {67, 64}) {  // one column a thread; 16-byte packs
            check_encoder<float>(3, 37, c, 101, 0);
            check_encoder<bf16>(3, 37, c, 101, 0);
        }
        check_encoder_backward_bucket_cases();
        if (!quick) {
            check_encoder<float>(B, T, C, V, bench);
            check_encoder<bf16>(B, T, C, V, bench);
        }
    }
    if (wanted(argc, argv, "layernorm")) {
        check_layernorm_cases();
        if (!quick) {
            check_layernorm<float>(B, T, C, bench);
            check_layernorm<bf16>(B, T, C, bench);
        }
    }
    if (wanted(argc, argv, "matmul")) {
        check_matmul_small();
        if (!quick) {
            check_matmul(B, T, C, 3 * C, 1, bench);  // qkv
            check_matmul(B, T, C, C, 1, bench);      // attention projection
            check_matmul(B, T, C, 4 * C, 1, bench);  // fc
            check_matmul(B, T, 4 * C, C, 1, bench);  // fc projection
            check_matmul(B, T, C, Vp, 0, bench);     // classifier (the logits, no bias)
        }
    }
    if (wanted(argc, argv, "attention")) {
        check_attention_small();
        if (!quick) check_attention(B, T, C, NH, bench);
    }
    if (wanted(argc, argv, "attention_paged")) {
        check_attention_paged_cases<float>(bench);
        check_generation();
    }
    if (wanted(argc, argv, "gelu")) {
        check_gelu(1001, 0);
        if (!quick) check_gelu(B * T * 4 * C, bench);
    }
    if (wanted(argc, argv, "residual")) {
        check_residual(1001, 0);
        if (!quick) check_residual(B * T * C, bench);
    }
    if (wanted(argc, argv, "classifier")) {
        check_classifier_cases();
        if (!quick) {
            check_classifier<float>(B, T, V, Vp, -4, 4, bench);
            check_classifier<bf16>(B, T, V, Vp, -4, 4, bench);
        }
    }
    if (wanted(argc, argv, "clip")) {
        check_clip(100003, 0, 1, 1.0f, 0);    // norm ~1.8: clipped
        check_clip(100003, 1, 1, 10.0f, 0);   // not clipped; the vector loads start 3 floats in
        check_clip(100003, 2, 4, 1.0f, 0);    // the mean of 4 parts, norm ~0.46: scaled, not clipped
        check_clip(5, 3, 1, 1.0f, 0);         // fewer floats than a 16-byte boundary is away
        check_norm_ranges();
        check_clip(2500001, 1, 1, 1.0f, 0);   // over 2 x 512 x 256 float4s: two loads in flight
        if (!quick) check_clip(124475904, 0, 1, 1.0f, bench);
    }
    if (wanted(argc, argv, "adamw")) {
        check_adamw(tiny_config(), 0);
        if (!quick) check_adamw(gpt2_config_for_depth(12), bench);
    }
    if (wanted(argc, argv, "model")) {
        check_model(tiny_config(), 3, 61, quick ? 3 : 10);
        if (!quick) check_model(gpt2_config_for_depth(12), 2, 64, 10);
    }
    check_bf16_path(argc, argv, bench);
    if (named(argc, argv, "roofline")) check_roofline();
    if (failures > 0) {
        printf("gpu_check: %d FAILED\n", failures);
        return 1;
    }
    printf("gpu_check: all passed\n");
    return 0;
}

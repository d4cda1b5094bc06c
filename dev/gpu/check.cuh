// dev/gpu/check.cuh: what a program that checks GPU kernels against the CPU needs, shared by
// dev/gpu/gpu_check.cu and the kernel ladder (dev/kernels/): random inputs from a fixed seed, device
// copies, outputs poisoned with NaN before a kernel writes them, the element-wise comparison
//     |gpu - cpu| <= atol + rtol * |cpu|   (NaN never passes)
// with one line per output and a count of failures, and the median time of a launch in CUDA events.
// It includes nothing itself: a program includes gpt2/random.h, gpt2/io.h and
// gpt2/gpu/cuda_utils.cuh (or what includes them) first.

#ifndef DEV_GPU_CHECK_CUH
#define DEV_GPU_CHECK_CUH

static uint64_t rng_state = 1337;
static int failures = 0;

static float* host_random(size_t n, float lo, float hi) {
    float* x = (float*)malloc_check(n * sizeof(float));
    for (size_t i = 0; i < n; i++) x[i] = lo + (hi - lo) * random_f32(&rng_state);
    return x;
}
static int* host_tokens(size_t n, int max_id) {
    int* x = (int*)malloc_check(n * sizeof(int));
    for (size_t i = 0; i < n; i++) x[i] = (int)(random_u32(&rng_state) % (uint32_t)max_id);
    return x;
}
static float* host_zeros(size_t n) { return (float*)calloc_check(n, sizeof(float)); }
static float* to_device(const float* x, size_t n) {
    float* d;
    cuda_check(cudaMalloc((void**)&d, n * sizeof(float)));
    cuda_check(cudaMemcpy(d, x, n * sizeof(float), cudaMemcpyHostToDevice));
    return d;
}
static int* to_device_int(const int* x, size_t n) {
    int* d;
    cuda_check(cudaMalloc((void**)&d, n * sizeof(int)));
    cuda_check(cudaMemcpy(d, x, n * sizeof(int), cudaMemcpyHostToDevice));
    return d;
}
// A device output, every float NaN (all bits set), so that an element the kernel never writes fails.
static float* device_poisoned(size_t n) {
    float* d;
    cuda_check(cudaMalloc((void**)&d, n * sizeof(float)));
    cuda_check(cudaMemset(d, 0xff, n * sizeof(float)));
    return d;
}
static float* to_host(const float* d, size_t n) {
    float* x = (float*)malloc_check(n * sizeof(float));
    cuda_check(cudaMemcpy(x, d, n * sizeof(float), cudaMemcpyDeviceToHost));
    return x;
}

// Compares n floats of a host array (gpu) with the reference; mask, if not NULL, says which to
// compare; slack, if not NULL, is added to each value's allowed error (a bound that differs from
// value to value). Prints one line; counts a failure.
static int compare_host_slack(const char* what, const float* gpu, const float* ref, size_t n, float atol,
                              float rtol, const unsigned char* mask, const float* slack) {
    size_t bad = 0, first_bad = 0, compared = 0;
    double max_err = 0.0, max_ratio = 0.0;
    for (size_t i = 0; i < n; i++) {
        if (mask != NULL && !mask[i]) continue;
        compared++;
        double err = fabs((double)gpu[i] - (double)ref[i]);
        double allowed = atol + rtol * fabs((double)ref[i]) + (slack != NULL ? slack[i] : 0.0);
        int ok = err <= allowed;  // false for NaN
        if (!ok) {
            if (bad == 0) first_bad = i;
            bad++;
        }
        if (err > max_err || err != err) max_err = err;
        if (allowed > 0 && err / allowed > max_ratio) max_ratio = err / allowed;
    }
    if (bad > 0) {
        printf("  FAIL %-34s %zu of %zu differ; first at %zu: gpu %.9g cpu %.9g (atol %g rtol %g)\n", what,
               bad, compared, first_bad, gpu[first_bad], ref[first_bad], atol, rtol);
        failures++;
        return 1;
    }
    printf("  ok   %-34s %zu values, max |diff| %.3g (%.0f%% of tolerance)\n", what, compared, max_err,
           100.0 * max_ratio);
    return 0;
}
static int compare_host(const char* what, const float* gpu, const float* ref, size_t n, float atol,
                        float rtol, const unsigned char* mask) {
    return compare_host_slack(what, gpu, ref, n, atol, rtol, mask, NULL);
}
static int compare(const char* what, const float* dev, const float* ref, size_t n, float atol, float rtol) {
    float* h = to_host(dev, n);
    int r = compare_host(what, h, ref, n, atol, rtol, NULL);
    free(h);
    return r;
}
static int compare_scalar(const char* what, double gpu, double ref, double atol, double rtol) {
    float g = (float)gpu, r = (float)ref;
    return compare_host(what, &g, &r, 1, (float)atol, (float)rtol, NULL);
}

// A property that must hold, one line like the comparisons'.
static int check_flag(const char* what, bool ok) {
    printf("  %s %s\n", ok ? "ok  " : "FAIL", what);
    if (!ok) failures++;
    return ok;
}

// ---------- bf16 ----------

static float max_abs(const float* x, size_t n) {
    float m = 0.0f;
    for (size_t i = 0; i < n; i++) m = fmaxf(m, fabsf(x[i]));
    return m;
}

// Rounds x in place to the nearest bf16 (so the CPU reference reads what the GPU reads) and
// returns a device copy in bf16.
static bf16* to_device_bf16(float* x, size_t n) {
    bf16* h = (bf16*)malloc_check(n * sizeof(bf16));
    for (size_t i = 0; i < n; i++) {
        h[i] = __float2bfloat16(x[i]);
        x[i] = __bfloat162float(h[i]);
    }
    bf16* d;
    cuda_check(cudaMalloc((void**)&d, n * sizeof(bf16)));
    cuda_check(cudaMemcpy(d, h, n * sizeof(bf16), cudaMemcpyHostToDevice));
    free(h);
    return d;
}
// A bf16 device output, every value NaN (0xffff).
static bf16* device_poisoned_bf16(size_t n) {
    bf16* d;
    cuda_check(cudaMalloc((void**)&d, n * sizeof(bf16)));
    cuda_check(cudaMemset(d, 0xff, n * sizeof(bf16)));  // NaN
    return d;
}
static float* to_host_bf16(const bf16* d, size_t n) {
    bf16* h = (bf16*)malloc_check(n * sizeof(bf16));
    cuda_check(cudaMemcpy(h, d, n * sizeof(bf16), cudaMemcpyDeviceToHost));
    float* x = (float*)malloc_check(n * sizeof(float));
    for (size_t i = 0; i < n; i++) x[i] = __bfloat162float(h[i]);
    free(h);
    return x;
}

// One rounding to bf16 moves a value v by at most 2^-8 |v| (8 significant bits): the relative
// tolerance of a bf16 output.
static const float BF16_RTOL = 1.0f / 256;

// ---------- attention's references ----------

// lse (rows = B NH T): the log-sum-exp of each row's causal scores 0..t, from the CPU's preatt
// (B, NH, T, T), which the flash kernels keep for the backward.
static void attention_lse_ref(float* lse, const float* preatt, size_t rows, int T) {
    for (size_t r = 0; r < rows; r++) {  // row r = (b NH + h) T + t of preatt holds scores 0..t
        const float* s = preatt + r * T;
        int t = (int)(r % T);
        double m = -INFINITY, sum = 0.0;
        for (int j = 0; j <= t; j++) m = fmax(m, s[j]);
        for (int j = 0; j <= t; j++) sum += exp(s[j] - m);
        lse[r] = (float)(m + log(sum));
    }
}

// The tensor cores round P to bf16 before O = P V: each term p v of out_td moves by at most 2^-9
// of itself, so out_td may move by 2^-9 sum_t2 P_t,t2 |v_t2,d|. slack (B, T, C) gets twice that,
// per value, from the CPU's att (B, NH, T, T) and the values of qkv (B, T, 3C).
static void attention_out_bf16_slack(float* slack, const float* att, const float* qkv, int B, int T, int C, int NH) {
    int hs = C / NH;
    const double u2 = 2.0 / 512;  // twice a bf16 rounding's 2^-9
#pragma omp parallel for collapse(2)
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int t = 0; t < T; t++) {
                const float* P = att + (((size_t)b * NH + h) * T + t) * T;
                for (int d = 0; d < hs; d++) {
                    double sum = 0.0;
                    for (int j = 0; j <= t; j++) sum += P[j] * fabs(qkv[((size_t)b * T + j) * 3 * C + 2 * C + h * hs + d]);
                    slack[((size_t)b * T + t) * C + h * hs + d] = (float)(u2 * sum);
                }
            }
}

// ---------- tolerances and timing ----------

// atol for a float32 sum of K products of U(-1,1) numbers, as both sides compute it. Such a sum
// has size ~ sqrt(K)/3, and 1e-5 of sqrt(K) covers the rounding of the result and of a few blocked
// partial sums. A sum accumulated one term after another also drifts, and at large K that
// dominates: each addition rounds a partial sum of size ~ sqrt(k)/3 by up to 2^-24 of it, a random
// walk whose deviation is about 2^-24 K / 7; allow 6 of those on each side (K = 768: 1.1e-4 more;
// K = 50304, the logits' dinp: 5.1e-3 more).
static float fp32_sum_atol(double K) { return (float)(1e-5 * sqrt(K) + 12.0 * K / 7.0 * 0x1p-24); }

static int cmp_double(const void* a, const void* b) {
    double x = *(const double*)a, y = *(const double*)b;
    return x < y ? -1 : x > y;
}
static double median(double* x, int n) {
    qsort(x, n, sizeof(double), cmp_double);
    return n % 2 ? x[n / 2] : 0.5 * (x[n / 2 - 1] + x[n / 2]);
}

// Median milliseconds of f() on the GPU: `warmup` runs (3), then `runs` runs (20, at most)
// timed with CUDA events.
template <typename F>
static double median_ms_gpu(F f, int warmup = 3, int runs = 20) {
    if (runs > 20) runs = 20;
    cudaEvent_t start, stop;
    cuda_check(cudaEventCreate(&start));
    cuda_check(cudaEventCreate(&stop));
    for (int i = 0; i < warmup; i++) f();
    cuda_check(cudaDeviceSynchronize());
    double ms[20];
    for (int i = 0; i < runs; i++) {
        cuda_check(cudaEventRecord(start));
        f();
        cuda_check(cudaEventRecord(stop));
        cuda_check(cudaEventSynchronize(stop));
        float t;
        cuda_check(cudaEventElapsedTime(&t, start, stop));
        ms[i] = t;
    }
    cuda_check(cudaEventDestroy(start));
    cuda_check(cudaEventDestroy(stop));
    return median(ms, runs);
}

#endif  // DEV_GPU_CHECK_CUH

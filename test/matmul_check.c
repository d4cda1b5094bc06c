// test/matmul_check.c: the fast matmul_forward_fast / matmul_backward_fast of gpt2/cpu_layers.h
// against the naive reference loops beside them, on shapes chosen to hit every edge of the blocking: rows
// B*T = 1, 7, 65, 257 (257 > MM_MC: two row blocks), C and OC not multiples of the register tile
// or of the vector width, C > MM_KC (several k blocks), OC > MM_NC (several column blocks),
// bias NULL and not, dbias NULL and not, and gradients that start non-zero (backward must add).
// Then determinism: 1 thread and all threads must give bit-identical results.
//
// Also the fast functions that stand in for libm's: tanh_vec (GELU) and exp_vec (softmax) against
// tanh and exp in double on every 61st float from 1e-30 to 12 (tanh) or 87 (exp), both signs,
// within 2 ulp of the correctly rounded result (Cephes' bounds are ~1.3 ulp), and at 0, +-inf,
// NaN and far below exp's range.
//
// Tolerance: float32 dot products over K terms carry rounding error proportional to the sum of
// the absolute values of the terms, so each element is compared with
//   |fast - naive| <= 1e-5 * (|naive| + sum |terms|) + 1e-6
// where sum |terms| is the naive product of the absolute values. A missing or doubled term is
// of order sum|terms| / K and fails this for every K used here; NaN never passes.
// Exit status: 0 when every check passes, 1 otherwise.

#include "../gpt2/cpu_layers.h"
#include "../gpt2/random.h"

static uint64_t rng_state = 42;

static float* random_array(size_t n) {
    float* x = (float*)malloc_check(n * sizeof(float));
    for (size_t i = 0; i < n; i++) x[i] = 2.0f * random_f32(&rng_state) - 1.0f;
    return x;
}

static float* copy_array(const float* x, size_t n) {
    float* y = (float*)malloc_check(n * sizeof(float));
    memcpy(y, x, n * sizeof(float));
    return y;
}

static float* abs_array(const float* x, size_t n) {
    float* y = (float*)malloc_check(n * sizeof(float));
    for (size_t i = 0; i < n; i++) y[i] = fabsf(x[i]);
    return y;
}

// Returns the number of elements out of tolerance, and prints the worst one.
static int compare(const char* what, const float* fast, const float* ref, const float* abs_bound,
                   size_t n) {
    int bad = 0;
    double worst = 0.0;
    size_t worst_i = 0;
    for (size_t i = 0; i < n; i++) {
        double tol = 1e-5 * (fabs((double)ref[i]) + abs_bound[i]) + 1e-6;
        double err = fabs((double)fast[i] - (double)ref[i]);
        if (!(err <= tol)) bad++;
        double ratio = err / tol;
        if (!(ratio <= worst)) { worst = ratio; worst_i = i; }
    }
    if (bad > 0) {
        printf("  FAIL %s: %d of %zu elements out of tolerance; worst [%zu] fast %.8g naive %.8g\n",
               what, bad, n, worst_i, fast[worst_i], ref[worst_i]);
    }
    return bad;
}

// One shape: forward and backward, fast vs naive. Returns the number of failures.
static int check_shape(int BT, int C, int OC, int use_bias) {
    size_t ni = (size_t)BT * C, nw = (size_t)OC * C, no = (size_t)BT * OC;
    float* inp = random_array(ni);
    float* weight = random_array(nw);
    float* bias = use_bias ? random_array(OC) : NULL;
    float* dout = random_array(no);
    float* inp_abs = abs_array(inp, ni);
    float* weight_abs = abs_array(weight, nw);
    float* bias_abs = use_bias ? abs_array(bias, OC) : NULL;
    float* dout_abs = abs_array(dout, no);
    int fails = 0;

    // forward; the output starts as garbage, which forward must overwrite
    float* out_fast = random_array(no);
    float* out_ref = random_array(no);
    float* out_bound = (float*)malloc_check(no * sizeof(float));
    matmul_forward_fast(out_fast, inp, weight, bias, 1, BT, C, OC);
    matmul_forward_naive(out_ref, inp, weight, bias, 1, BT, C, OC);
    matmul_forward_naive(out_bound, inp_abs, weight_abs, bias_abs, 1, BT, C, OC);
    fails += compare("forward out", out_fast, out_ref, out_bound, no) > 0;

    // backward, accumulating into gradients that start non-zero
    float* dinp_fast = random_array(ni);
    float* dweight_fast = random_array(nw);
    float* dbias_fast = use_bias ? random_array(OC) : NULL;
    float* dinp_ref = copy_array(dinp_fast, ni);
    float* dweight_ref = copy_array(dweight_fast, nw);
    float* dbias_ref = use_bias ? copy_array(dbias_fast, OC) : NULL;
    float* dinp_bound = abs_array(dinp_fast, ni);
    float* dweight_bound = abs_array(dweight_fast, nw);
    float* dbias_bound = use_bias ? abs_array(dbias_fast, OC) : NULL;
    matmul_backward_fast(dinp_fast, dweight_fast, dbias_fast, dout, inp, weight, 1, BT, C, OC);
    matmul_backward_naive(dinp_ref, dweight_ref, dbias_ref, dout, inp, weight, 1, BT, C, OC);
    matmul_backward_naive(dinp_bound, dweight_bound, dbias_bound, dout_abs, inp_abs, weight_abs,
                          1, BT, C, OC);
    fails += compare("backward dinp", dinp_fast, dinp_ref, dinp_bound, ni) > 0;
    fails += compare("backward dweight", dweight_fast, dweight_ref, dweight_bound, nw) > 0;
    if (use_bias) fails += compare("backward dbias", dbias_fast, dbias_ref, dbias_bound, OC) > 0;

    printf("%s BT=%d C=%d OC=%d bias=%s\n", fails ? "FAIL" : "ok  ", BT, C, OC,
           use_bias ? "yes" : "NULL");
    free(inp); free(weight); free(bias); free(dout);
    free(inp_abs); free(weight_abs); free(bias_abs); free(dout_abs);
    free(out_fast); free(out_ref); free(out_bound);
    free(dinp_fast); free(dweight_fast); free(dbias_fast);
    free(dinp_ref); free(dweight_ref); free(dbias_ref);
    free(dinp_bound); free(dweight_bound); free(dbias_bound);
    return fails;
}

// Forward and backward with 1 thread and with all threads must agree bit for bit.
static int check_determinism(int BT, int C, int OC) {
    size_t ni = (size_t)BT * C, nw = (size_t)OC * C, no = (size_t)BT * OC;
    float* inp = random_array(ni);
    float* weight = random_array(nw);
    float* bias = random_array(OC);
    float* dout = random_array(no);
    float* results[2][4];
    int threads = num_threads();
    for (int run = 0; run < 2; run++) {
#ifdef _OPENMP
        omp_set_num_threads(run == 0 ? 1 : threads);
#endif
        float* out = (float*)calloc_check(no, sizeof(float));
        float* dinp = (float*)calloc_check(ni, sizeof(float));
        float* dweight = (float*)calloc_check(nw, sizeof(float));
        float* dbias = (float*)calloc_check(OC, sizeof(float));
        matmul_forward_fast(out, inp, weight, bias, 1, BT, C, OC);
        matmul_backward_fast(dinp, dweight, dbias, dout, inp, weight, 1, BT, C, OC);
        results[run][0] = out; results[run][1] = dinp;
        results[run][2] = dweight; results[run][3] = dbias;
    }
#ifdef _OPENMP
    omp_set_num_threads(threads);
#endif
    size_t sizes[4] = {no, ni, nw, (size_t)OC};
    const char* names[4] = {"out", "dinp", "dweight", "dbias"};
    int fails = 0;
    for (int k = 0; k < 4; k++) {
        if (memcmp(results[0][k], results[1][k], sizes[k] * sizeof(float)) != 0) {
            printf("  FAIL %s differs between 1 and %d threads\n", names[k], threads);
            fails++;
        }
        free(results[0][k]);
        free(results[1][k]);
    }
    printf("%s determinism BT=%d C=%d OC=%d: 1 thread vs %d threads\n", fails ? "FAIL" : "ok  ",
           BT, C, OC, threads);
    free(inp); free(weight); free(bias); free(dout);
    return fails;
}

// Error of got in ulps of the float nearest want.
static double ulp_error(float got, double want) {
    float w = (float)want;
    double ulp = (double)nextafterf(fabsf(w), INFINITY) - fabs((double)w);
    return fabs((double)got - want) / ulp;
}

// tanh_vec (which = 0) or exp_vec (which = 1) on every 61st float of +-[1e-30, hi], against libm
// in double. Returns the worst error in ulps.
static double sweep(int which, float hi_f, float* worst_x, long* count) {
    enum { CHUNK = 1 << 16 };
    static float xs[CHUNK], ys[CHUNK];
    float lo_f = 1e-30f;
    uint32_t lo, hi;
    memcpy(&lo, &lo_f, 4);
    memcpy(&hi, &hi_f, 4);
    double worst = 0.0;
    for (uint32_t u = lo; u <= hi;) {
        int k = 0;
        for (; k < CHUNK && u <= hi; k++, u += 61) {
            memcpy(&xs[k], &u, 4);
            if (k & 1) xs[k] = -xs[k];
        }
        // the loops vectorise, as in GELU and softmax
        if (which == 0) for (int i = 0; i < k; i++) ys[i] = tanh_vec(xs[i]);
        else for (int i = 0; i < k; i++) ys[i] = exp_vec(xs[i]);
        for (int i = 0; i < k; i++) {
            double want = which == 0 ? tanh((double)xs[i]) : exp((double)xs[i]);
            double e = ulp_error(ys[i], want);
            if (!(e <= worst)) { worst = e; *worst_x = xs[i]; }
        }
        *count += k;
    }
    return worst;
}

// Returns 1 when tanh_vec or exp_vec fails, 0 when both pass.
static int check_vector_math(void) {
    float wx = 0.0f, ex = 0.0f;
    long nt = 0, ne = 0;
    double wt = sweep(0, 12.0f, &wx, &nt), we = sweep(1, 87.0f, &ex, &ne);
    int fails = !(wt <= 2.0) || !(we <= 2.0);
    float special[] = {0.0f, INFINITY, -INFINITY};
    for (int i = 0; i < 3; i++) fails |= tanh_vec(special[i]) != tanhf(special[i]);
    fails |= !isnan(tanh_vec(NAN)) || !isnan(exp_vec(NAN)) || exp_vec(0.0f) != 1.0f;
    fails |= !(exp_vec(-1000.0f) < 2e-38f) || exp_vec(-1000.0f) < 0.0f;  // clamped at e^-87
    printf("  tanh_vec: %ld floats in +-[1e-30, 12], worst %.2f ulp at %.9g\n", nt, wt, wx);
    printf("  exp_vec: %ld floats in +-[1e-30, 87], worst %.2f ulp at %.9g\n", ne, we, ex);
    printf("  special values (0, +-inf, NaN, -1000): %s\n", fails ? "FAIL" : "ok");
    return fails;
}

int main(void) {
    printf("fast matmul: %d-float vectors, register tile %d x %d, blocks MC %d KC %d NC %d, %d threads\n",
           MM_LANES, MM_MR, MM_NR, MM_MC, MM_KC, MM_NC, num_threads());
    int rows[] = {1, 7, 65, 257};
    int shapes[][2] = {{3, 5}, {17, 33}, {100, 37}, {769, 301}};
    int fails = 0;
    for (int r = 0; r < 4; r++) {
        for (int s = 0; s < 4; s++) {
            fails += check_shape(rows[r], shapes[s][0], shapes[s][1], (r + s) % 2);
        }
    }
    fails += check_shape(7, 40, MM_NC + 37, 1);    // several column blocks (OC > NC)
    fails += check_shape(65, 2 * MM_KC + 3, 20, 0);  // several k blocks in forward (C > KC)
    fails += check_shape(300, 64, 48, 1);            // several k blocks in dweight (BT > KC)
    fails += check_determinism(257, 769, 301);
    fails += check_vector_math();
    if (fails > 0) {
        printf("matmul_check: %d checks FAILED\n", fails);
        return 1;
    }
    printf("matmul_check: all passed\n");
    return 0;
}

// test/matmul_check.c: the fast matmul_forward_fast / matmul_backward_fast of gpt2/cpu_layers.h
// against the naive reference loops beside them, on shapes chosen to hit every edge of the blocking: rows
// B*T = 1, 7, 65, 257 (257 > MM_MC: two row blocks), C and OC not multiples of the register tile
// or of the vector width, C > MM_KC (several k blocks), OC > MM_NC (several column blocks),
// bias NULL and not, dbias NULL and not, and gradients that start non-zero (backward must add).
// Then determinism: 1 thread and all threads must give bit-identical results.
//
// The product with the weight packed once (generation's), bit for bit, no tolerance:
// gemm_accumulate_packed and gemm_accumulate on 1 and 2 threads and M = 1..100 rows around the
// register tile's 14 (1, 2, 3, 13, 14, 15, 29, 64, 100) against gemm_accumulate on 100 rows, N not
// a multiple of the tile's 32 (and past NC, with the second thread's slice starting mid-operand),
// K across KC blocks, B in both layouts; then matmul_forward_packed's batch invariance: each row
// of a product of M rows equals the same row computed alone and in another position, and equals
// matmul_forward's.
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

static void set_threads(int n) {
#ifdef _OPENMP
    omp_set_num_threads(n);
#endif
}

// Rows of a (n_rows x cols) that differ from b; prints the first. Returns the count.
static int compare_rows(const char* what, const float* a, const float* b, int n_rows, int cols) {
    int bad = 0;
    for (int r = 0; r < n_rows; r++) {
        if (memcmp(a + (size_t)r * cols, b + (size_t)r * cols, (size_t)cols * sizeof(float)) != 0) {
            if (bad == 0) printf("  FAIL %s: row %d differs\n", what, r);
            bad++;
        }
    }
    return bad;
}

// gemm_accumulate and gemm_accumulate_packed on the first M rows of A, for every M of rows[],
// on 1 and 2 threads, adding into the same random C, must give the bits of gemm_accumulate on all
// the rows (the largest M) on 1 thread: a row's result depends neither on M nor on how B came
// packed. B is K x N (rsb = N) or a weight's transpose (rsb = 1, csb = K).
static int check_packed_gemm(const int* rows, int n_rows, int N, int K, int b_transposed) {
    int fails = 0, threads = num_threads(), max_rows = rows[n_rows - 1];
    float* b = random_array((size_t)K * N);
    size_t rsb = b_transposed ? 1 : (size_t)N, csb = b_transposed ? (size_t)K : 1;
    float* packed = (float*)aligned_alloc_check(64, gemm_packed_size(K, N) * sizeof(float));
    gemm_pack_b(packed, b, rsb, csb, K, N);
    float* a = random_array((size_t)max_rows * K);
    float* c0 = random_array((size_t)max_rows * N);
    float* ref = copy_array(c0, (size_t)max_rows * N);
    set_threads(1);
    gemm_accumulate(ref, N, a, K, 1, b, rsb, csb, max_rows, N, K);
    for (int m = 0; m < n_rows; m++) {
        int M = rows[m];
        for (int run = 0; run < 4; run++) {   // gemm_accumulate, then packed; 1 and 2 threads
            int packed_b = run >= 2, nth = run % 2 + 1;
            float* c = copy_array(c0, (size_t)M * N);
            set_threads(nth);
            if (packed_b) gemm_accumulate_packed(c, N, a, K, 1, packed, M, N, K);
            else gemm_accumulate(c, N, a, K, 1, b, rsb, csb, M, N, K);
            char what[160];
            snprintf(what, sizeof(what), "%s on %d thread(s), M=%d N=%d K=%d",
                     packed_b ? "gemm_accumulate_packed" : "gemm_accumulate", nth, M, N, K);
            fails += compare_rows(what, c, ref, M, N) > 0;
            free(c);
        }
    }
    set_threads(threads);
    printf("%s packed gemm N=%d K=%d B=%s: M = 1..%d rows, 1 and 2 threads, packed or not, "
           "bit-identical to the first M rows of %d\n", fails ? "FAIL" : "ok  ", N, K,
           b_transposed ? "weight^T" : "plain", max_rows, max_rows);
    free(b); free(packed); free(a); free(c0); free(ref);
    return fails;
}

// matmul_forward_packed on M rows (2 threads) against: each row alone (1 thread), the rows in
// reverse order (each row in another position), and matmul_forward on the M rows. All bit for bit.
static int check_packed_rows(int M, int C, int OC, int use_bias) {
    int fails = 0, threads = num_threads();
    float* inp = random_array((size_t)M * C);
    float* weight = random_array((size_t)OC * C);
    float* bias = use_bias ? random_array(OC) : NULL;
    float* packed = (float*)aligned_alloc_check(64, packed_weight_size(C, OC) * sizeof(float));
    pack_weight(packed, weight, C, OC);
    size_t no = (size_t)M * OC;
    float* out = random_array(no);
    float* other = random_array(no);
    float* reversed = random_array((size_t)M * C);
    set_threads(2);
    matmul_forward_packed(out, inp, packed, bias, 1, M, C, OC);

    set_threads(1);
    for (int r = 0; r < M; r++) {
        matmul_forward_packed(other + (size_t)r * OC, inp + (size_t)r * C, packed, bias, 1, 1, C, OC);
    }
    fails += compare_rows("each row alone (M=1, 1 thread)", other, out, M, OC) > 0;

    set_threads(2);
    for (int r = 0; r < M; r++) {
        memcpy(reversed + (size_t)(M - 1 - r) * C, inp + (size_t)r * C, (size_t)C * sizeof(float));
    }
    matmul_forward_packed(other, reversed, packed, bias, 1, M, C, OC);
    for (int r = 0; r < M; r++) {
        fails += compare_rows("a row in reverse position", other + (size_t)(M - 1 - r) * OC,
                              out + (size_t)r * OC, 1, OC) > 0;
    }

    matmul_forward(other, inp, weight, bias, 1, M, C, OC);
    fails += compare_rows("against matmul_forward", other, out, M, OC) > 0;
    set_threads(threads);
    printf("%s matmul_forward_packed BT=%d C=%d OC=%d bias=%s: each row as alone, as in another "
           "position, as matmul_forward\n", fails ? "FAIL" : "ok  ", M, C, OC,
           use_bias ? "yes" : "NULL");
    free(inp); free(weight); free(bias); free(packed); free(out); free(other); free(reversed);
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
    int packed_rows[] = {1, 2, 3, 13, 14, 15, 29, 64, 100};
    fails += check_packed_gemm(packed_rows, 9, 37, 300, 1);    // M > N: slices of rows
    fails += check_packed_gemm(packed_rows, 9, 301, 768, 1);
    fails += check_packed_gemm(packed_rows, 9, 301, 300, 0);
    fails += check_packed_gemm(packed_rows, 9, 2 * MM_NC + 104, 300, 1);   // NC blocks in a slice
    fails += check_packed_rows(29, 768, 301, 1);
    fails += check_packed_rows(64, 300, MM_NC + 37, 0);
    fails += check_packed_rows(100, 300, 37, 1);             // slices of rows at M = 100
    fails += check_vector_math();
    if (fails > 0) {
        printf("matmul_check: %d checks FAILED\n", fails);
        return 1;
    }
    printf("matmul_check: all passed\n");
    return 0;
}

// test/matmul_check.c: the fast matmul_forward_fast / matmul_backward_fast of gpt2/cpu_layers.h
// against the naive reference loops beside them, on shapes chosen to hit every edge of the blocking: rows
// B*T = 1, 7, 65, 257 (257 > MM_MC: two row blocks), C and OC not multiples of the register tile
// or of the vector width, C > MM_KC (several k blocks), OC > MM_NC (several column blocks),
// bias NULL and not, dbias NULL and not, and gradients that start non-zero (backward must add).
// Then determinism: 1 thread and all threads must give bit-identical results.
//
// The product with the weight packed once (generation's), bit for bit, no tolerance:
// gemm_accumulate_packed and gemm_accumulate on 1 and 2 threads and M = 1..100 rows around the
// register tile's 14 and AMX's tiles of 16 and 32 (1, 2, 3, 13-17, 29, 32, 33, 64, 100) against
// gemm_accumulate on 100 rows, N not a multiple of the tile's 32 (and past NC, with the second
// thread's slice starting mid-operand), K across KC blocks, B in both layouts; then matmul_forward_packed's batch invariance: each row
// of a product of M rows equals the same row computed alone and in another position, and equals
// matmul_forward's.
//
// Also the fast functions that stand in for libm's: tanh_vec (GELU) and exp_vec (softmax) against
// tanh and exp in double on every 61st float from 1e-30 to 12 (tanh) or 87 (exp), both signs,
// within 2 ulp of the correctly rounded result (Cephes' bounds are ~1.3 ulp), and at 0, +-inf,
// NaN and far below exp's range.
//
// The bf16 products (gpt2/cpu_bf16.h): gemm_pack_b_bf16 on 2.1 million float32 bit patterns of
// every class, in the three layouts its packing reads, must put each one where the layout says,
// rounded exactly as bf16_from_float rounds it (denormals: as the build's conversion does);
// matmul_forward_bf16, matmul_forward_packed_bf16 and matmul_backward_bf16 against the product of
// the bf16-rounded operands in double, on the shapes above and on odd K in the last k block of
// forward and dweight: within the tolerance below on random operands, exactly on operands that
// round to multiples of 1/8 (sums float32 holds exactly, so any wrong rounding, pairing or dropped
// term shows); determinism, batch invariance and packed against unpacked as in float32. And a
// fingerprint of one layer's bf16 products, which test_matmul.sh compares across builds.
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

// count arrays of n floats into a[]: random (outputs, so that what is left unwritten shows) or
// zeros (gradients, which add into them)
static void random_arrays(float** a, int count, size_t n) {
    for (int k = 0; k < count; k++) a[k] = random_array(n);
}
static void zero_arrays(float** a, int count, size_t n) {
    for (int k = 0; k < count; k++) a[k] = (float*)calloc_check(n, sizeof(float));
}
static void free_arrays(float** a, int count) {
    for (int k = 0; k < count; k++) free(a[k]);
}

// The operands of a product of BT rows from C to OC channels, random, drawn in this order: inp,
// weight, bias (NULL unless with_bias) and dout; ni, nw and no are the sizes of inp, weight and out.
typedef struct { size_t ni, nw, no; float *inp, *weight, *bias, *dout; } Operands;
static Operands random_operands(int BT, int C, int OC, int with_bias) {
    Operands m = {(size_t)BT * C, (size_t)OC * C, (size_t)BT * OC, NULL, NULL, NULL, NULL};
    m.inp = random_array(m.ni);
    m.weight = random_array(m.nw);
    m.bias = with_bias ? random_array(OC) : NULL;
    m.dout = random_array(m.no);
    return m;
}
static void operands_free(Operands* m) { free(m->inp); free(m->weight); free(m->bias); free(m->dout); }

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
    Operands m = random_operands(BT, C, OC, use_bias);
    size_t ni = m.ni, nw = m.nw, no = m.no;
    float *inp = m.inp, *weight = m.weight, *bias = m.bias, *dout = m.dout;
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
    operands_free(&m);
    free(inp_abs); free(weight_abs); free(bias_abs); free(dout_abs);
    free(out_fast); free(out_ref); free(out_bound);
    free(dinp_fast); free(dweight_fast); free(dbias_fast);
    free(dinp_ref); free(dweight_ref); free(dbias_ref);
    free(dinp_bound); free(dweight_bound); free(dbias_bound);
    return fails;
}

typedef void (*forward_fn)(float* out, const float* inp, const float* weight, const float* bias,
                           int B, int T, int C, int OC);
typedef void (*backward_fn)(float* dinp, float* dweight, float* dbias, const float* dout,
                            const float* inp, const float* weight, int B, int T, int C, int OC);

// Forward and backward with 1 thread and with all threads must agree bit for bit.
static int check_determinism(const char* name, forward_fn forward, backward_fn backward,
                             int BT, int C, int OC) {
    Operands m = random_operands(BT, C, OC, 1);
    size_t ni = m.ni, nw = m.nw, no = m.no;
    float *inp = m.inp, *weight = m.weight, *bias = m.bias, *dout = m.dout;
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
        forward(out, inp, weight, bias, 1, BT, C, OC);
        backward(dinp, dweight, dbias, dout, inp, weight, 1, BT, C, OC);
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
    printf("%s determinism of %s BT=%d C=%d OC=%d: 1 thread vs %d threads\n",
           fails ? "FAIL" : "ok  ", name, BT, C, OC, threads);
    operands_free(&m);
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

// B packed once for the product in float32 (bf16 = 0) or bf16 (bf16 = 1), 64-byte aligned.
static void* pack_b(int bf16, const float* b, size_t rsb, size_t csb, int K, int N) {
    if (bf16) {
        bf16_t* packed = (bf16_t*)aligned_alloc_check(64, gemm_packed_size_bf16(K, N) * sizeof(bf16_t));
        gemm_pack_b_bf16(packed, b, rsb, csb, K, N);
        return packed;
    }
    float* packed = (float*)aligned_alloc_check(64, gemm_packed_size(K, N) * sizeof(float));
    gemm_pack_b(packed, b, rsb, csb, K, N);
    return packed;
}

// C (M x N) += A (M x K, rows contiguous) . B, in float32 or bf16, B as given (packed == NULL) or
// packed by pack_b.
static void product(int bf16, float* c, const float* a, const float* b, size_t rsb, size_t csb,
                    const void* packed, int M, int N, int K) {
    if (bf16 && packed != NULL) gemm_accumulate_packed_bf16(c, N, a, K, 1, (const bf16_t*)packed, M, N, K);
    else if (bf16) gemm_accumulate_bf16(c, N, a, K, 1, b, rsb, csb, M, N, K);
    else if (packed != NULL) gemm_accumulate_packed(c, N, a, K, 1, (const float*)packed, M, N, K);
    else gemm_accumulate(c, N, a, K, 1, b, rsb, csb, M, N, K);
}

// gemm_accumulate and gemm_accumulate_packed (or their bf16 twins) on the first M rows of A, for
// every M of rows[], on 1 and 2 threads, adding into the same random C, must give the bits of the
// unpacked product on all the rows (the largest M) on 1 thread: a row's result depends neither on
// M nor on how B came packed. B is K x N (rsb = N) or a weight's transpose (rsb = 1, csb = K).
static int check_packed_gemm(int bf16, const int* rows, int n_rows, int N, int K, int b_transposed) {
    int fails = 0, threads = num_threads(), max_rows = rows[n_rows - 1];
    float* b = random_array((size_t)K * N);
    size_t rsb = b_transposed ? 1 : (size_t)N, csb = b_transposed ? (size_t)K : 1;
    void* packed = pack_b(bf16, b, rsb, csb, K, N);
    float* a = random_array((size_t)max_rows * K);
    float* c0 = random_array((size_t)max_rows * N);
    float* ref = copy_array(c0, (size_t)max_rows * N);
    set_threads(1);
    product(bf16, ref, a, b, rsb, csb, NULL, max_rows, N, K);
    const char* name = bf16 ? "gemm_accumulate_bf16" : "gemm_accumulate";
    for (int m = 0; m < n_rows; m++) {
        int M = rows[m];
        for (int run = 0; run < 4; run++) {   // unpacked, then packed; 1 and 2 threads
            int packed_b = run >= 2, nth = run % 2 + 1;
            float* c = copy_array(c0, (size_t)M * N);
            set_threads(nth);
            product(bf16, c, a, b, rsb, csb, packed_b ? packed : NULL, M, N, K);
            char what[160];
            snprintf(what, sizeof(what), "%s%s on %d thread(s), M=%d N=%d K=%d", name,
                     packed_b ? " (packed)" : "", nth, M, N, K);
            fails += compare_rows(what, c, ref, M, N) > 0;
            free(c);
        }
    }
    set_threads(threads);
    printf("%s packed %s N=%d K=%d B=%s: M = 1..%d rows, 1 and 2 threads, packed or not, "
           "bit-identical to the first M rows of %d\n", fails ? "FAIL" : "ok  ", name, N, K,
           b_transposed ? "weight^T" : "plain", max_rows, max_rows);
    free(b); free(packed); free(a); free(c0); free(ref);
    return fails;
}

// dot_lanes (gpt2/cpu_math.h; attention's dot products) against the sum in double, for every n
// up to 100: within float32's rounding of the sum of |a_i b_i|. Each build checks its own
// version: the vector one, or (plain C, and what nvcc's host compiler builds) the array of 16.
static int check_dot_lanes(void) {
    int fails = 0;
    float* a = random_array(100);
    float* b = random_array(100);
    for (int n = 0; n <= 100; n++) {
        double exact = 0.0, bound = 0.0;
        for (int i = 0; i < n; i++) exact += (double)a[i] * b[i], bound += fabs((double)a[i] * b[i]);
        double err = fabs((double)dot_lanes(a, b, n) - exact);
        if (err > 1e-6 * bound + 1e-30) {
            if (fails == 0) printf("  FAIL dot_lanes n=%d: %.9g, in double %.9g\n", n, dot_lanes(a, b, n), exact);
            fails++;
        }
    }
    printf("%s dot_lanes n = 0..100 against the sum in double\n", fails ? "FAIL" : "ok  ");
    free(a); free(b);
    return fails > 0;
}

// gemm_bias and gemm_bias_packed (C = bias + A . B, C never read), or their bf16 twins, on 1 and
// 2 threads against C filled with the bias and gemm_accumulate (_bf16) on 1 thread: bit for bit,
// bias or zeros, K = 0 included (C is then the bias).
static int check_gemm_bias(int bf16, int M, int N, int K, int use_bias) {
    int fails = 0, threads = num_threads();
    float* a = random_array((size_t)M * (K > 0 ? K : 1));
    float* b = random_array((size_t)N * (K > 0 ? K : 1));   // a weight, N x K: B = its transpose
    float* bias = use_bias ? random_array(N) : NULL;
    float* ref = random_array((size_t)M * N);
    for (int i = 0; i < M; i++) {
        for (int j = 0; j < N; j++) ref[(size_t)i * N + j] = bias != NULL ? bias[j] : 0.0f;
    }
    set_threads(1);
    product(bf16, ref, a, b, 1, K, NULL, M, N, K);
    void* packed = K > 0 ? pack_b(bf16, b, 1, K, K, N) : NULL;
    const char* name = bf16 ? "gemm_bias_bf16" : "gemm_bias";
    // unpacked, then packed, then (float32) the weight's rows read in place; 1 and 2 threads
    for (int run = 0; run < (bf16 ? 4 : 6); run++) {
        int nth = run % 2 + 1;
        if (run >= 2 && run < 4 && packed == NULL) continue;
        float* c = random_array((size_t)M * N);   // whatever C held is not read
        set_threads(nth);
        if (run < 2 && bf16) gemm_bias_bf16(c, N, a, K, 1, b, 1, K, M, N, K, bias);
        else if (run < 2) gemm_bias(c, N, a, K, 1, b, 1, K, M, N, K, bias);
        else if (run >= 4) gemm_bias_weight_rows(c, N, a, K, b, K, M, N, K, bias);
        else if (bf16) gemm_bias_packed_bf16(c, N, a, K, 1, (const bf16_t*)packed, M, N, K, bias);
        else gemm_bias_packed(c, N, a, K, 1, (const float*)packed, M, N, K, bias);
        char what[160];
        snprintf(what, sizeof(what), "%s%s on %d thread(s), M=%d N=%d K=%d",
                 run >= 4 ? "gemm_bias_weight_rows" : name, run >= 4 ? "" : run >= 2 ? " (packed)" : "",
                 nth, M, N, K);
        fails += compare_rows(what, c, ref, M, N) > 0;
        free(c);
    }
    set_threads(threads);
    printf("%s %s M=%d N=%d K=%d bias=%s: packed or not%s, 1 and 2 threads, bit-identical to "
           "filling C and accumulating\n", fails ? "FAIL" : "ok  ", name, M, N, K, use_bias ? "yes" : "NULL",
           bf16 ? "" : ", and gemm_bias_weight_rows");
    free(a); free(b); free(bias); free(ref); free(packed);
    return fails;
}

// gemm_accumulate_a_rows (A's rows read where they lie) against gemm_accumulate on 1 thread, on
// 1 and 2 threads, into the same C: bit for bit. A's rows lda > K apart (a block of dout's).
static int check_a_rows(int M, int N, int K) {
    int fails = 0, threads = num_threads(), lda = K + 3;
    float* a = random_array((size_t)M * lda);
    float* b = random_array((size_t)K * N);
    float* c0 = random_array((size_t)M * N);
    float* ref = (float*)malloc((size_t)M * N * sizeof(float));
    memcpy(ref, c0, (size_t)M * N * sizeof(float));
    set_threads(1);
    gemm_accumulate(ref, N, a, lda, 1, b, N, 1, M, N, K);
    for (int nth = 1; nth <= 2; nth++) {
        float* c = (float*)malloc((size_t)M * N * sizeof(float));
        memcpy(c, c0, (size_t)M * N * sizeof(float));
        set_threads(nth);
        gemm_accumulate_a_rows(c, N, a, lda, b, N, 1, M, N, K);
        char what[160];
        snprintf(what, sizeof(what), "gemm_accumulate_a_rows on %d thread(s), M=%d N=%d K=%d", nth, M, N, K);
        fails += compare_rows(what, c, ref, M, N) > 0;
        free(c);
    }
    set_threads(threads);
    printf("%s gemm_accumulate_a_rows M=%d N=%d K=%d: 1 and 2 threads, bit-identical to gemm_accumulate\n",
           fails ? "FAIL" : "ok  ", M, N, K);
    free(a); free(b); free(c0); free(ref);
    return fails;
}

// The weight packed once, in float32 or bf16: pack_weight(_bf16) into a new 64-byte aligned
// buffer, and matmul_forward_packed(_bf16) on it.
static void* pack_weight_as(int bf16, const float* weight, int C, int OC) {
    if (bf16) {
        bf16_t* p = (bf16_t*)aligned_alloc_check(64, packed_weight_size_bf16(C, OC) * sizeof(bf16_t));
        pack_weight_bf16(p, weight, C, OC);
        return p;
    }
    float* p = (float*)aligned_alloc_check(64, packed_weight_size(C, OC) * sizeof(float));
    pack_weight(p, weight, C, OC);
    return p;
}

static void forward_packed(int bf16, float* out, const float* inp, const void* packed,
                           const float* bias, int BT, int C, int OC) {
    if (bf16) matmul_forward_packed_bf16(out, inp, (const bf16_t*)packed, bias, 1, BT, C, OC);
    else matmul_forward_packed(out, inp, (const float*)packed, bias, 1, BT, C, OC);
}

// matmul_forward_packed (or _bf16) on M rows (2 threads) against: each row alone (1 thread), the
// rows in reverse order (each row in another position), and matmul_forward (_bf16) on the M rows.
// All bit for bit.
static int check_packed_rows(int bf16, int M, int C, int OC, int use_bias) {
    int fails = 0, threads = num_threads();
    float* inp = random_array((size_t)M * C);
    float* weight = random_array((size_t)OC * C);
    float* bias = use_bias ? random_array(OC) : NULL;
    void* packed = pack_weight_as(bf16, weight, C, OC);
    size_t no = (size_t)M * OC;
    float* out = random_array(no);
    float* other = random_array(no);
    float* reversed = random_array((size_t)M * C);
    set_threads(2);
    forward_packed(bf16, out, inp, packed, bias, M, C, OC);

    set_threads(1);
    for (int r = 0; r < M; r++) {
        forward_packed(bf16, other + (size_t)r * OC, inp + (size_t)r * C, packed, bias, 1, C, OC);
    }
    fails += compare_rows("each row alone (M=1, 1 thread)", other, out, M, OC) > 0;

    set_threads(2);
    for (int r = 0; r < M; r++) {
        memcpy(reversed + (size_t)(M - 1 - r) * C, inp + (size_t)r * C, (size_t)C * sizeof(float));
    }
    forward_packed(bf16, other, reversed, packed, bias, M, C, OC);
    for (int r = 0; r < M; r++) {
        fails += compare_rows("a row in reverse position", other + (size_t)(M - 1 - r) * OC,
                              out + (size_t)r * OC, 1, OC) > 0;
    }

    if (bf16) matmul_forward_bf16(other, inp, weight, bias, 1, M, C, OC);
    else matmul_forward(other, inp, weight, bias, 1, M, C, OC);
    fails += compare_rows("against the unpacked forward", other, out, M, OC) > 0;
    set_threads(threads);
    printf("%s matmul_forward_packed%s BT=%d C=%d OC=%d bias=%s: each row as alone, as in another "
           "position, as matmul_forward%s\n", fails ? "FAIL" : "ok  ", bf16 ? "_bf16" : "", M, C,
           OC, use_bias ? "yes" : "NULL", bf16 ? "_bf16" : "");
    free(inp); free(weight); free(bias); free(packed); free(out); free(other); free(reversed);
    return fails;
}

// ---------- bf16 products ----------

// c (M x N, as the caller set it) += bf16(A) . bf16(B) in double, and bound += |bf16(A)| . |bf16(B)|
// (the sum of the absolute values of the terms), A and B addressed as in gemm_accumulate.
static void reference_bf16(double* c, double* bound, const float* a, size_t rsa, size_t csa,
                           const float* b, size_t rsb, size_t csb, int M, int N, int K) {
    double* ar = (double*)malloc_check((size_t)M * K * sizeof(double));   // A rounded, (M, K)
    double* br = (double*)malloc_check((size_t)N * K * sizeof(double));   // B^T rounded, (N, K)
    for (int i = 0; i < M; i++)
        for (int p = 0; p < K; p++) ar[(size_t)i * K + p] = bf16_round(a[i * rsa + p * csa]);
    for (int j = 0; j < N; j++)
        for (int p = 0; p < K; p++) br[(size_t)j * K + p] = bf16_round(b[p * rsb + j * csb]);
    for (int i = 0; i < M; i++) {
        for (int j = 0; j < N; j++) {
            const double* x = ar + (size_t)i * K;
            const double* y = br + (size_t)j * K;
            double sum = 0.0, abs_sum = 0.0;
            for (int p = 0; p < K; p++) {
                sum += x[p] * y[p];
                abs_sum += fabs(x[p] * y[p]);
            }
            c[(size_t)i * N + j] += sum;
            bound[(size_t)i * N + j] += abs_sum;
        }
    }
    free(ar);
    free(br);
}

// Elements of got that differ from ref: bit for bit when exact (ref is then a float32 value),
// else beyond 1e-5 * (|ref| + bound) + 1e-6 as compare() allows. Prints the worst; returns 1 on
// any failure.
static int compare_ref(const char* what, const float* got, const double* ref, const double* bound,
                       size_t n, int exact) {
    int bad = 0;
    double worst = -1.0;
    size_t worst_i = 0;
    for (size_t i = 0; i < n; i++) {
        double err = fabs((double)got[i] - ref[i]);
        double tol = exact ? 0.0 : 1e-5 * (fabs(ref[i]) + bound[i]) + 1e-6;
        if (!(err <= tol)) bad++;
        if (!(err - tol <= worst)) { worst = err - tol; worst_i = i; }
    }
    if (bad > 0) {
        printf("  FAIL %s: %d of %zu elements %s; worst [%zu] got %.9g reference %.9g\n", what, bad,
               n, exact ? "not exact" : "out of tolerance", worst_i, got[worst_i], ref[worst_i]);
    }
    return bad > 0;
}

// A float32 that rounds to the bf16 value m/8, m random in -15..15: m/8 moved away from zero by up
// to half a bf16 ulp, or towards zero by up to a quarter (half the ulp below a power of two), an
// exact tie one time in eight (m/8 has at most 4 significant bits: its last bf16 bit is 0, so a
// tie rounds back to it). Truncation, ties away from zero or no rounding give another value.
// Products of such values are multiples of 1/64 below 4 and float32 holds their sums over a few
// thousand terms exactly, in any order: the product must then equal the double reference exactly.
static float exact_operand(void) {
    int m = (int)(random_u32(&rng_state) % 31) - 15;
    float v = m / 8.0f;
    if (m == 0) return v;
    int e;
    frexpf(fabsf(v), &e);   // |v| in [2^(e-1), 2^e): a bf16 ulp there is 2^(e-8)
    uint32_t r = random_u32(&rng_state);
    int away = r & 1, tie = (r >> 1) % 8 == 0;
    float d = ldexpf(tie ? 1.0f : random_f32(&rng_state), away ? e - 9 : e - 10);
    return v + copysignf(away ? d : -d, v);
}

static float* exact_array(size_t n) {
    float* x = (float*)malloc_check(n * sizeof(float));
    for (size_t i = 0; i < n; i++) x[i] = exact_operand();
    return x;
}

// Multiples of 1/64 in [-4, 4]: starting values of sums that stay exact.
static float* sixty_fourths(size_t n) {
    float* x = (float*)malloc_check(n * sizeof(float));
    for (size_t i = 0; i < n; i++) x[i] = (float)((int)(random_u32(&rng_state) % 513) - 256) / 64.0f;
    return x;
}

static double* to_double(const float* x, size_t n, int absolute) {
    double* y = (double*)malloc_check(n * sizeof(double));
    for (size_t i = 0; i < n; i++) y[i] = absolute ? fabs((double)x[i]) : (double)x[i];
    return y;
}

// One shape in bf16: matmul_forward_bf16, matmul_forward_packed_bf16 and matmul_backward_bf16
// (dinp, dweight, dbias) against the product of the bf16-rounded operands in double: within a
// float32 sum's rounding on random operands, exactly on exact_operand's (dbias, a float32 sum of
// unrounded dout, always within the tolerance).
static int check_bf16_shape(int BT, int C, int OC, int use_bias, int exact) {
    size_t ni = (size_t)BT * C, nw = (size_t)OC * C, no = (size_t)BT * OC;
    float* (*operands)(size_t) = exact ? exact_array : random_array;
    float* (*starts)(size_t) = exact ? sixty_fourths : random_array;
    float* inp = operands(ni);
    float* weight = operands(nw);
    float* dout = operands(no);
    float* bias = use_bias ? starts(OC) : NULL;
    int fails = 0;

    // forward, into garbage that it must overwrite; then with the weight packed
    double* ref = (double*)calloc_check(no, sizeof(double));
    double* bound = (double*)calloc_check(no, sizeof(double));
    for (size_t i = 0; use_bias && i < no; i++) {
        ref[i] = bias[i % OC];
        bound[i] = fabs(bias[i % OC]);
    }
    reference_bf16(ref, bound, inp, C, 1, weight, 1, C, BT, OC, C);
    float* out = random_array(no);
    matmul_forward_bf16(out, inp, weight, bias, 1, BT, C, OC);
    fails += compare_ref("matmul_forward_bf16", out, ref, bound, no, exact);
    void* packed = pack_weight_as(1, weight, C, OC);
    float* out_packed = random_array(no);
    matmul_forward_packed_bf16(out_packed, inp, (const bf16_t*)packed, bias, 1, BT, C, OC);
    fails += compare_ref("matmul_forward_packed_bf16", out_packed, ref, bound, no, exact);
    free(ref); free(bound); free(out); free(packed); free(out_packed);

    // backward, into gradients that start non-zero
    float* dinp = starts(ni);
    float* dweight = starts(nw);
    float* dbias = use_bias ? starts(OC) : NULL;
    double* dinp_ref = to_double(dinp, ni, 0);
    double* dinp_bound = to_double(dinp, ni, 1);
    double* dweight_ref = to_double(dweight, nw, 0);
    double* dweight_bound = to_double(dweight, nw, 1);
    reference_bf16(dinp_ref, dinp_bound, dout, OC, 1, weight, C, 1, BT, C, OC);
    reference_bf16(dweight_ref, dweight_bound, dout, 1, OC, inp, C, 1, OC, C, BT);
    double* dbias_ref = use_bias ? to_double(dbias, OC, 0) : NULL;
    double* dbias_bound = use_bias ? to_double(dbias, OC, 1) : NULL;
    for (size_t i = 0; use_bias && i < no; i++) {
        dbias_ref[i % OC] += dout[i];
        dbias_bound[i % OC] += fabs(dout[i]);
    }
    matmul_backward_bf16(dinp, dweight, dbias, dout, inp, weight, 1, BT, C, OC);
    fails += compare_ref("matmul_backward_bf16 dinp", dinp, dinp_ref, dinp_bound, ni, exact);
    fails += compare_ref("matmul_backward_bf16 dweight", dweight, dweight_ref, dweight_bound, nw, exact);
    if (use_bias) fails += compare_ref("matmul_backward_bf16 dbias", dbias, dbias_ref, dbias_bound, OC, 0);

    printf("%s bf16 BT=%d C=%d OC=%d bias=%s, %s\n", fails ? "FAIL" : "ok  ", BT, C, OC,
           use_bias ? "yes" : "NULL", exact ? "operands that round to m/8: exact" : "random operands");
    free(inp); free(weight); free(dout); free(bias);
    free(dinp); free(dweight); free(dbias);
    free(dinp_ref); free(dinp_bound); free(dweight_ref); free(dweight_bound);
    free(dbias_ref); free(dbias_bound);
    return fails;
}

// What the packing makes of x: bf16_from_float's rounding, except that a build with
// AVX512_BF16 converts with vcvtne2ps2bf16, which turns a float32 denormal into a zero of its sign.
static bf16_t packed_bf16(float x) {
#ifdef BF_DPBF16
    if (fpclassify(x) == FP_SUBNORMAL) return signbit(x) ? 0x8000 : 0x0000;
#endif
    return bf16_from_float(x);
}

// gemm_pack_b_bf16 on a K x N operand B (element (p, j) at b[p * rsb + j * csb]) of float32 bit
// patterns from every class (all exponents, ties, NaNs with payloads, infinities, values that
// round up to infinity, denormals, zeros) must write exactly the layout of gpt2/cpu_bf16.h: each
// element rounded as bf16_from_float rounds it (so the vector conversion matches the scalar one on
// every normal number), at its place among the units, zeros in the padding.
static int check_bf16_packing(int K, int N, size_t rsb, size_t csb) {
    static const uint32_t special[] = {
        0x3f808000, 0x3f818000, 0xbf808000, 0x3f80ffff, 0x3f817fff, 0x3f818001,   // ties and near
        0x7f800001, 0x7fa12345, 0xffc00000, 0x7fffffff, 0xff800001,               // NaNs
        0x7f800000, 0xff800000, 0x7f7fffff, 0x7f7f8000, 0xff7f8000, 0x7f7f7fff,   // inf, overflow
        0x00000001, 0x807fffff, 0x007fffff, 0x00008000, 0x00800000, 0x80800000,   // denormals, min
        0x00000000, 0x80000000};
    int n_special = (int)(sizeof(special) / sizeof(special[0]));
    size_t size = (size_t)(K - 1) * rsb + (size_t)(N - 1) * csb + 1;
    float* b = (float*)malloc_check(size * sizeof(float));
    for (size_t i = 0; i < size; i++) {
        uint32_t u = (uint32_t)(i * 2654435761u) ^ (uint32_t)(i >> 7);   // every exponent
        if (i % 5 == 1) u = (u & 0xffff0000u) | 0x8000u;                      // a tie
        if (i < (size_t)n_special) u = special[i];
        memcpy(&b[i], &u, sizeof(u));
    }
    size_t n_bf16 = gemm_packed_size_bf16(K, N), n_pad = mm_packed_width(N);
    bf16_t* packed = (bf16_t*)aligned_alloc_check(64, n_bf16 * sizeof(bf16_t));
    bf16_t* expected = (bf16_t*)calloc_check(n_bf16, sizeof(bf16_t));
    memset(packed, 0x55, n_bf16 * sizeof(bf16_t));   // the padding must be written too
    gemm_pack_b_bf16(packed, b, rsb, csb, K, N);
    for (int p = 0; p < K; p++) {
        int pc = p / BF_KC * BF_KC, qc = (mm_min(BF_KC, K - pc) + 1) / 2, q = (p - pc) / 2;
        for (int j = 0; j < N; j++) {
            size_t unit = (size_t)(pc / 2) * n_pad + (size_t)(j / MM_NR * MM_NR) * qc +
                          (size_t)q * MM_NR + j % MM_NR;
            // the unit (even k, odd k) as 2 bf16 in memory, the even one first (little-endian)
            expected[2 * unit + (p - pc) % 2] = packed_bf16(b[p * rsb + j * csb]);
        }
    }
    int fails = 0;
    for (size_t i = 0; i < n_bf16 && fails == 0; i++) {
        if (packed[i] != expected[i]) {
            printf("  FAIL gemm_pack_b_bf16: bf16 %zu of the packed operand is %04x, should be "
                   "%04x\n", i, packed[i], expected[i]);
            fails = 1;
        }
    }
    printf("%s gemm_pack_b_bf16 K=%d N=%d rsb=%zu csb=%zu: %zu float32 patterns, each rounded to "
           "bf16 and in its place\n", fails ? "FAIL" : "ok  ", K, N, rsb, csb, (size_t)K * N);
    free(b); free(packed); free(expected);
    return fails;
}

// A hash (FNV-1a) of the bits of a bf16 layer's three products (forward, dinp, dweight) on fixed
// random operands, through the fast functions in every build. Every build sums each element in
// the same order (gpt2/cpu_bf16.h) and no sum here comes near a denormal, so every build must
// print the same value: test_matmul.sh compares them.
static uint64_t bf16_fingerprint(void) {
    uint64_t saved = rng_state;
    rng_state = 2024;
    int BT = 37, C = 2 * BF_KC + 7, OC = 45;
    Operands m = random_operands(BT, C, OC, 0);
    size_t ni = m.ni, nw = m.nw, no = m.no;
    float *inp = m.inp, *weight = m.weight, *dout = m.dout;
    float* out = random_array(no);
    float* dinp = random_array(ni);
    float* dweight = random_array(nw);
    matmul_forward_bf16_fast(out, inp, weight, NULL, 1, BT, C, OC);
    matmul_backward_bf16_fast(dinp, dweight, NULL, dout, inp, weight, 1, BT, C, OC);
    uint64_t h = 0xcbf29ce484222325ull;
    const float* results[3] = {out, dinp, dweight};
    size_t sizes[3] = {no, ni, nw};
    for (int k = 0; k < 3; k++) {
        const unsigned char* bytes = (const unsigned char*)results[k];
        for (size_t i = 0; i < sizes[k] * sizeof(float); i++) h = (h ^ bytes[i]) * 0x100000001b3ull;
    }
    operands_free(&m); free(out); free(dinp); free(dweight);
    rng_state = saved;
    return h;
}

// The backward pass of a product in the first backward pass after the gradients are zeroed
// (which leaves dweight as it was): `first` writes dweight over whatever it held (garbage here),
// with the bits of `backward` adding into zeros, and adds to dinp and dbias as `backward` does.
// Returns 1 on a failure.
static int check_backward_set_dweight(const char* name, backward_fn backward, backward_fn first,
                                      int BT, int C, int OC) {
    Operands m = random_operands(BT, C, OC, 0);
    size_t ni = m.ni, nw = m.nw;
    float *inp = m.inp, *weight = m.weight, *dout = m.dout;
    float* dinp[2] = {random_array(ni), NULL};
    float* dbias[2] = {random_array(OC), NULL};
    float* dweight[2] = {(float*)calloc_check(nw, sizeof(float)), random_array(nw)};
    dinp[1] = copy_array(dinp[0], ni);
    dbias[1] = copy_array(dbias[0], OC);
    backward(dinp[0], dweight[0], dbias[0], dout, inp, weight, 1, BT, C, OC);
    first(dinp[1], dweight[1], dbias[1], dout, inp, weight, 1, BT, C, OC);
    int fails = memcmp(dinp[0], dinp[1], ni * sizeof(float)) != 0;
    fails |= memcmp(dweight[0], dweight[1], nw * sizeof(float)) != 0;
    fails |= memcmp(dbias[0], dbias[1], OC * sizeof(float)) != 0;
    printf("%s %s BT=%d C=%d OC=%d: dweight written over garbage, the bits of adding into zeros\n",
           fails ? "FAIL" : "ok  ", name, BT, C, OC);
    operands_free(&m);
    for (int k = 0; k < 2; k++) free(dinp[k]), free(dbias[k]), free(dweight[k]);
    return fails;
}

// Worst |fast - naive| over n floats, relative to the largest |naive|; 0 where both are NaN-free
// and equal. A NaN anywhere counts as infinitely far.
static double attention_error(const float* fast, const float* naive, size_t n) {
    double scale = 0.0, worst = 0.0;
    for (size_t i = 0; i < n; i++) scale = fmax(scale, fabs((double)naive[i]));
    for (size_t i = 0; i < n; i++) {
        double e = fabs((double)fast[i] - (double)naive[i]);
        if (!(e <= worst)) worst = isnan(e) ? INFINITY : e;
    }
    return worst / (scale > 0.0 ? scale : 1.0);
}

// attention_forward_fast and attention_backward_fast (attention's products on gemm_block) against
// the plain loops of attention_forward_naive and attention_backward_naive: the same sums in
// another order, so within float32 rounding (1e-5 of the largest value); and the masked part of
// the scores and their softmax exactly 0. Returns 1 on a failure.
static int check_attention(int B, int T, int C, int NH) {
    size_t nq = (size_t)B * T * 3 * C, no = (size_t)B * T * C, na = (size_t)B * NH * T * T;
    float* inp = random_array(nq);
    float* dout = random_array(no);
    float *out[2], *pre[2], *att[2], *dinp[2], *dpre[2], *datt[2];
    random_arrays(out, 2, no); random_arrays(pre, 2, na); random_arrays(att, 2, na);
    zero_arrays(dinp, 2, nq); zero_arrays(dpre, 2, na); zero_arrays(datt, 2, na);
    attention_forward_naive(out[0], pre[0], att[0], inp, B, T, C, NH);
    attention_forward_fast(out[1], pre[1], att[1], inp, B, T, C, NH);
    attention_backward_naive(dinp[0], dpre[0], datt[0], dout, inp, att[0], B, T, C, NH);
    attention_backward_fast(dinp[1], dpre[1], datt[1], dout, inp, att[0], B, T, C, NH);
    double e[5] = {attention_error(out[1], out[0], no), attention_error(pre[1], pre[0], na),
                   attention_error(att[1], att[0], na), attention_error(dinp[1], dinp[0], nq),
                   attention_error(dpre[1], dpre[0], na)};
    int fails = 0;
    for (int i = 0; i < 5; i++) fails |= !(e[i] <= 1e-5);
    for (size_t r = 0; r < (size_t)B * NH * T; r++) {   // row t of a (batch, head): t2 > t masked
        size_t t = r % T;
        for (size_t t2 = t + 1; t2 < (size_t)T; t2++) fails |= pre[1][r * T + t2] != 0.0f || att[1][r * T + t2] != 0.0f;
    }
    printf("%s attention fast vs naive B=%d T=%d C=%d NH=%d: out %.1e, preatt %.1e, att %.1e, dqkv %.1e, "
           "dpreatt %.1e of the largest\n", fails ? "FAIL" : "ok  ", B, T, C, NH, e[0], e[1], e[2], e[3], e[4]);
    free(inp); free(dout);
    free_arrays(out, 2); free_arrays(pre, 2); free_arrays(att, 2);
    free_arrays(dinp, 2); free_arrays(dpre, 2); free_arrays(datt, 2);
    return fails;
}

// layernorm_*_fast against layernorm_*_naive on the same rows: out, mean, rstd and the three
// gradients within 1e-5 of the largest value (the sums run in another order); the fast ones on 1
// and 2 threads bit for bit. C = 37 leaves a partial vector and a partial chunk of channels.
static int check_layernorm(int BT, int C) {
    size_t n = (size_t)BT * C;
    float* inp = random_array(n);
    float* dout = random_array(n);
    float* w = random_array(C);
    float* b = random_array(C);
    float *out[3], *mean[3], *rstd[3], *dinp[3], *dw[3], *db[3];
    random_arrays(out, 3, n); random_arrays(mean, 3, BT); random_arrays(rstd, 3, BT);
    zero_arrays(dinp, 3, n); zero_arrays(dw, 3, C); zero_arrays(db, 3, C);
    int fails = 0, threads = num_threads();
    for (int k = 0; k < 3; k++) {   // naive, fast on 1 thread, fast on 2
        set_threads(k == 2 ? 2 : 1);
        if (k == 0) {
            layernorm_forward_naive(out[k], mean[k], rstd[k], inp, w, b, 1, BT, C);
            layernorm_backward_naive(dinp[k], dw[k], db[k], dout, inp, w, mean[k], rstd[k], 1, BT, C);
        } else {
            layernorm_forward_fast(out[k], mean[k], rstd[k], inp, w, b, 1, BT, C);
            layernorm_backward_fast(dinp[k], dw[k], db[k], dout, inp, w, mean[0], rstd[0], 1, BT, C);
        }
    }
    set_threads(threads);
    double e[6] = {attention_error(out[1], out[0], n), attention_error(mean[1], mean[0], BT),
                   attention_error(rstd[1], rstd[0], BT), attention_error(dinp[1], dinp[0], n),
                   attention_error(dw[1], dw[0], C), attention_error(db[1], db[0], C)};
    for (int i = 0; i < 6; i++) fails |= !(e[i] <= 1e-5);
    fails |= memcmp(out[1], out[2], n * sizeof(float)) != 0 || memcmp(dinp[1], dinp[2], n * sizeof(float)) != 0 ||
             memcmp(dw[1], dw[2], C * sizeof(float)) != 0 || memcmp(db[1], db[2], C * sizeof(float)) != 0;
    printf("%s layernorm fast vs naive BT=%d C=%d: out %.1e, mean %.1e, rstd %.1e, dinp %.1e, dweight %.1e, "
           "dbias %.1e of the largest; 1 and 2 threads bit-identical\n", fails ? "FAIL" : "ok  ", BT, C,
           e[0], e[1], e[2], e[3], e[4], e[5]);
    free(inp); free(dout); free(w); free(b);
    free_arrays(out, 3); free_arrays(mean, 3); free_arrays(rstd, 3);
    free_arrays(dinp, 3); free_arrays(dw, 3); free_arrays(db, 3);
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

int main(int argc, char** argv) {
    if (argc == 2 && strcmp(argv[1], "--bf16-arith") == 0) {   // what the bf16 products run on
        printf("bf16 products: %s\n", cpu_bf16_arith());
        return 0;
    }
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
    fails += check_shape(MATMUL_IN_PLACE_ROWS + 5, 40, 50, 1);   // rows enough for the packed forms
    fails += check_determinism("matmul_forward/backward_fast", matmul_forward_fast,
                               matmul_backward_fast, 257, 769, 301);
    int packed_rows[] = {1, 2, 3, 13, 14, 15, 16, 17, 29, 32, 33, 64, 100};
    int n_packed = (int)(sizeof(packed_rows) / sizeof(packed_rows[0]));
    fails += check_packed_gemm(0, packed_rows, n_packed, 37, 300, 1);    // M > N: slices of rows
    fails += check_packed_gemm(0, packed_rows, n_packed, 301, 768, 1);
    fails += check_packed_gemm(0, packed_rows, n_packed, 301, 300, 0);
    fails += check_packed_gemm(0, packed_rows, n_packed, 2 * MM_NC + 104, 300, 1);   // NC blocks in a slice
    fails += check_packed_rows(0, 29, 768, 301, 1);
    fails += check_packed_rows(0, 64, 300, MM_NC + 37, 0);
    fails += check_packed_rows(0, 100, 300, 37, 1);             // slices of rows at M = 100
    fails += check_backward_set_dweight("matmul_backward_fast_set_dweight", matmul_backward_fast,
                                  matmul_backward_fast_set_dweight, 257, 769, 301);
    fails += check_backward_set_dweight("matmul_backward_fast_set_dweight", matmul_backward_fast,
                                  matmul_backward_fast_set_dweight, 2 * MM_KC + 9, 40, 33);   // k blocks
    fails += check_backward_set_dweight("matmul_backward_set_dweight", matmul_backward, matmul_backward_set_dweight,
                                  65, 100, 37);
    fails += check_dot_lanes();
    fails += check_layernorm(256, 768);          // d12's rows
    fails += check_layernorm(7, 37);             // a partial vector, a partial chunk of channels
    fails += check_attention(2, 64, 128, 2);    // a d12 head (hs = 64), a whole panel of keys
    fails += check_attention(3, 37, 60, 4);     // edge tiles in every direction (hs = 15)
    fails += check_attention(1, 300, 32, 1);    // T > MC: several blocks of query rows
    fails += check_gemm_bias(0, 29, 301, 2 * MM_KC + 5, 1);       // k blocks after the first add
    fails += check_gemm_bias(0, 100, 37, 300, 0);                 // slices of rows, zeros
    fails += check_gemm_bias(0, 15, MM_NC + 37, 64, 1);           // column blocks, a narrow panel
    fails += check_gemm_bias(0, 5, 40, 0, 1);                     // no K: C = bias
    fails += check_gemm_bias(0, 96, 131, 77, 1);   // weight rows: whole panels of C's rows, a short tile
    fails += check_a_rows(256, 96, 2 * MM_KC + 7);   // k blocks, two blocks of rows and a short tile
    fails += check_a_rows(37, 300, 50);              // slices of columns, edge panels
    fails += check_a_rows(300, 20, 33);              // slices of rows
    fails += check_a_rows(40, 2 * MM_NC_A_ROWS + 72, 70);   // blocks of B's columns in each slice

    printf("bf16 products: %s, KC %d\n", cpu_bf16_arith(), BF_KC);
    fails += check_bf16_packing(2 * BF_KC + 37, 1000, 1, 2 * BF_KC + 37);   // weight^T: pairs adjacent
    fails += check_bf16_packing(2 * BF_KC + 37, 1000, 1000, 1);              // k down the columns
    fails += check_bf16_packing(301, 45, 2 * 45, 2);                         // neither stride 1
    for (int r = 0; r < 4; r++) {
        for (int s = 0; s < 4; s++) {
            fails += check_bf16_shape(rows[r], shapes[s][0], shapes[s][1], (r + s) % 2, 0);
        }
    }
    fails += check_bf16_shape(7, 40, MM_NC + 37, 1, 0);        // several column blocks
    fails += check_bf16_shape(65, 2 * BF_KC + 3, 20, 0, 0);    // several k blocks in forward
    fails += check_bf16_shape(600, 64, 48, 1, 0);              // several k blocks in dweight
    fails += check_bf16_shape(29, 2 * BF_KC + 7, 45, 1, 1);    // odd K in the last k block
    fails += check_bf16_shape(1, 2 * BF_KC + 1, 37, 0, 1);
    fails += check_bf16_shape(601, 70, 33, 1, 1);              // odd K in dweight's last block
    fails += check_determinism("matmul_forward/backward_bf16", matmul_forward_bf16,
                               matmul_backward_bf16, 257, 769, 301);
    fails += check_backward_set_dweight("matmul_backward_bf16_fast_set_dweight", matmul_backward_bf16_fast,
                                  matmul_backward_bf16_fast_set_dweight, 257, 769, 301);
    fails += check_backward_set_dweight("matmul_backward_bf16_fast_set_dweight", matmul_backward_bf16_fast,
                                  matmul_backward_bf16_fast_set_dweight, 2 * BF_KC + 9, 40, 33);
    fails += check_backward_set_dweight("matmul_backward_bf16_set_dweight", matmul_backward_bf16,
                                  matmul_backward_bf16_set_dweight, 65, 100, 37);
    fails += check_packed_gemm(1, packed_rows, n_packed, 37, 300, 1);
    fails += check_packed_gemm(1, packed_rows, n_packed, 301, 2 * BF_KC + 7, 1);
    fails += check_packed_gemm(1, packed_rows, n_packed, 301, 301, 0);
    fails += check_packed_gemm(1, packed_rows, n_packed, 2 * MM_NC + 104, 300, 1);
    fails += check_packed_rows(1, 29, 768, 301, 1);
    fails += check_packed_rows(1, 64, 301, MM_NC + 37, 0);
    fails += check_packed_rows(1, 100, 300, 37, 1);
    fails += check_gemm_bias(1, 29, 301, 2 * BF_KC + 5, 1);
    fails += check_gemm_bias(1, 100, 37, 300, 0);
    fails += check_gemm_bias(1, 15, MM_NC + 37, 65, 1);           // an odd K: a half-filled pair
    fails += check_gemm_bias(1, 5, 40, 0, 1);
    printf("bf16 fingerprint: %016llx\n", (unsigned long long)bf16_fingerprint());

    fails += check_vector_math();
    if (fails > 0) {
        printf("matmul_check: %d checks FAILED\n", fails);
        return 1;
    }
    printf("matmul_check: all passed\n");
    return 0;
}

// Exercise 4's check (check.sh compiles it): rmsnorm_forward and rmsnorm_backward of
// gpt2/cpu_layers.h. The forward against the definition, written out below in double:
//     rstd = 1 / sqrt(mean(x^2) + eps), out = x * rstd * weight   (per row of C)
// and the backward against central differences of that definition in double, for
//     L = sum of w * out                (w random: the dout handed to the backward)
// Perturbing an element of row r changes only row r's part of L, so each difference costs one
// row. Then: the backward adds into its buffers (+=), and gives the same bits every time.
// Usage: rms_check [PREFIX]: with PREFIX, the forward's out and rstd of every shape go to
// PREFIX.forward and the backward's dinp and dweight to PREFIX.backward, so that check.sh can
// compare the bits of a run on 1 thread with those of a run on 4.
#include "gpt2/cpu_layers.h"

static FILE* dump_forward;   // NULL without a PREFIX
static FILE* dump_backward;

static void dump(FILE* f, const float* a, size_t n) {
    if (f != NULL && fwrite(a, sizeof(float), n, f) != n) {
        printf("rms_check: cannot write its results\n");
        exit(2);
    }
}

#define EPS 1e-5

static double rand_uniform(uint64_t* s) {  // in [-1, 1)
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return (double)(*s >> 11) / (double)(1ull << 53) * 2.0 - 1.0;
}

static double rstd_reference(const double* x, int C) {
    double ms = 0.0;
    for (int i = 0; i < C; i++) ms += x[i] * x[i];
    return 1.0 / sqrt(ms / C + EPS);
}

// row bt's part of L
static double row_loss(const double* x, const double* weight, const double* w, int C) {
    double r = rstd_reference(x, C), L = 0.0;
    for (int i = 0; i < C; i++) L += w[i] * x[i] * r * weight[i];
    return L;
}

// (L(p + h) - L(p - h)) / 2h for one entry p of x or weight, which is left as it was
static double central_difference(double* p, double h, double* x, const double* weight, const double* w, int C) {
    double keep = *p;
    *p = keep + h;
    double up = row_loss(x, weight, w, C);
    *p = keep - h;
    double down = row_loss(x, weight, w, C);
    *p = keep;
    return (up - down) / (2 * h);
}

// worst of |got - want| / (atol + rtol |want|) over n, and where; NaN is the worst
static double worst_error(const float* got, const double* want, size_t n, double atol, double rtol, size_t* at) {
    double worst = 0.0;
    *at = 0;
    for (size_t i = 0; i < n; i++) {
        double err = fabs(got[i] - want[i]) / (atol + rtol * fabs(want[i]));
        if (!(err <= worst)) worst = err, *at = i;
    }
    return worst;
}

static double max_abs(const double* a, size_t n) {
    double m = 0.0;
    for (size_t i = 0; i < n; i++) m = fabs(a[i]) > m ? fabs(a[i]) : m;
    return m;
}

static int check_shape(int B, int T, int C, uint64_t seed) {
    size_t rows = (size_t)B * T, n = rows * C;
    float* inp = malloc(n * sizeof(float));
    float* out = malloc(n * sizeof(float));
    float* rstd = malloc(rows * sizeof(float));
    float* dout = malloc(n * sizeof(float));
    float* weight = malloc(C * sizeof(float));
    float* dinp0 = malloc(n * sizeof(float));     // what the gradient buffers hold before
    float* dweight0 = malloc(C * sizeof(float));
    float* dinp = malloc(n * sizeof(float));
    float* dweight = malloc(C * sizeof(float));
    float* dinp2 = malloc(n * sizeof(float));
    float* dweight2 = malloc(C * sizeof(float));
    double* x = malloc(n * sizeof(double));
    double* w = malloc(n * sizeof(double));
    double* wt = malloc(C * sizeof(double));
    double* ref = malloc(n * sizeof(double));
    double* ref_rstd = malloc(rows * sizeof(double));
    double* fd_inp = malloc(n * sizeof(double));
    double* fd_weight = calloc(C, sizeof(double));
    double* grad = malloc(n * sizeof(double));
    // rows of different sizes: some small (rstd large), some offset from zero
    for (size_t bt = 0; bt < rows; bt++) {
        double size = 0.2 + 2.0 * (bt % 5) / 4.0, shift = (bt % 3) * 0.7;
        for (int i = 0; i < C; i++) inp[bt * C + i] = (float)(size * rand_uniform(&seed) + shift);
    }
    for (size_t i = 0; i < n; i++) {
        x[i] = inp[i];
        dout[i] = (float)rand_uniform(&seed), w[i] = dout[i];
        dinp0[i] = (float)rand_uniform(&seed);
    }
    for (int i = 0; i < C; i++) {
        weight[i] = (float)(1.0 + 0.5 * rand_uniform(&seed)), wt[i] = weight[i];
        dweight0[i] = (float)rand_uniform(&seed);
    }
    char shape[64];
    snprintf(shape, sizeof(shape), "B=%d T=%d C=%d", B, T, C);

    // forward
    rmsnorm_forward(out, rstd, inp, weight, B, T, C);
    dump(dump_forward, out, n);
    dump(dump_forward, rstd, rows);
    for (size_t bt = 0; bt < rows; bt++) {
        ref_rstd[bt] = rstd_reference(x + bt * C, C);
        for (int i = 0; i < C; i++) ref[bt * C + i] = x[bt * C + i] * ref_rstd[bt] * wt[i];
    }
    size_t at;
    if (worst_error(rstd, ref_rstd, rows, 1e-6, 1e-4, &at) > 1.0) {
        printf("%s: rmsnorm_forward saved rstd[%zu] = %.6f, 1 / sqrt(mean(x^2) + eps) of that row is %.6f\n",
               shape, at, rstd[at], ref_rstd[at]);
        return 0;
    }
    if (worst_error(out, ref, n, 1e-5, 1e-4, &at) > 1.0) {
        printf("%s: rmsnorm_forward's out[%zu] = %.6f, x * rstd * weight is %.6f\n", shape, at, out[at], ref[at]);
        return 0;
    }

    // finite differences of L, in double
    double h = 1e-5;
    for (size_t bt = 0; bt < rows; bt++) {
        double* xr = x + bt * C;
        const double* wr = w + bt * C;
        for (int i = 0; i < C; i++) fd_inp[bt * C + i] = central_difference(&xr[i], h, xr, wt, wr, C);
        // L is linear in weight: dL/dweight_i = w_i x_i rstd
        for (int i = 0; i < C; i++) fd_weight[i] += central_difference(&wt[i], h, xr, wt, wr, C);
    }

    // backward, into buffers that already hold something
    memcpy(dinp, dinp0, n * sizeof(float));
    memcpy(dweight, dweight0, C * sizeof(float));
    rmsnorm_backward(dinp, dweight, dout, inp, weight, rstd, B, T, C);
    dump(dump_backward, dinp, n);
    dump(dump_backward, dweight, C);
    const char* names[2] = {"dinp", "dweight"};
    float* got[2] = {dinp, dweight};
    float* before[2] = {dinp0, dweight0};
    double* fd[2] = {fd_inp, fd_weight};
    size_t len[2] = {n, (size_t)C};
    for (int k = 0; k < 2; k++) {
        double scale = max_abs(fd[k], len[k]);
        for (size_t i = 0; i < len[k]; i++) grad[i] = (double)got[k][i] - before[k][i];
        double worst = 0.0, worst_set = 0.0;  // the latter as if the backward had written, not added
        at = 0;
        for (size_t i = 0; i < len[k]; i++) {
            double tol = 1e-4 * scale + 1e-3 * fabs(fd[k][i]);
            double err = fabs(grad[i] - fd[k][i]) / tol, err_set = fabs(got[k][i] - fd[k][i]) / tol;
            if (!(err <= worst)) worst = err, at = i;
            if (!(err_set <= worst_set)) worst_set = err_set;
        }
        if (worst <= 1.0) continue;
        if (worst_set <= 1.0) {
            printf("%s: rmsnorm_backward overwrites %s; a backward adds into its gradients (+=), as "
                   "layernorm_backward does\n", shape, names[k]);
        } else {
            printf("%s: rmsnorm_backward gives %s[%zu] = %.6f, finite differences of the forward give %.6f\n",
                   shape, names[k], at, grad[at], fd[k][at]);
        }
        return 0;
    }

    // the same bits when run again
    for (int again = 0; again < 3; again++) {
        memcpy(dinp2, dinp0, n * sizeof(float));
        memcpy(dweight2, dweight0, C * sizeof(float));
        rmsnorm_backward(dinp2, dweight2, dout, inp, weight, rstd, B, T, C);
        if (memcmp(dinp2, dinp, n * sizeof(float)) != 0 || memcmp(dweight2, dweight, C * sizeof(float)) != 0) {
            printf("%s: rmsnorm_backward gives other bits when run again: split the work over outputs "
                   "(rows for dinp, channels for dweight), as layernorm_backward does\n", shape);
            return 0;
        }
    }
    free(inp); free(out); free(rstd); free(dout); free(weight); free(dinp0); free(dweight0); free(dinp);
    free(dweight); free(dinp2); free(dweight2); free(x); free(w); free(wt); free(ref); free(ref_rstd);
    free(fd_inp); free(fd_weight); free(grad);
    return 1;
}

int main(int argc, char** argv) {
    if (argc > 1) {
        char path[4096];
        snprintf(path, sizeof(path), "%s.forward", argv[1]);
        dump_forward = fopen(path, "wb");
        snprintf(path, sizeof(path), "%s.backward", argv[1]);
        dump_backward = fopen(path, "wb");
        if (dump_forward == NULL || dump_backward == NULL) {
            printf("rms_check: cannot open %s.forward and .backward for writing\n", argv[1]);
            return 2;
        }
    }
    // small shapes first, then one with enough rows that threads adding into one dweight collide
    int ok = check_shape(1, 1, 7, 1) && check_shape(3, 5, 37, 2) && check_shape(4, 257, 67, 3);
    if (dump_forward != NULL && (fclose(dump_forward) != 0 || fclose(dump_backward) != 0)) {
        printf("rms_check: cannot write its results\n");
        return 2;
    }
    return ok ? 0 : 1;
}

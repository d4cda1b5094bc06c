// Exercise 3's check (check.sh compiles it, with and without -DATTN_SCALE=...): the attention of
// gpt2/cpu_layers.h at the scale EXPECTED_SCALE, an expression in hs in double that check.sh
// passes along with ATTN_SCALE. Its forward against the definition, written out below in double:
//     out = softmax(q.k * scale, over the keys 0..t) . v
// and its backward against finite differences of that definition, in double too. Then generation's
// attention against the key-value cache (attention_forward_paged, gpt2/kv_pages.h, which infer.c
// runs) against the same definition, and attention_scale itself, where every attention, the GPU
// kernels' too, gets its scale: a knob set in the CPU layers alone fails these.
#include "gpt2/cpu_layers.h"
#include "gpt2/kv_pages.h"

static double expected_scale(int hs) { return EXPECTED_SCALE; }

static double rand_uniform(uint64_t* s) {  // in [-1, 1)
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return (double)(*s >> 11) / (double)(1ull << 53) * 2.0 - 1.0;
}

// The definition: out (B,T,C) of inp (B,T,3C) holding query, key, value.
static void attention_reference(double* out, const double* inp, int B, int T, int C, int NH) {
    int hs = C / NH;
    double scale = expected_scale(hs), score[64];
    for (int b = 0; b < B; b++) {
        for (int t = 0; t < T; t++) {
            for (int h = 0; h < NH; h++) {
                const double* q = inp + ((size_t)b * T + t) * 3 * C + h * hs;
                double max = -INFINITY, sum = 0.0;
                for (int u = 0; u <= t; u++) {
                    const double* k = inp + ((size_t)b * T + u) * 3 * C + C + h * hs;
                    score[u] = 0.0;
                    for (int i = 0; i < hs; i++) score[u] += q[i] * k[i];
                    score[u] *= scale;
                    if (score[u] > max) max = score[u];
                }
                for (int u = 0; u <= t; u++) sum += exp(score[u] - max);
                double* o = out + ((size_t)b * T + t) * C + h * hs;
                for (int i = 0; i < hs; i++) o[i] = 0.0;
                for (int u = 0; u <= t; u++) {
                    const double* v = inp + ((size_t)b * T + u) * 3 * C + 2 * C + h * hs;
                    for (int i = 0; i < hs; i++) o[i] += exp(score[u] - max) / sum * v[i];
                }
            }
        }
    }
}

// L = sum of w * out, whose gradient attention_backward computes when given dout = w
static double loss_reference(const double* inp, const double* w, double* out, int B, int T, int C, int NH) {
    attention_reference(out, inp, B, T, C, NH);
    double L = 0.0;
    for (int i = 0; i < B * T * C; i++) L += w[i] * out[i];
    return L;
}

static int check_shape(int B, int T, int C, int NH, uint64_t seed) {
    int hs = C / NH;
    size_t n_in = (size_t)B * T * 3 * C, n_out = (size_t)B * T * C, n_att = (size_t)B * NH * T * T;
    // the layers' float tensors in one allocation, the reference's doubles in another
    float* floats = calloc(2 * n_in + 2 * n_out + 4 * n_att, sizeof(float));
    float *inp = floats, *dinp = inp + n_in, *out = dinp + n_in, *dout = out + n_out;
    float *preatt = dout + n_out, *att = preatt + n_att, *dpreatt = att + n_att, *datt = dpreatt + n_att;
    double* doubles = calloc(n_in + 3 * n_out, sizeof(double));
    double *x = doubles, *w = x + n_in, *ref = w + n_out, *scratch = ref + n_out;
    // entries of about unit size, so that q.k grows with hs as in the README's question
    for (size_t i = 0; i < n_in; i++) inp[i] = (float)(1.7 * rand_uniform(&seed)), x[i] = inp[i];
    for (size_t i = 0; i < n_out; i++) dout[i] = (float)rand_uniform(&seed), w[i] = dout[i];

    attention_forward(out, preatt, att, inp, B, T, C, NH);
    attention_reference(ref, x, B, T, C, NH);
    double worst = 0.0;
    size_t at = 0;
    for (size_t i = 0; i < n_out; i++) {
        double err = fabs(out[i] - ref[i]) / (1e-5 + 1e-4 * fabs(ref[i]));
        if (!(err <= worst)) worst = err, at = i;  // NaN counts as the worst
    }
    int ok = 1;
    if (!(worst <= 1.0)) {
        printf("B=%d T=%d C=%d NH=%d (hs=%d): attention_forward's output %zu is %.6f, softmax(q.k * %g + mask).v "
               "gives %.6f: does attention_forward use ATTN_SCALE?\n", B, T, C, NH, hs, at, out[at],
               expected_scale(hs), ref[at]);
        ok = 0;
    }

    // backward: dinp against central differences of the reference's L
    attention_backward(dinp, dpreatt, datt, dout, inp, att, B, T, C, NH);
    double h = 1e-5, max_fd = 0.0;
    double* fd = calloc(n_in, sizeof(double));
    for (size_t i = 0; i < n_in; i++) {
        double keep = x[i];
        x[i] = keep + h;
        double up = loss_reference(x, w, scratch, B, T, C, NH);
        x[i] = keep - h;
        double down = loss_reference(x, w, scratch, B, T, C, NH);
        x[i] = keep;
        fd[i] = (up - down) / (2 * h);
        if (fabs(fd[i]) > max_fd) max_fd = fabs(fd[i]);
    }
    // generation: the whole sequence as a prompt into an empty paged cache, pages in order
    int max_pages = kv_pages_for(T);
    size_t pool = (size_t)B * max_pages * NH * KV_PAGE * hs;
    float* kv = calloc(2 * pool + n_out, sizeof(float));
    int* pages = calloc((size_t)B * max_pages + B, sizeof(int));
    for (int i = 0; i < B * max_pages; i++) pages[i] = i;
    LayerCache cache = {.key = kv, .value = kv + pool, .pages = pages, .pos = pages + B * max_pages,
                        .max_pages = max_pages, .max_len = T, .prefill = 1};  // pos: all 0
    float* gen = kv + 2 * pool;
    attention_forward_paged(gen, &cache, inp, B, T, C, NH);
    for (size_t i = 0; i < n_out && ok; i++) {
        if (!(fabs(gen[i] - ref[i]) <= 1e-5 + 1e-4 * fabs(ref[i]))) {
            printf("B=%d T=%d C=%d NH=%d (hs=%d): generation's attention (attention_forward_paged) gives output %zu = "
                   "%.6f, softmax(q.k * %g + mask).v gives %.6f: does it get the scale from attention_scale?\n",
                   B, T, C, NH, hs, i, gen[i], expected_scale(hs), ref[i]);
            ok = 0;
        }
    }
    free(kv);
    free(pages);

    const char* part[3] = {"query", "key", "value"};
    for (int p = 0; p < 3 && ok; p++) {
        double dot = 0.0, fd2 = 0.0;  // the factor dinp is off by, if it is a factor
        for (size_t i = 0; i < n_in; i++) {
            if ((int)(i % (3 * C)) / C != p) continue;
            double err = fabs(dinp[i] - fd[i]);
            dot += dinp[i] * fd[i];
            fd2 += fd[i] * fd[i];
            if (!(err <= 1e-4 * max_fd + 1e-3 * fabs(fd[i]))) {
                if (ok) {
                    printf("B=%d T=%d C=%d NH=%d (hs=%d), scale %g: attention_backward's gradient of the %s "
                           "(dinp[%zu]) is %.6f, finite differences of the forward give %.6f\n",
                           B, T, C, NH, hs, expected_scale(hs), part[p], i, dinp[i], fd[i]);
                }
                ok = 0;
            }
        }
        if (!ok && fd2 > 0) {
            printf("  the %s's gradient is %.4f times what it should be: does attention_backward use the "
                   "forward's scale?\n", part[p], dot / fd2);
        }
    }
    free(floats);
    free(doubles);
    free(fd);
    return ok;
}

int main(void) {
    for (int hs = 1; hs <= 128; hs++) {
        double want = expected_scale(hs), got = attention_scale(hs);
        if (!(fabs(got - want) <= 1e-6 * fabs(want))) {
            printf("attention_scale(%d) is %g, not %g: every attention (infer's, the GPU's) takes its scale from "
                   "attention_scale, so the knob must set what it returns\n", hs, got, want);
            return 1;
        }
    }
    // head sizes 5 and 7, sequences that are no multiple of anything
    if (!check_shape(2, 7, 15, 3, 1)) return 1;
    if (!check_shape(1, 11, 14, 2, 2)) return 1;
    return 0;
}

// Exercise 7: the dropout of the residual branches, driven through gpt2_forward and gpt2_backward
// on a small fresh model (gpt2_build "d1": one block, C = 64).
//
// 1. The gradient against finite differences: one batch, model.dropout = 0.5 and a fixed
//    model.dropout_seed; the gradient that gpt2_backward computes must be the derivative of the
//    loss that gpt2_forward computes with the same masks. Checked along the gradient's own
//    direction u = g / |g|: the finite difference (L(w + h u) - L(w - h u)) / 2h must equal
//    g . u = |g|. A backward that forgets the mask, or its 1/(1-p) scale, computes the gradient of
//    another function, and the two disagree. Also: the same seed gives the same loss (a mask is a
//    function of its seed), another seed another loss.
// 2. The masks themselves, at p = 0.2 (at 0.5 a keep probability swapped with the drop
//    probability would look right). They are read from the residual stream, whatever buffer the
//    dropout works in: residual2 = x + dropout(attproj) and residual3 = residual2 +
//    dropout(fcproj), so a value dropped from a branch is one where the stream leaves the block's
//    half exactly as it entered. (A kept value below half a float32 step of the stream would
//    look dropped too: the plain model's pass, in which nothing is dropped, must show none.) Of
//    the N = B*T*C values of a branch, each dropped independently with probability p, the number
//    dropped is binomial: mean Np, standard deviation sqrt(Np(1-p)); it must lie within 5 of
//    them of Np (a correct mask falls outside with probability about 6e-7, the normal
//    approximation's). The values both branches drop: binomial with the product of the two
//    fractions dropped if the masks are independent, within the same 5 standard deviations (one
//    mask on both branches drops all the values either drops). The kept values of attention's
//    branch, whose input does not depend on dropout, must be the plain model's times 1/(1-p),
//    each to float32 rounding.
// Exit status 0 when all hold.
#define TRAIN_CPU_NO_MAIN
#include "../../../train_cpu.c"

static float loss_of(GPT2* m, const int* in, const int* tg, int B, int T) {
    gpt2_forward(m, in, tg, B, T);
    return m->mean_loss;
}

// |k - mean| within 5 standard deviations of a binomial count of n draws with probability q
static int binomial_ok(long k, long n, double q) {
    return fabs((double)k - n * q) <= 5.0 * sqrt(n * q * (1.0 - q));
}

// Part 2: the masks of one pass at dropout p, read from the residual stream of block 0.
static int check_masks(GPT2* m, float p) {
    int B = 4, T = 32, C = m->config.channels, V = m->config.vocab_size;
    long N = (long)B * T * C;
    int* in = (int*)malloc_check((size_t)B * T * sizeof(int));
    uint64_t rng = 7;
    for (int i = 0; i < B * T; i++) in[i] = (int)(random_f32(&rng) * V);
    float* plain = (float*)malloc_check((size_t)N * sizeof(float));  // residual2 without dropout
    m->dropout = 0.0f;
    gpt2_forward(m, in, NULL, B, T);
    memcpy(plain, activations_of_layer(m->acts, m->config, B, T, 0).residual2, (size_t)N * sizeof(float));
    m->dropout = p;
    m->dropout_seed = 2024;
    gpt2_forward(m, in, NULL, B, T);
    m->dropout = 0.0f;
    ActivationTensors a = activations_of_layer(m->acts, m->config, B, T, 0);
    const float *x = m->acts.encoded, *r2 = a.residual2, *r3 = a.residual3;
    long att = 0, mlp = 0, both = 0, bad = 0, plain_dropped = 0;
    double s = 1.0 / (1.0 - p), dot = 0.0, sq = 0.0;
    for (long i = 0; i < N; i++) {
        int att_dropped = r2[i] == x[i], mlp_dropped = r3[i] == r2[i];
        att += att_dropped;
        mlp += mlp_dropped;
        both += att_dropped && mlp_dropped;
        plain_dropped += plain[i] == x[i];
        if (att_dropped) continue;
        // the kept value and the plain one, each exact to half a float32 step of the stream
        double kept = (double)r2[i] - x[i], unscaled = (double)plain[i] - x[i];
        dot += kept * unscaled;
        sq += unscaled * unscaled;
        if (fabs(kept - s * unscaled) > 1e-6 * (fabs(r2[i]) + fabs(plain[i]) + fabs(kept))) bad++;
    }
    int fails = 0;
    double q = (double)att / N * mlp / N;  // both, if the masks are independent
    printf("dropout %.1f on %ld values a branch: attention's drops %ld, the MLP's %ld (expected %.0f +- %.0f), "
           "both %ld (expected %.0f +- %.0f); attention's kept values scaled by %.4f (1/(1-p) = %.4f)\n",
           p, N, att, mlp, N * p, 5 * sqrt(N * p * (1.0 - p)), both, N * q, 5 * sqrt(N * q * (1.0 - q)), dot / sq, s);
    if (plain_dropped > 0) {
        printf("without dropout, %ld values of attention's branch leave the stream unchanged: this check cannot "
               "tell dropped values from kept ones\n", plain_dropped);
        fails++;
    }
    if (!binomial_ok(att, N, p) || !binomial_ok(mlp, N, p)) {
        printf("a branch drops another fraction of its values than p = %.1f: is each value dropped with probability p "
               "(not kept with probability p), on both branches?\n", p);
        fails++;
    }
    if (!binomial_ok(both, N, q)) {
        printf("the two branches' masks are not independent: each branch needs a mask of its own\n");
        fails++;
    }
    if (bad > 0) {
        printf("%ld of attention's kept values are not the plain model's times 1/(1-p) = %.4f\n", bad, s);
        fails++;
    }
    free(in);
    free(plain);
    return fails;
}

int main(void) {
    GPT2 m;
    gpt2_build(&m, "d1", 7);
    int B = 2, T = 8, V = m.config.vocab_size;
    int in[16], tg[16];
    uint64_t rng = 99;
    for (int i = 0; i < B * T; i++) {
        in[i] = (int)(random_f32(&rng) * V);
        tg[i] = (int)(random_f32(&rng) * V);
    }
    int fails = 0;
    float plain = loss_of(&m, in, tg, B, T);
    m.dropout = 0.5f;
    m.dropout_seed = 12345;
    float a = loss_of(&m, in, tg, B, T), b = loss_of(&m, in, tg, B, T);
    m.dropout_seed = 54321;
    float other = loss_of(&m, in, tg, B, T);
    m.dropout_seed = 12345;
    if (a != b) { printf("the same dropout_seed gives two losses, %.7f and %.7f: the mask must be a function of the seed\n", a, b); fails++; }
    if (a == plain) { printf("dropout 0.5 leaves the loss at %.7f, the plain model's: no dropout happens in gpt2_forward\n", a); fails++; }
    if (other == a) { printf("two seeds give the same loss %.7f: the mask does not depend on dropout_seed\n", a); fails++; }

    gpt2_zero_grad(&m);
    gpt2_forward(&m, in, tg, B, T);
    gpt2_backward(&m, 1);  // the first pass after gpt2_zero_grad
    size_t n = m.num_parameters;
    float* g = (float*)malloc_check(n * sizeof(float));
    memcpy(g, m.grads_memory, n * sizeof(float));
    double norm = 0.0;
    for (size_t i = 0; i < n; i++) norm += (double)g[i] * g[i];
    norm = sqrt(norm);
    float* w0 = (float*)malloc_check(n * sizeof(float));
    memcpy(w0, m.params_memory, n * sizeof(float));
    double h = 1e-3;
    for (size_t i = 0; i < n; i++) m.params_memory[i] = (float)(w0[i] + h * g[i] / norm);
    double up = loss_of(&m, in, tg, B, T);
    for (size_t i = 0; i < n; i++) m.params_memory[i] = (float)(w0[i] - h * g[i] / norm);
    double down = loss_of(&m, in, tg, B, T);
    memcpy(m.params_memory, w0, n * sizeof(float));
    double fd = (up - down) / (2 * h), rel = fabs(fd - norm) / norm;
    printf("dropout 0.5: directional derivative along the gradient: finite difference %.5f, backward %.5f "
           "(relative difference %.1e)\n", fd, norm, rel);
    if (!(rel < 1e-3)) {  // float32 rounding leaves ~1e-4; a wrong mask leaves ~1e-2
        printf("the backward pass is not the derivative of the forward with dropout: does it apply the same mask, "
               "scaled by 1/(1-p), to the gradient of each dropped branch?\n");
        fails++;
    }
    m.dropout = 0.0f;
    fails += check_masks(&m, 0.2f);
    free(g);
    free(w0);
    gpt2_free(&m);
    return fails ? 1 : 0;
}

// Exercise 7: the dropout of the residual branches against finite differences. A small fresh
// model (gpt2_build "d1"), one batch, model.dropout = 0.5 and a fixed model.dropout_seed: the
// gradient that gpt2_backward computes must be the derivative of the loss that gpt2_forward
// computes with the same masks. Checked along the gradient's own direction u = g / |g|: the
// finite difference (L(w + h u) - L(w - h u)) / 2h must equal g . u = |g|. A backward that
// forgets the mask, or its 1/(1-p) scale, computes the gradient of another function, and the two
// disagree. Also: the same seed gives the same loss (a mask is a function of its seed), another
// seed another loss, and dropout 0 the loss of the plain model. Exit status 0 when all hold.
#define TRAIN_CPU_NO_MAIN
#include "../../../train_cpu.c"

static float loss_of(GPT2* m, const int* in, const int* tg, int B, int T) {
    gpt2_forward(m, in, tg, B, T);
    return m->mean_loss;
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
    gpt2_backward(&m);
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
    free(g);
    free(w0);
    gpt2_free(&m);
    return fails ? 1 : 0;
}

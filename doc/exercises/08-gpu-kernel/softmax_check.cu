// Exercise 8: softmax_forward_gpu (gpt2/gpu/classifier.cuh) against the CPU's softmax_forward
// (gpt2/cpu_layers.h), on the CPU emulator of CUDA (dev/emu/cuda_emu.h), as dev/gpu/gpu_check.cu checks
// every kernel: random logits from a fixed seed, the output on the GPU first poisoned with NaN,
// every element compared with |gpu - cpu| <= atol + rtol * |cpu| (NaN never passes). Shapes with
// one row, rows that are no multiple of a block, V of 1, of a few, of one block and one more, and
// GPT-2's 50,257 of 50,304; logits near 0 and logits in the hundreds (where exp without the
// row's maximum subtracted overflows). Exit status 0 when everything agrees.
#include "../../../gpt2/random.h"              // random_f32
#include "../../../gpt2/cpu_layers.h"          // softmax_forward
#include "../../../gpt2/gpu/classifier.cuh"    // softmax_forward_gpu; cuda_check, malloc_check

static uint64_t check_rng = 42;

static int check_shape(int B, int T, int V, int Vp, float lo, float hi) {
    size_t n = (size_t)B * T * Vp;
    float* logits = (float*)malloc_check(n * sizeof(float));
    for (size_t i = 0; i < n; i++) logits[i] = lo + (hi - lo) * random_f32(&check_rng);
    float* expected = (float*)malloc_check(n * sizeof(float));
    softmax_forward(expected, logits, B, T, V, Vp);

    float *d_logits, *d_probs;
    cuda_check(cudaMalloc((void**)&d_logits, n * sizeof(float)));
    cuda_check(cudaMalloc((void**)&d_probs, n * sizeof(float)));
    cuda_check(cudaMemcpy(d_logits, logits, n * sizeof(float), cudaMemcpyHostToDevice));
    float* poison = (float*)malloc_check(n * sizeof(float));
    for (size_t i = 0; i < n; i++) poison[i] = NAN;
    cuda_check(cudaMemcpy(d_probs, poison, n * sizeof(float), cudaMemcpyHostToDevice));
    softmax_forward_gpu(d_probs, d_logits, B, T, V, Vp);
    cuda_check(cudaDeviceSynchronize());
    float* got = poison;
    cuda_check(cudaMemcpy(got, d_probs, n * sizeof(float), cudaMemcpyDeviceToHost));

    int bad = 0;
    for (size_t i = 0; i < n && bad < 3; i++) {
        float tol = 1e-7f + 1e-4f * fabsf(expected[i]);
        if (!(fabsf(got[i] - expected[i]) <= tol)) {
            size_t row = i / Vp, col = i % Vp;
            printf("B=%d T=%d V=%d Vp=%d, logits in [%g, %g): row %zu column %zu%s: gpu %g, cpu %g\n", B, T,
                   V, Vp, lo, hi, row, col, col >= (size_t)V ? " (padding: must be 0)" : "", got[i], expected[i]);
            bad++;
        }
    }
    if (bad == 0) printf("ok   B=%d T=%d V=%d Vp=%d, logits in [%g, %g)\n", B, T, V, Vp, lo, hi);
    cuda_check(cudaFree(d_logits));
    cuda_check(cudaFree(d_probs));
    free(logits);
    free(expected);
    free(poison);
    return bad > 0;
}

int main(void) {
    int fails = 0;
    fails += check_shape(1, 1, 1, 128, -1.0f, 1.0f);
    fails += check_shape(2, 3, 37, 128, -5.0f, 5.0f);
    fails += check_shape(1, 5, 1025, 1152, -3.0f, 3.0f);
    fails += check_shape(3, 1, 300, 300, 100.0f, 400.0f);
    fails += check_shape(1, 3, 50257, 50304, -10.0f, 10.0f);
    if (fails) printf("%d shape(s) failed\n", fails);
    return fails ? 1 : 0;
}

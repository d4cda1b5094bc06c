// dev/bench/bench_matmul.c: the matmuls of one GPT-2 124M training step (B*T = 256 rows), timed one
// by one: matmul_forward_fast / matmul_backward_fast of gpt2/cpu_layers.h (and optionally the
// naive loops beside them), in GFLOP/s, so the blocking constants in gpt2/cpu_math.h can be tuned
// and the effect of each product on the step seen.
//
//   gcc -O3 -march=native -fopenmp dev/bench/bench_matmul.c -o build/bench_matmul -lm
//   ./build/bench_matmul [reps=5] [naive=0]
//
// Per layer (x12): qkv C->3C, attproj C->C, fc C->4C, fcproj 4C->C; then the output layer
// C->Vp (Vp = 50304), the largest single product. Forward = out; backward = dinp and dW (dbias
// is free next to them). Each time is the fastest of `reps` runs (other processes can only make
// a run slower); the last line adds the matmuls up to one training step.

#include "../gpt2/cpu_layers.h"
#include "../gpt2/random.h"

static float* random_array(size_t n, uint64_t* rng) {
    float* x = (float*)malloc_check(n * sizeof(float));
    for (size_t i = 0; i < n; i++) x[i] = random_f32(rng) - 0.5f;
    return x;
}

int main(int argc, char** argv) {
    int reps = argc > 1 ? atoi(argv[1]) : 5;
    int naive = argc > 2 ? atoi(argv[2]) : 0;
    int BT = 256, C = 768, Vp = 50304;
    struct { const char* name; int in, out, count; } shapes[5] = {
        {"qkv", C, 3 * C, 12}, {"attproj", C, C, 12}, {"fc", C, 4 * C, 12},
        {"fcproj", 4 * C, C, 12}, {"lm head", C, Vp, 1}};
    uint64_t rng = 1;
    double step_seconds = 0.0, step_flops = 0.0;
    printf("B*T = %d, %d threads; GFLOP/s counts 2 per multiply-add\n", BT, num_threads());
    for (int s = 0; s < 5; s++) {
        int IC = shapes[s].in, OC = shapes[s].out;
        float* inp = random_array((size_t)BT * IC, &rng);
        float* weight = random_array((size_t)OC * IC, &rng);
        float* bias = random_array(OC, &rng);
        float* out = random_array((size_t)BT * OC, &rng);
        float* dinp = random_array((size_t)BT * IC, &rng);
        float* dweight = random_array((size_t)OC * IC, &rng);
        float* dbias = random_array(OC, &rng);
        double flops = 2.0 * BT * IC * OC;
        double best[4] = {1e30, 1e30, 1e30, 1e30};   // fast fwd, fast bwd, naive fwd, naive bwd
        for (int r = 0; r < reps; r++) {
            double t0 = now_seconds();
            matmul_forward_fast(out, inp, weight, bias, 1, BT, IC, OC);
            double t1 = now_seconds();
            matmul_backward_fast(dinp, dweight, dbias, out, inp, weight, 1, BT, IC, OC);
            double t2 = now_seconds();
            if (t1 - t0 < best[0]) best[0] = t1 - t0;
            if (t2 - t1 < best[1]) best[1] = t2 - t1;
        }
        if (naive) {
            double t0 = now_seconds();
            matmul_forward_naive(out, inp, weight, bias, 1, BT, IC, OC);
            double t1 = now_seconds();
            matmul_backward_naive(dinp, dweight, dbias, out, inp, weight, 1, BT, IC, OC);
            double t2 = now_seconds();
            best[2] = t1 - t0;
            best[3] = t2 - t1;
        }
        printf("%-8s %4d -> %5d  forward %7.2f ms %6.1f GFLOP/s   backward %7.2f ms %6.1f GFLOP/s",
               shapes[s].name, IC, OC, best[0] * 1e3, flops / best[0] * 1e-9, best[1] * 1e3,
               2 * flops / best[1] * 1e-9);
        if (naive) {
            printf("   naive %6.1f / %6.1f GFLOP/s", flops / best[2] * 1e-9, 2 * flops / best[3] * 1e-9);
        }
        printf("\n");
        step_seconds += shapes[s].count * (best[0] + best[1]);
        step_flops += shapes[s].count * 3 * flops;
        free(inp); free(weight); free(bias); free(out); free(dinp); free(dweight); free(dbias);
    }
    printf("all matmuls of one training step: %.1f ms, %.1f GFLOP/s\n", step_seconds * 1e3,
           step_flops / step_seconds * 1e-9);
    return 0;
}

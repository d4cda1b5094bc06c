// dev/gpu/roofline.c: prints the roofline of a training step of train_gpu (dev/gpu/roofline.h) for
// GPT-2 124M at B=8, T=1024, in bf16 and in float32, as the markdown that doc/gpu.md holds between
// its "roofline" markers. Computed from the H100 SXM's spec-sheet peaks: it needs no GPU, and it
// measures nothing (build/gpu_check roofline does, on a GPU).
//
//   make build/roofline && build/roofline     the tables
//   make roofline-doc                          the same, pasted into doc/gpu.md
//
// Exits 1 when the rows fail roofline_check (the products' FLOPs against the model's weights).

#include "roofline.h"

// The table of one precision, under its heading; returns its totals.
static RooflineTotals print_precision(const Roofline* r, const char* heading) {
    printf("#### %s\n\n", heading);
    roofline_print_markdown(r, stdout);
    printf("\n");
    return roofline_totals(r, roofline_h100());
}

int main(int argc, char** argv) {
    if (argc > 1) {
        fprintf(stderr, "usage: %s (no options): the roofline tables of doc/gpu.md, in markdown\n", argv[0]);
        return 2;
    }
    GPT2Config c = gpt2_config_for_depth(12);
    const int B = 8, T = 1024;
    Roofline bf16, fp32;
    roofline_build(&bf16, c, B, T, 1);
    roofline_build(&fp32, c, B, T, 0);
    if (!roofline_check(&bf16) || !roofline_check(&fp32)) return 1;
    printf("COMPUTED, not measured: floors from the spec-sheet peaks of an H100 SXM, %.0f TFLOP/s dense bf16\n"
           "on the tensor cores, %.0f TFLOP/s float32 on the CUDA cores, %.2f TB/s HBM3. GPT-2 124M (L=%d, C=%d,\n"
           "NH=%d, V=%d padded to Vp=%d), B=%d, T=%d, one GPU, one micro-step; GFLOP, GB and floor are per\n"
           "step, all calls of the row together.\n\n",
           H100_BF16_TENSOR_FLOPS / 1e12, H100_FP32_FLOPS / 1e12, H100_HBM_BYTES_PER_S / 1e12, c.num_layers,
           c.channels, c.num_heads, c.vocab_size, c.padded_vocab_size, B, T);
    RooflineTotals tb = print_precision(&bf16, "bf16 (`train_gpu -p bf16`): tensor-core products, flash attention");
    RooflineTotals tf = print_precision(&fp32, "float32 (`train_gpu -p fp32`): every kernel on the CUDA cores");
    double tokens = (double)B * T;
    printf("| precision | GFLOP a step | GB a step | step floor, ms | of it compute-bound | tokens/s ceiling |\n");
    printf("| --- | ---: | ---: | ---: | ---: | ---: |\n");
    printf("| bf16 | %.0f | %.2f | %.2f | %.0f%% | %.0fK |\n", tb.flops / 1e9, tb.bytes / 1e9, tb.floor_s * 1e3,
           100 * tb.compute_s / tb.floor_s, tokens / tb.floor_s / 1e3);
    printf("| float32 | %.0f | %.2f | %.2f | %.0f%% | %.0fK |\n", tf.flops / 1e9, tf.bytes / 1e9, tf.floor_s * 1e3,
           100 * tf.compute_s / tf.floor_s, tokens / tf.floor_s / 1e3);
    printf("\n");  // a blank line ends the table before the doc's end marker
    return 0;
}

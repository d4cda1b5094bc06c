// infer_gpu.cu: GPT-2 text generation on an NVIDIA GPU, with a paged key-value cache, for one
// prompt or many requests at once: infer.c's twin, as train_gpu.cu is train_cpu.c's.
//
//   ./infer_gpu -e MODEL -p "PROMPT"              prints the continuation token by token
//   ./infer_gpu -e MODEL -f REQUESTS.jsonl -b 64  answers a file of requests, 64 sequences at a time
//
// The same flags, requests and answers as infer.c (gpt2/infer_run.h), and the same engine
// (gpt2/engine.h: batching, continuous batching, the page tables, sampling on the host); -w picks
// the precision of the weights and the pages: bf16 (the default where the GPU has bf16 tensor
// cores, compute capability 8.0 and up) or fp32. (-w, not train_gpu's -p: here -p is the prompt.)
//
// Why the GPU. A decode step of B sequences reads every weight once and does 2 B flops with it:
// at B = 1 the GPU's memory bandwidth (3.35 TB/s on an H100 SXM, against some 30-90 GB/s for
// this project's CPU) sets the speed, and batching multiplies the tokens each byte buys until
// the tensor cores are the limit, at B in the hundreds. doc/infer.md works through the numbers.
//
// What runs, per pass (gpt2/gpu/generate.cuh): the embeddings at each sequence's own position,
// the transformer block of gpt2/model.h with the GPU's layers (the bf16 path's tensor-core
// products with bias, GELU and the residual add fused, or the float32 kernels), attention that
// stores each new key and value in its page and attends over the pages, split over the sequence
// for long contexts as flash-decoding does (a whole prompt in bf16 through flash attention), the
// last layernorm and the logits of each sequence's last token, which go back to the host.

#include "gpt2/gpu/cuda_utils.cuh"
#include "gpt2/gpu/elementwise.cuh"
#include "gpt2/gpu/generate.cuh"
#include "gpt2/infer_run.h"

// ---------- the device ----------

// The model on the GPU for generation: its float32 parameters, and in bf16 their bf16 copy,
// with the generator of one precision over them.
typedef struct {
    float* params;                  // (num_parameters) on the GPU
    bf16* params16;                 // (num_parameters) the bf16 copy; NULL in fp32
    EngineDevice generator;         // GeneratorGPU<bf16> or <float> (gpt2/gpu/generate.cuh)
    int is_bf16;
} InferGPU;

static void gpu_forward(void* ctx, const EnginePass* pass, float* logits) {
    EngineDevice* generator = &((InferGPU*)ctx)->generator;
    generator->forward(generator->ctx, pass, logits);
}

static size_t gpu_value_bytes(const char* precision) {
    return strcmp(precision, "bf16") == 0 ? sizeof(bf16) : sizeof(float);
}

static void gpu_build(const GPT2* model, int slots, int pages, const char* precision, EngineDevice* device) {
    GPT2Config c = model->config;
    InferGPU* g = (InferGPU*)calloc_check(1, sizeof(InferGPU));
    g->is_bf16 = strcmp(precision, "bf16") == 0;
    if (g->is_bf16 && cuda_device.prop.major < 8) {
        fail("-w bf16 needs a GPU of compute capability 8.0 or newer (this one: %s, %d.%d): use -w fp32",
             cuda_device.prop.name, cuda_device.prop.major, cuda_device.prop.minor);
    }
    if (g->is_bf16 && !flash_attention_supports(c.channels / c.num_heads)) {
        fail("-w bf16: flash attention is built for head sizes 16, 32, 64 and 128, and this model's is %d "
             "(C=%d, NH=%d): use -w fp32", c.channels / c.num_heads, c.channels, c.num_heads);
    }
    size_t n = model->num_parameters;
    cuda_check(cudaMalloc((void**)&g->params, n * sizeof(float)));
    cuda_check(cudaMemcpy(g->params, model->params_memory, n * sizeof(float), cudaMemcpyHostToDevice));
    ParameterTensors p;
    point_tensors((float**)&p, g->params, model->param_sizes, NUM_PARAMETER_TENSORS);
    if (g->is_bf16) {
        cuda_check(cudaMalloc((void**)&g->params16, n * sizeof(bf16)));
        float_to_bf16_gpu(g->params16, g->params, n);
        g->generator = generator_gpu_device(c, p, weights_over_copy(p, g->params16, model->param_sizes),
                                            &LAYERS_BF16_INFER, slots, pages);
    } else {
        g->generator = generator_gpu_device(c, p, p, &LAYERS_GPU_INFER, slots, pages);
    }
    device->ctx = g;
    device->forward = gpu_forward;
}

static void gpu_free(EngineDevice* device) {
    InferGPU* g = (InferGPU*)device->ctx;
    if (g->is_bf16) {
        generator_gpu_device_free<bf16>(&g->generator);
        cuda_check(cudaFree(g->params16));
    } else {
        generator_gpu_device_free<float>(&g->generator);
    }
    cuda_check(cudaFree(g->params));
    free(g);
}

// The GPU this process sees (no device: one line, exit 1); bf16 where it has bf16 tensor cores.
static const char* gpu_init(char* name, size_t cap) {
    cuda_device_init();
    snprintf(name, cap, "%s", cuda_device.prop.name);
    return cuda_device.prop.major >= 8 ? "bf16" : "fp32";
}

static const InferDevice INFER_GPU = {gpu_init, gpu_build, gpu_free, gpu_value_bytes};

// ---------- main ----------

int main(int argc, char** argv) {
    cuda_make_target = "infer_gpu";  // named by the errors that say to rebuild
    cuda_cpu_instead = "./infer";     // and by "no CUDA device found"
    return infer_main(argc, argv, &INFER_GPU);
}

// infer_gpu.cu: GPT-2 text generation on an NVIDIA GPU, with a paged key-value cache, for one
// prompt or many requests at once: infer.c's twin, as train_gpu.cu is train_cpu.c's.
//
//   ./infer_gpu -e MODEL -p "PROMPT"              prints the continuation token by token
//   ./infer_gpu -e MODEL -f REQUESTS.jsonl -b 64  answers a file of requests, 64 sequences at a time
//
// The same flags, requests, answers and engine as infer.c (gpt2/infer_run.h, gpt2/engine.h).
// -w picks the precision of the weights and the pages: bf16 (the default from compute
// capability 8.0) or fp32; -w, as here -p is the prompt. The forward pass is
// gpt2/gpu/generate.cuh's generator_gpu_forward; why the GPU helps: doc/infer.md.

#include "gpt2/gpu/cuda_utils.cuh"
#include "gpt2/gpu/elementwise.cuh"
#include "gpt2/gpu/layers.cuh"  // weights_over_copy
#include "gpt2/gpu/generate.cuh"
#include "gpt2/infer_run.h"

// ---------- the device ----------

// The model on the GPU, one per process: its float32 parameters, and in bf16 their bf16 copy.
static struct {
    float* params;                  // (num_parameters) on the GPU
    bf16* params16;                 // (num_parameters) the bf16 copy; NULL in fp32
    int is_bf16;
} weights_gpu;

static size_t gpu_value_bytes(const char* precision) {
    return strcmp(precision, "bf16") == 0 ? sizeof(bf16) : sizeof(float);
}

static void gpu_build(const GPT2* model, int slots, int pages, const char* precision, EngineDevice* device) {
    GPT2Config c = model->config;
    weights_gpu.is_bf16 = strcmp(precision, "bf16") == 0;
    if (weights_gpu.is_bf16 && cuda_device.prop.major < 8) {
        fail("-w bf16 needs a GPU of compute capability 8.0 or newer (this one: %s, %d.%d): use -w fp32",
             cuda_device.prop.name, cuda_device.prop.major, cuda_device.prop.minor);
    }
    if (weights_gpu.is_bf16 && !flash_attention_supports(c.channels / c.num_heads)) {
        fail("-w bf16: flash attention is built for head sizes 16, 32, 64 and 128, and this model's is %d "
             "(C=%d, NH=%d): use -w fp32", c.channels / c.num_heads, c.channels, c.num_heads);
    }
    size_t n = model->num_parameters;
    cuda_check(cudaMalloc((void**)&weights_gpu.params, n * sizeof(float)));
    cuda_check(cudaMemcpy(weights_gpu.params, model->params_memory, n * sizeof(float), cudaMemcpyHostToDevice));
    ParameterTensors p;
    point_tensors((float**)&p, weights_gpu.params, model->param_sizes, NUM_PARAMETER_TENSORS);
    if (weights_gpu.is_bf16) {
        cuda_check(cudaMalloc((void**)&weights_gpu.params16, n * sizeof(bf16)));
        float_to_bf16_gpu(weights_gpu.params16, weights_gpu.params, n);
        *device = generator_gpu_device(c, p, weights_over_copy(p, weights_gpu.params16, model->param_sizes), slots,
                                       pages);
    } else {
        *device = generator_gpu_device(c, p, p, slots, pages);
    }
}

static void gpu_free(EngineDevice* device) {
    if (weights_gpu.is_bf16) {
        generator_gpu_device_free<bf16>(device);
        cuda_check(cudaFree(weights_gpu.params16));
    } else {
        generator_gpu_device_free<float>(device);
    }
    cuda_check(cudaFree(weights_gpu.params));
    memset(&weights_gpu, 0, sizeof(weights_gpu));
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

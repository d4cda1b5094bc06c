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

// ---------- the model on the GPU ----------

// The generator over a host model's weights copied to the GPU (params, and in bf16 params16,
// their bf16 copy, which the caller frees with them).
static EngineDevice gpu_build(const GPT2* model, int use_bf16, int slots, int pages, float** params,
                              bf16** params16) {
    GPT2Config c = model->config;
    if (use_bf16 && cuda_device.prop.major < 8) {
        fail("-w bf16 needs a GPU of compute capability 8.0 or newer (this one: %s, %d.%d): use -w fp32",
             cuda_device.prop.name, cuda_device.prop.major, cuda_device.prop.minor);
    }
    if (use_bf16 && !flash_attention_supports(c.channels / c.num_heads)) {
        fail("-w bf16: flash attention is built for head sizes 16, 32, 64 and 128, and this model's is %d "
             "(C=%d, NH=%d): use -w fp32", c.channels / c.num_heads, c.channels, c.num_heads);
    }
    size_t n = model->num_parameters;
    cuda_check(cudaMalloc((void**)params, n * sizeof(float)));
    cuda_check(cudaMemcpy(*params, model->params_memory, n * sizeof(float), cudaMemcpyHostToDevice));
    ParameterTensors p;
    point_tensors((float**)&p, *params, model->param_sizes, NUM_PARAMETER_TENSORS);
    *params16 = NULL;
    if (!use_bf16) return generator_gpu_device(c, p, p, slots, pages);
    cuda_check(cudaMalloc((void**)params16, n * sizeof(bf16)));
    float_to_bf16_gpu(*params16, *params, n);
    return generator_gpu_device(c, p, weights_over_copy(p, *params16, model->param_sizes), slots, pages);
}

// ---------- main ----------

int main(int argc, char** argv) {
    cuda_make_target = "infer_gpu";  // named by the errors that say to rebuild
    cuda_cpu_instead = "./infer";     // and by "no CUDA device found"
    InferConfig cfg = infer_parse_args(argc, argv);
    if (cfg.export_dir != NULL) return infer_export(&cfg);
    infer_prepare(&cfg);
    cuda_device_init();  // no device: one line, exit 1
    GPT2 model;
    Tokenizer tok;
    infer_load(&cfg, &model, &tok);
    if (cfg.precision == NULL) cfg.precision = cuda_device.prop.major >= 8 ? "bf16" : "fp32";
    int use_bf16 = strcmp(cfg.precision, "bf16") == 0, slots = infer_slots(&cfg);
    size_t value_bytes = use_bf16 ? sizeof(bf16) : sizeof(float);  // of a key or value in the pages
    int pages = infer_pool_pages(&cfg, model.config, slots, value_bytes);
    float* params;
    bf16* params16;
    EngineDevice device = gpu_build(&model, use_bf16, slots, pages, &params, &params16);
    char name[256];
    snprintf(name, sizeof(name), "%s, %s", cuda_device.prop.name, cfg.precision);
    int status = cfg.serve != NULL      ? infer_serve(&cfg, &model, &tok, device, pages, name)
                 : cfg.requests != NULL ? infer_requests(&cfg, &model, &tok, device, pages, value_bytes, name)
                                        : infer_one_prompt(&cfg, &model, &tok, device, pages, name);
    if (use_bf16) generator_gpu_device_free<bf16>(&device);
    else generator_gpu_device_free<float>(&device);
    cuda_check(cudaFree(params16));
    cuda_check(cudaFree(params));
    tokenizer_free(&tok);
    gpt2_free(&model);
    return status;
}

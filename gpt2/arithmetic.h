// gpt2/arithmetic.h: the arithmetic the CPU layers, the GPU kernels and infer.c share. Under nvcc
// every function is __host__ __device__, so a kernel runs the very lines the CPU runs.

#ifndef GPT2_ARITHMETIC_H
#define GPT2_ARITHMETIC_H

#include <math.h>

#ifdef __CUDACC__
#define HOST_DEVICE __host__ __device__
#else
#define HOST_DEVICE
#endif

#define LAYERNORM_EPS 1e-5f
#define GELU_SCALING_FACTOR 0.7978845608028654f  // sqrt(2 / pi)

// AdamW as llm.c trains GPT-2 (beta2 0.95, not PyTorch's 0.999)
#define ADAMW_BETA1 0.9f
#define ADAMW_BETA2 0.95f
#define ADAMW_EPS 1e-8f

// ---------- attention ----------

// q . k has variance hs; 1/sqrt(hs) makes it 1 (Vaswani et al. 2017, 3.2.1)
static inline HOST_DEVICE float attention_scale(int hs) {
    return 1.0f / sqrtf((float)hs);
}

// ---------- GELU ----------
// gelu(x) = 0.5 x (1 + tanh(u)), u = sqrt(2/pi) (x + 0.044715 x^3); tanh(u) is an argument: each
// device has its own.

static inline HOST_DEVICE float gelu_tanh_arg(float x) {
    return GELU_SCALING_FACTOR * (x + 0.044715f * x * x * x);
}

static inline HOST_DEVICE float gelu_of(float x, float tanh_u) {
    return 0.5f * x * (1.0f + tanh_u);
}

// 0.5 (1 + tanh u) + 0.5 x (1 - tanh^2 u) du/dx
static inline HOST_DEVICE float gelu_grad_of(float x, float tanh_u) {
    float du = GELU_SCALING_FACTOR * (1.0f + 3.0f * 0.044715f * x * x);
    return 0.5f * (1.0f + tanh_u) + 0.5f * x * (1.0f - tanh_u * tanh_u) * du;
}

static inline HOST_DEVICE float gelu(float x) { return gelu_of(x, tanhf(gelu_tanh_arg(x))); }
static inline HOST_DEVICE float gelu_grad(float x) { return gelu_grad_of(x, tanhf(gelu_tanh_arg(x))); }

// ---------- the optimizer ----------

// grad_scale, times max_norm / (norm + 1e-6) where below 1 (clip_grad_norm_)
static inline HOST_DEVICE float clip_factor(float norm, float grad_scale, float max_norm) {
    float coef = max_norm / (norm + 1e-6f);
    return coef < 1.0f ? grad_scale * coef : grad_scale;
}

typedef struct {
    float beta1, beta2, eps;
    float step_size;              // lr / (1 - beta1^t)
    float bias_correction2_sqrt;  // sqrt(1 - beta2^t)
} AdamWStep;

// Step t (from 1): moments started at zero are too small by (1 - beta^t).
static inline AdamWStep adamw_step(float lr, float beta1, float beta2, float eps, int t) {
    AdamWStep s;
    s.beta1 = beta1;
    s.beta2 = beta2;
    s.eps = eps;
    s.step_size = lr / (1.0f - powf(beta1, (float)t));
    s.bias_correction2_sqrt = sqrtf(1.0f - powf(beta2, (float)t));
    return s;
}

// AdamW on one parameter, as torch.optim.AdamW; decay = 1 - lr * weight_decay (1 for biases and
// layernorms). Updates the moments in place, returns the new parameter.
static inline HOST_DEVICE float adamw_update(float p, float g, float* m, float* v, AdamWStep s, float decay) {
    float mi = s.beta1 * *m + (1.0f - s.beta1) * g;
    float vi = s.beta2 * *v + (1.0f - s.beta2) * g * g;
    *m = mi;
    *v = vi;
    float denom = sqrtf(vi) / s.bias_correction2_sqrt + s.eps;
    return p * decay - s.step_size * mi / denom;
}

#endif // GPT2_ARITHMETIC_H

// gpt2/arithmetic.h: the arithmetic that the CPU layers, the GPU kernels and infer.c share,
// written once: the layernorm epsilon, the attention's scale, GELU and its derivative, AdamW's
// defaults and its update of one parameter, and the gradient clipping coefficient.
//
// C and CUDA both compile this header. Under nvcc every function is __host__ __device__, so a
// kernel runs the very lines the CPU loops run: a constant or a formula changed here changes on
// both devices at once.

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

// AdamW's betas and epsilon, as llm.c trains GPT-2 (beta2 0.95 rather than PyTorch's 0.999:
// the second moment follows the gradients more closely, steadier for large language models).
#define ADAMW_BETA1 0.9f
#define ADAMW_BETA2 0.95f
#define ADAMW_EPS 1e-8f

// ---------- attention ----------

// The scores of attention are q . k times this scale. With q and k of independent unit-variance
// entries, q . k has variance hs (the head size); 1/sqrt(hs) brings it back to 1 (Vaswani et al.
// 2017, section 3.2.1), so the softmax is as sharp at any head size.
static inline HOST_DEVICE float attention_scale(int hs) {
    return 1.0f / sqrtf((float)hs);
}

// ---------- GELU ----------
// GPT-2's GELU is the tanh approximation: gelu(x) = 0.5 x (1 + tanh(u)) with
// u = sqrt(2/pi) (x + 0.044715 x^3). Each device computes tanh its own way (the CPU layers with
// TANH_FAST, a polynomial that vectorises, gpt2/cpu_math.h; the GPU with its tanhf), so the
// formulas take u's tanh as an argument: gelu_of(x, tanh(gelu_tanh_arg(x))).

static inline HOST_DEVICE float gelu_tanh_arg(float x) {
    return GELU_SCALING_FACTOR * (x + 0.044715f * x * x * x);
}

static inline HOST_DEVICE float gelu_of(float x, float tanh_u) {
    return 0.5f * x * (1.0f + tanh_u);
}

// d gelu / dx = 0.5 (1 + tanh u) + 0.5 x (1 - tanh^2 u) du/dx, du/dx = sqrt(2/pi) (1 + 3 * 0.044715 x^2)
static inline HOST_DEVICE float gelu_grad_of(float x, float tanh_u) {
    float du = GELU_SCALING_FACTOR * (1.0f + 3.0f * 0.044715f * x * x);
    return 0.5f * (1.0f + tanh_u) + 0.5f * x * (1.0f - tanh_u * tanh_u) * du;
}

// Both with tanhf: the GPU kernels' GELU.
static inline HOST_DEVICE float gelu(float x) { return gelu_of(x, tanhf(gelu_tanh_arg(x))); }
static inline HOST_DEVICE float gelu_grad(float x) { return gelu_grad_of(x, tanhf(gelu_tanh_arg(x))); }

// ---------- the optimizer ----------

// The scaling of the gradients by grad_scale (1 / the micro-steps and processes they were summed
// over) and then, as PyTorch's clip_grad_norm_ does, by max_norm / (norm + 1e-6) where that is
// below 1, in one factor; norm is the gradients' L2 norm after the scale.
static inline HOST_DEVICE float clip_factor(float norm, float grad_scale, float max_norm) {
    float coef = max_norm / (norm + 1e-6f);
    return coef < 1.0f ? grad_scale * coef : grad_scale;
}

// What one AdamW step shares across every parameter.
typedef struct {
    float beta1, beta2, eps;
    float step_size;              // lr / (1 - beta1^t)
    float bias_correction2_sqrt;  // sqrt(1 - beta2^t)
} AdamWStep;

// The AdamW step t (counting from 1): the moments start at zero, so early on they are too small
// by (1 - beta^t), which the step size and the second moment's correction undo.
static inline AdamWStep adamw_step(float lr, float beta1, float beta2, float eps, int t) {
    AdamWStep s;
    s.beta1 = beta1;
    s.beta2 = beta2;
    s.eps = eps;
    s.step_size = lr / (1.0f - powf(beta1, (float)t));
    s.bias_correction2_sqrt = sqrtf(1.0f - powf(beta2, (float)t));
    return s;
}

// AdamW on one parameter p with gradient g, as torch.optim.AdamW computes it:
//   m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2;  p = p*decay - step_size * m / (sqrt(v)/bc2 + eps)
// where decay = 1 - lr * weight_decay (or 1: no decay for biases and layernorms). Updates the
// moments m and v in place and returns the new parameter.
static inline HOST_DEVICE float adamw_update(float p, float g, float* m, float* v, AdamWStep s, float decay) {
    float mi = s.beta1 * *m + (1.0f - s.beta1) * g;
    float vi = s.beta2 * *v + (1.0f - s.beta2) * g * g;
    *m = mi;
    *v = vi;
    float denom = sqrtf(vi) / s.bias_correction2_sqrt + s.eps;
    return p * decay - s.step_size * mi / denom;
}

#endif // GPT2_ARITHMETIC_H

// The tuner's kernels beyond ch1-basics's (which supplies add_bias_relu, add_bias,
// relu_backward, softmax_xent and sum_over_batch): the optimizers over the flat parameter
// vector, and the bf16 copies mixed precision needs. bf16 is carried as its 16 bits
// (unsigned short) and rounded to nearest even by hand, so no header is needed.

typedef long long i64;
typedef unsigned short bf16_bits;

__device__ __forceinline__ i64 global_id() {
    return (i64)blockIdx.x * blockDim.x + threadIdx.x;
}

__device__ __forceinline__ bf16_bits to_bf16(float x) {
    unsigned int u = __float_as_uint(x);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (bf16_bits)((u >> 16) | 0x0040u);  // NaN stays NaN
    u += 0x7fffu + ((u >> 16) & 1u);
    return (bf16_bits)(u >> 16);
}

// dst = bf16(src), element-wise: the input batch and the logits' gradient under AMP.
extern "C" __global__ void cast_to_bf16(const float* __restrict__ src, bf16_bits* __restrict__ dst,
                                        i64 count) {
    i64 i = global_id();
    if (i < count) dst[i] = to_bf16(src[i]);
}

// Forward of Linear -> ReLU after the GEMM under AMP: z = max(z + bias[f], 0) in fp32 (kept for
// the ReLU mask) and its bf16 copy, the next GEMM's input.
extern "C" __global__ void add_bias_relu_bf16(float* __restrict__ z, const float* __restrict__ bias,
                                              int features, i64 count,
                                              bf16_bits* __restrict__ z16) {
    i64 i = global_id();
    if (i < count) {
        float v = fmaxf(z[i] + bias[i % features], 0.0f);
        z[i] = v;
        z16[i] = to_bf16(v);
    }
}

// Backward of ReLU under AMP: the gradient passes where the activation was positive (fp32, for
// the bias gradient) and its bf16 copy feeds the two backward GEMMs.
extern "C" __global__ void relu_backward_bf16(float* __restrict__ grad,
                                              const float* __restrict__ activation, i64 count,
                                              bf16_bits* __restrict__ grad16) {
    i64 i = global_id();
    if (i < count) {
        float g = activation[i] > 0.0f ? grad[i] : 0.0f;
        grad[i] = g;
        grad16[i] = to_bf16(g);
    }
}

// SGD with optional momentum (PyTorch's form: v = mu v + g; p -= lr v) and L2 weight decay
// added to the gradient. velocity == 0 means plain SGD. params16 != 0 also writes the bf16
// copy of the updated weights the next AMP forward reads (one pass instead of two).
extern "C" __global__ void sgd_update(float* __restrict__ params, const float* __restrict__ grads,
                                      float* __restrict__ velocity, i64 count, float lr,
                                      float momentum, float weight_decay,
                                      bf16_bits* __restrict__ params16) {
    i64 i = global_id();
    if (i >= count) return;
    float p = params[i];
    float g = grads[i] + weight_decay * p;
    if (velocity) {
        float v = momentum * velocity[i] + g;
        velocity[i] = v;
        g = v;
    }
    p -= lr * g;
    params[i] = p;
    if (params16) params16[i] = to_bf16(p);
}

// AdamW (decoupled weight decay, as torch.optim.AdamW): p -= lr wd p; then the Adam step with
// bias corrections c1 = 1 - beta1^t, c2 = 1 - beta2^t computed on the host.
extern "C" __global__ void adamw_update(float* __restrict__ params, const float* __restrict__ grads,
                                        float* __restrict__ m, float* __restrict__ v, i64 count,
                                        float lr, float beta1, float beta2, float eps,
                                        float weight_decay, float c1, float c2,
                                        bf16_bits* __restrict__ params16) {
    i64 i = global_id();
    if (i >= count) return;
    float g = grads[i];
    float p = params[i] * (1.0f - lr * weight_decay);
    float mi = beta1 * m[i] + (1.0f - beta1) * g;
    float vi = beta2 * v[i] + (1.0f - beta2) * g * g;
    m[i] = mi;
    v[i] = vi;
    p -= lr * (mi / c1) / (sqrtf(vi / c2) + eps);
    params[i] = p;
    if (params16) params16[i] = to_bf16(p);
}

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

// Bias gradient of a large batch in two passes, both in a fixed order (the result does not
// depend on timing). ch1-basics's sum_over_batch gives each block 32 features and the whole
// batch, which leaves one block walking 32M rows when a layer has 16 features; here grid.y
// splits the batch into chunks of `rows` samples, each block writes its chunk's partial sums
// to partial[chunk * features + f], and sum_chunks adds the chunks in order.
#define CHUNK_SUM_ROWS 8
extern "C" __global__ void sum_over_batch_chunks(const float* __restrict__ grad, int features,
                                                 int batch, int rows,
                                                 float* __restrict__ partial) {
    __shared__ float part[CHUNK_SUM_ROWS][32];
    int f = blockIdx.x * 32 + threadIdx.x;
    i64 begin = (i64)blockIdx.y * rows;
    i64 end = min((i64)batch, begin + rows);
    float s = 0.0f;
    if (f < features) {
#pragma unroll 4
        for (i64 b = begin + threadIdx.y; b < end; b += CHUNK_SUM_ROWS) s += grad[b * features + f];
    }
    part[threadIdx.y][threadIdx.x] = s;
    __syncthreads();
    if (threadIdx.y == 0 && f < features) {
        float total = 0.0f;
        for (int r = 0; r < CHUNK_SUM_ROWS; r++) total += part[r][threadIdx.x];
        partial[(i64)blockIdx.y * features + f] = total;
    }
}

extern "C" __global__ void sum_chunks(const float* __restrict__ partial, int features, int chunks,
                                      float* __restrict__ out) {
    i64 f = global_id();
    if (f >= features) return;
    float total = 0.0f;
    for (int c = 0; c < chunks; c++) total += partial[(i64)c * features + f];
    out[f] = total;
}

// The element-wise and reduction kernels of one MLP training step; the GEMMs are cuBLAS's.
//
// Layout: activations are sample-major (sample b's features contiguous), i.e. a column-major
// features x batch matrix for cuBLAS; element (f, b) of a layer with F features is at f + b * F.
// Under mixed precision bf16 is carried as its 16 bits (unsigned short) and rounded to nearest
// even by hand, so no header is needed.

// Forward of Linear(...) -> ReLU, after the GEMM: z = max(z + bias[f], 0), in place.
extern "C" __global__ void add_bias_relu(float* __restrict__ z, const float* __restrict__ bias,
                                         int features, i64 count) {
    i64 i = global_id();
    if (i < count) z[i] = fmaxf(z[i] + bias[i % features], 0.0f);
}

// Forward of the last Linear, after the GEMM: z += bias[f], in place.
extern "C" __global__ void add_bias(float* __restrict__ z, const float* __restrict__ bias,
                                    int features, i64 count) {
    i64 i = global_id();
    if (i < count) z[i] += bias[i % features];
}

// Backward of ReLU: the gradient passes where the activation was positive, in place.
extern "C" __global__ void relu_backward(float* __restrict__ grad,
                                         const float* __restrict__ activation, i64 count) {
    i64 i = global_id();
    if (i < count && !(activation[i] > 0.0f)) grad[i] = 0.0f;
}

// Softmax cross-entropy, forward and backward in one pass, one thread per sample:
//   loss_b = log(sum_c exp(z_c)) - z_label,   dz_c = (softmax(z)_c - [c == label]) * scale.
// The logits are overwritten by their gradient. The loss goes to
// losses[*step * samples_per_step + offset + b]: the step number is read on the device, so a
// CUDA graph replayed once per step writes each step's losses to their own place. Indices past
// `total` (replays beyond the run, when only the step's time is wanted) write nothing.
extern "C" __global__ void softmax_xent(float* __restrict__ logits_to_grad,
                                        const int* __restrict__ labels, int classes, int batch,
                                        float scale, float* __restrict__ losses, i64 total,
                                        const int* __restrict__ step, int samples_per_step,
                                        int offset) {
    int b = (int)global_id();
    if (b >= batch) return;
    float* z = logits_to_grad + (i64)b * classes;
    float m = z[0];
    for (int c = 1; c < classes; c++) m = fmaxf(m, z[c]);
    float sum = 0.0f;
    for (int c = 0; c < classes; c++) sum += expf(z[c] - m);
    int label = labels[b];
    i64 at = (i64)(*step) * samples_per_step + offset + b;
    if (at < total) losses[at] = logf(sum) + m - z[label];
    float inv = 1.0f / sum;
    for (int c = 0; c < classes; c++) {
        float p = expf(z[c] - m) * inv;
        z[c] = (p - (c == label ? 1.0f : 0.0f)) * scale;
    }
}

// Bias gradient: out[f] (+)= sum over the batch of grad[f + b * features]. A block covers 32
// features (threadIdx.x, coalesced) and splits the batch over 8 rows of threads (threadIdx.y);
// the 8 partial sums are added in a fixed order, so the result does not depend on timing.
#define SUM_ROWS 8
extern "C" __global__ void sum_over_batch(const float* __restrict__ grad, int features,
                                          int batch, float* __restrict__ out, int accumulate) {
    __shared__ float partial[SUM_ROWS][32];
    int f = blockIdx.x * 32 + threadIdx.x;
    float s = 0.0f;
    if (f < features) {
#pragma unroll 4
        for (int b = threadIdx.y; b < batch; b += SUM_ROWS) s += grad[(i64)b * features + f];
    }
    partial[threadIdx.y][threadIdx.x] = s;
    __syncthreads();
    if (threadIdx.y == 0 && f < features) {
        float total = 0.0f;
        for (int r = 0; r < SUM_ROWS; r++) total += partial[r][threadIdx.x];
        out[f] = accumulate ? out[f] + total : total;
    }
}

// Bias gradient of a large batch in two passes, both in a fixed order (the result does not
// depend on timing). sum_over_batch gives each block 32 features and the whole batch, which
// leaves one block walking 32M rows when a layer has 16 features; here grid.y splits the batch
// into chunks of `rows` samples, each block writes its chunk's partial sums to
// partial[chunk * features + f], and sum_chunks adds the chunks in order.
extern "C" __global__ void sum_over_batch_chunks(const float* __restrict__ grad, int features,
                                                 int batch, int rows,
                                                 float* __restrict__ partial) {
    __shared__ float part[SUM_ROWS][32];
    int f = blockIdx.x * 32 + threadIdx.x;
    i64 begin = (i64)blockIdx.y * rows;
    i64 end = min((i64)batch, begin + rows);
    float s = 0.0f;
    if (f < features) {
#pragma unroll 4
        for (i64 b = begin + threadIdx.y; b < end; b += SUM_ROWS) s += grad[b * features + f];
    }
    part[threadIdx.y][threadIdx.x] = s;
    __syncthreads();
    if (threadIdx.y == 0 && f < features) {
        float total = 0.0f;
        for (int r = 0; r < SUM_ROWS; r++) total += part[r][threadIdx.x];
        partial[(i64)blockIdx.y * features + f] = total;
    }
}

extern "C" __global__ void sum_chunks(const float* __restrict__ partial, int features, int chunks,
                                      float* __restrict__ out, int accumulate) {
    i64 f = global_id();
    if (f >= features) return;
    float total = 0.0f;
    for (int c = 0; c < chunks; c++) total += partial[(i64)c * features + f];
    out[f] = accumulate ? out[f] + total : total;
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

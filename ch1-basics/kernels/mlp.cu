// The element-wise and reduction kernels of one MLP training step. The GEMMs are cuBLAS's.
//
// Layout: activations are sample-major (sample b's features contiguous), i.e. a column-major
// features x batch matrix for cuBLAS; element (f, b) of a layer with F features is at f + b * F.

typedef long long i64;

__device__ __forceinline__ i64 global_id() {
    return (i64)blockIdx.x * blockDim.x + threadIdx.x;
}

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

// Plain SGD over the flat parameter vector: p -= lr * g. Thread 0 also advances the step
// counter that softmax_xent reads (stream order puts it after this step's losses).
extern "C" __global__ void sgd_step(float* __restrict__ params, const float* __restrict__ grads,
                                    i64 count, float lr, int* __restrict__ step) {
    i64 i = global_id();
    if (i < count) params[i] -= lr * grads[i];
    if (i == 0) *step += 1;
}

// The optimizers over the flat parameter vector `[W0 | b0 | W1 | b1 | ...]`: one thread per
// parameter. Under mixed precision (params16 != 0) the update also writes the bf16 copy of the
// weights the next forward reads, in the same pass. A non-null `step` is the run's step counter
// (the loss kernel reads it to place each step's losses): thread 0 advances it, and stream order
// puts that after this step's losses were written.

// SGD with optional momentum (PyTorch's form: v = mu v + g; p -= lr v) and L2 weight decay
// added to the gradient. velocity == 0 means plain SGD: p -= lr * g.
extern "C" __global__ void sgd_update(float* __restrict__ params, const float* __restrict__ grads,
                                      float* __restrict__ velocity, i64 count, float lr,
                                      float momentum, float weight_decay,
                                      bf16_bits* __restrict__ params16, int* __restrict__ step) {
    i64 i = global_id();
    if (step && i == 0) *step += 1;
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
                                        bf16_bits* __restrict__ params16, int* __restrict__ step) {
    i64 i = global_id();
    if (step && i == 0) *step += 1;
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

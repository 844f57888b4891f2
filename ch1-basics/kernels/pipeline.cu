// The compute stage of the double-buffering lesson: an element-wise map with enough arithmetic
// that computing a chunk takes about as long as copying it over PCIe.
//
// x <- a * x + b, `iterations` times (one dependent FMA chain per element). In closed form
// x_N = a^N x_0 + b (1 - a^N) / (1 - a), which the float64 reference uses.

typedef long long i64;

extern "C" __global__ void affine_iterate(float* __restrict__ data, i64 count, float a, float b,
                                          int iterations) {
    i64 stride = (i64)gridDim.x * blockDim.x;
    for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < count; i += stride) {
        float x = data[i];
        for (int k = 0; k < iterations; k++) x = fmaf(a, x, b);
        data[i] = x;
    }
}

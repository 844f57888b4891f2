// What the preallocation sweep does with each buffer, the same on both sides: write it from a
// source (dst = a * src + b), then read it into an accumulator (out += dst). Whether the buffer
// was just allocated with cuMemAlloc or is reused is the only difference.

typedef long long i64;

extern "C" __global__ void write_affine(float* __restrict__ dst, const float* __restrict__ src,
                                        i64 count, float a, float b) {
    i64 stride = (i64)gridDim.x * blockDim.x;
    for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < count; i += stride) {
        dst[i] = fmaf(a, src[i], b);
    }
}

extern "C" __global__ void accumulate(float* __restrict__ out, const float* __restrict__ src,
                                      i64 count) {
    i64 stride = (i64)gridDim.x * blockDim.x;
    for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < count; i += stride) {
        out[i] += src[i];
    }
}

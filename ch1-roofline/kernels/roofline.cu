// Operations placed on the roofline. All take n divisible by 4 (the sizes the lesson uses)
// and move 16 bytes per access; grid-stride loops.

typedef unsigned long long u64;

#define GRID_STRIDE(i, n4)                                                                   \
    for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < (n4);                     \
         i += (u64)gridDim.x * blockDim.x)

// c = a + b: 1 FLOP, 12 bytes per element.
extern "C" __global__ void vector_add4(const float4* __restrict__ a, const float4* __restrict__ b,
                                       float4* __restrict__ c, u64 n4) {
    GRID_STRIDE(i, n4) {
        float4 x = a[i], y = b[i];
        c[i] = make_float4(x.x + y.x, x.y + y.y, x.z + y.z, x.w + y.w);
    }
}

// c = a * b: 1 FLOP, 12 bytes per element.
extern "C" __global__ void vector_mul4(const float4* __restrict__ a, const float4* __restrict__ b,
                                       float4* __restrict__ c, u64 n4) {
    GRID_STRIDE(i, n4) {
        float4 x = a[i], y = b[i];
        c[i] = make_float4(x.x * y.x, x.y * y.y, x.z * y.z, x.w * y.w);
    }
}

// y = alpha * x + y: 2 FLOPs (one FMA), 12 bytes per element.
extern "C" __global__ void saxpy4(float alpha, const float4* __restrict__ x, float4* __restrict__ y,
                                  u64 n4) {
    GRID_STRIDE(i, n4) {
        float4 a = x[i], b = y[i];
        y[i] = make_float4(fmaf(alpha, a.x, b.x), fmaf(alpha, a.y, b.y), fmaf(alpha, a.z, b.z),
                           fmaf(alpha, a.w, b.w));
    }
}

// A fused elementwise expression of tunable intensity: out = P_D(x), the degree-D polynomial
// with coefficients c_j = (-1)^j / (j + 1), by Horner's rule: D FMAs = 2D FLOPs for 8 bytes.
// Fully unrolled so every coefficient is an immediate operand of its FMA.
__device__ __forceinline__ float poly_coef(int j) { return ((j & 1) ? -1.0f : 1.0f) / (float)(j + 1); }

template <int D>
__device__ __forceinline__ float horner(float x) {
    float w = poly_coef(D);
#pragma unroll
    for (int j = D - 1; j >= 0; j--) w = fmaf(w, x, poly_coef(j));
    return w;
}

#define POLY_KERNEL(D)                                                                      \
    extern "C" __global__ void poly_##D(const float4* __restrict__ x, float4* __restrict__ out, \
                                        u64 n4) {                                            \
        GRID_STRIDE(i, n4) {                                                                 \
            float4 v = x[i];                                                                 \
            out[i] = make_float4(horner<D>(v.x), horner<D>(v.y), horner<D>(v.z),             \
                                 horner<D>(v.w));                                            \
        }                                                                                    \
    }

POLY_KERNEL(1)
POLY_KERNEL(4)
POLY_KERNEL(16)
POLY_KERNEL(64)
POLY_KERNEL(256)
POLY_KERNEL(1024)

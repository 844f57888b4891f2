// One elementwise function, written five ways:
//
//     out[i] = ALPHA * (x[i] * w(t_i) + y[i]) + BETA,   t_i = (i + 0.5) / n
//
// where w is a fixed smooth window, the degree-8 polynomial W0 + W1 t + ... + W8 t^8.
// The baseline reads w from a precomputed table; later variants recompute it.

#define ALPHA 1.5f
#define BETA (-0.25f)
#define W0 1.0f
#define W1 (-0.5f)
#define W2 0.25f
#define W3 (-0.125f)
#define W4 0.0625f
#define W5 (-0.03125f)
#define W6 0.015625f
#define W7 (-0.0078125f)
#define W8 0.00390625f

typedef unsigned long long u64;

// 9 FMAs: t from i (1), then Horner (8). Counted as 18 FLOPs.
__device__ __forceinline__ float window_at(u64 i, float inv_n) {
    float t = fmaf((float)i, inv_n, 0.5f * inv_n);
    float w = W8;
    w = fmaf(w, t, W7);
    w = fmaf(w, t, W6);
    w = fmaf(w, t, W5);
    w = fmaf(w, t, W4);
    w = fmaf(w, t, W3);
    w = fmaf(w, t, W2);
    w = fmaf(w, t, W1);
    w = fmaf(w, t, W0);
    return w;
}

__device__ __forceinline__ u64 global_id() {
    return (u64)blockIdx.x * blockDim.x + threadIdx.x;
}

// ---- 1. baseline: one op per kernel, one element per thread ------------------------------

extern "C" __global__ void scale_by_window(const float* __restrict__ x,
                                           const float* __restrict__ w,
                                           float* __restrict__ t, u64 n) {
    u64 i = global_id();
    if (i < n) t[i] = x[i] * w[i];
}

extern "C" __global__ void add_residual(const float* __restrict__ t,
                                        const float* __restrict__ y,
                                        float* __restrict__ s, u64 n) {
    u64 i = global_id();
    if (i < n) s[i] = t[i] + y[i];
}

extern "C" __global__ void affine(const float* __restrict__ s, float* __restrict__ out, u64 n) {
    u64 i = global_id();
    if (i < n) out[i] = fmaf(ALPHA, s[i], BETA);
}

// ---- 2. unrolled: four elements per thread, all loads issued before any use --------------

#define UNROLL 4

extern "C" __global__ void scale_by_window_unrolled(const float* __restrict__ x,
                                                    const float* __restrict__ w,
                                                    float* __restrict__ t, u64 n) {
    u64 base = (u64)blockIdx.x * blockDim.x * UNROLL + threadIdx.x;
    float xv[UNROLL], wv[UNROLL];
#pragma unroll
    for (int k = 0; k < UNROLL; k++) {
        u64 i = base + (u64)k * blockDim.x;
        xv[k] = i < n ? x[i] : 0.0f;
        wv[k] = i < n ? w[i] : 0.0f;
    }
#pragma unroll
    for (int k = 0; k < UNROLL; k++) {
        u64 i = base + (u64)k * blockDim.x;
        if (i < n) t[i] = xv[k] * wv[k];
    }
}

extern "C" __global__ void add_residual_unrolled(const float* __restrict__ t,
                                                 const float* __restrict__ y,
                                                 float* __restrict__ s, u64 n) {
    u64 base = (u64)blockIdx.x * blockDim.x * UNROLL + threadIdx.x;
    float tv[UNROLL], yv[UNROLL];
#pragma unroll
    for (int k = 0; k < UNROLL; k++) {
        u64 i = base + (u64)k * blockDim.x;
        tv[k] = i < n ? t[i] : 0.0f;
        yv[k] = i < n ? y[i] : 0.0f;
    }
#pragma unroll
    for (int k = 0; k < UNROLL; k++) {
        u64 i = base + (u64)k * blockDim.x;
        if (i < n) s[i] = tv[k] + yv[k];
    }
}

extern "C" __global__ void affine_unrolled(const float* __restrict__ s, float* __restrict__ out,
                                           u64 n) {
    u64 base = (u64)blockIdx.x * blockDim.x * UNROLL + threadIdx.x;
    float sv[UNROLL];
#pragma unroll
    for (int k = 0; k < UNROLL; k++) {
        u64 i = base + (u64)k * blockDim.x;
        sv[k] = i < n ? s[i] : 0.0f;
    }
#pragma unroll
    for (int k = 0; k < UNROLL; k++) {
        u64 i = base + (u64)k * blockDim.x;
        if (i < n) out[i] = fmaf(ALPHA, sv[k], BETA);
    }
}

// ---- 3. vectorized: 16-byte loads and stores; the last n % 4 elements done one by one -------
//
// Thread j < n/4 handles elements 4j..4j+3; threads j < n % 4 also handle tail element
// 4*(n/4) + j. Buffers come from cudaMalloc, so they are 16-byte aligned.

extern "C" __global__ void scale_by_window_vec4(const float* __restrict__ x,
                                                const float* __restrict__ w,
                                                float* __restrict__ t, u64 n) {
    u64 j = global_id(), n4 = n / 4;
    if (j < n4) {
        float4 a = reinterpret_cast<const float4*>(x)[j];
        float4 b = reinterpret_cast<const float4*>(w)[j];
        reinterpret_cast<float4*>(t)[j] = make_float4(a.x * b.x, a.y * b.y, a.z * b.z, a.w * b.w);
    }
    if (j < n - 4 * n4) {
        u64 i = 4 * n4 + j;
        t[i] = x[i] * w[i];
    }
}

extern "C" __global__ void add_residual_vec4(const float* __restrict__ t,
                                             const float* __restrict__ y,
                                             float* __restrict__ s, u64 n) {
    u64 j = global_id(), n4 = n / 4;
    if (j < n4) {
        float4 a = reinterpret_cast<const float4*>(t)[j];
        float4 b = reinterpret_cast<const float4*>(y)[j];
        reinterpret_cast<float4*>(s)[j] = make_float4(a.x + b.x, a.y + b.y, a.z + b.z, a.w + b.w);
    }
    if (j < n - 4 * n4) {
        u64 i = 4 * n4 + j;
        s[i] = t[i] + y[i];
    }
}

extern "C" __global__ void affine_vec4(const float* __restrict__ s, float* __restrict__ out,
                                       u64 n) {
    u64 j = global_id(), n4 = n / 4;
    if (j < n4) {
        float4 a = reinterpret_cast<const float4*>(s)[j];
        reinterpret_cast<float4*>(out)[j] =
            make_float4(fmaf(ALPHA, a.x, BETA), fmaf(ALPHA, a.y, BETA), fmaf(ALPHA, a.z, BETA),
                        fmaf(ALPHA, a.w, BETA));
    }
    if (j < n - 4 * n4) {
        u64 i = 4 * n4 + j;
        out[i] = fmaf(ALPHA, s[i], BETA);
    }
}

// ---- 4. more FLOPs per byte: recompute the window instead of reading its table ------------

extern "C" __global__ void scale_by_computed_window_vec4(const float* __restrict__ x,
                                                         float* __restrict__ t, u64 n,
                                                         float inv_n) {
    u64 j = global_id(), n4 = n / 4;
    if (j < n4) {
        float4 a = reinterpret_cast<const float4*>(x)[j];
        u64 i = 4 * j;
        reinterpret_cast<float4*>(t)[j] =
            make_float4(a.x * window_at(i, inv_n), a.y * window_at(i + 1, inv_n),
                        a.z * window_at(i + 2, inv_n), a.w * window_at(i + 3, inv_n));
    }
    if (j < n - 4 * n4) {
        u64 i = 4 * n4 + j;
        t[i] = x[i] * window_at(i, inv_n);
    }
}

// ---- 5. fused: every step in one kernel; x and y read once, out written once -------------
//
// Two float4 per thread (a block covers 2 * blockDim.x vectors), loads issued first, so each
// thread keeps 64 bytes of loads in flight.

__device__ __forceinline__ float fused_one(float x, float y, u64 i, float inv_n) {
    return fmaf(ALPHA, fmaf(x, window_at(i, inv_n), y), BETA);
}

extern "C" __global__ void fused_vec4(const float* __restrict__ x, const float* __restrict__ y,
                                      float* __restrict__ out, u64 n, float inv_n) {
    u64 n4 = n / 4;
    u64 j0 = (u64)blockIdx.x * blockDim.x * 2 + threadIdx.x;
    u64 j1 = j0 + blockDim.x;
    float4 a0, b0, a1, b1;
    if (j0 < n4) {
        a0 = reinterpret_cast<const float4*>(x)[j0];
        b0 = reinterpret_cast<const float4*>(y)[j0];
    }
    if (j1 < n4) {
        a1 = reinterpret_cast<const float4*>(x)[j1];
        b1 = reinterpret_cast<const float4*>(y)[j1];
    }
    if (j0 < n4) {
        u64 i = 4 * j0;
        reinterpret_cast<float4*>(out)[j0] =
            make_float4(fused_one(a0.x, b0.x, i, inv_n), fused_one(a0.y, b0.y, i + 1, inv_n),
                        fused_one(a0.z, b0.z, i + 2, inv_n), fused_one(a0.w, b0.w, i + 3, inv_n));
    }
    if (j1 < n4) {
        u64 i = 4 * j1;
        reinterpret_cast<float4*>(out)[j1] =
            make_float4(fused_one(a1.x, b1.x, i, inv_n), fused_one(a1.y, b1.y, i + 1, inv_n),
                        fused_one(a1.z, b1.z, i + 2, inv_n), fused_one(a1.w, b1.w, i + 3, inv_n));
    }
    u64 tid = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    if (tid < n - 4 * n4) {
        u64 i = 4 * n4 + tid;
        out[i] = fused_one(x[i], y[i], i, inv_n);
    }
}

// ---- a plain vector add, for checking the harness against independent timers -------------

extern "C" __global__ void vector_add(const float* __restrict__ a, const float* __restrict__ b,
                                      float* __restrict__ c, u64 n) {
    u64 i = global_id();
    if (i < n) c[i] = a[i] + b[i];
}

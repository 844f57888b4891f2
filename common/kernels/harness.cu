// Kernels the harness itself uses: the blocking kernel that holds the stream while a sample's
// launches are queued, and the copy / read / write kernels that measure memory ceilings.

// Spin until the host writes 1 to *release (mapped pinned memory), or until timeout_ns of GPU
// time have passed, so that the work queued behind it starts back-to-back with no launch gaps
// inside the timed region (the technique of nvbench's blocking kernel).
extern "C" __global__ void hold_stream(volatile int* release, int* timed_out,
                                       unsigned long long timeout_ns) {
    unsigned long long start, now;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
    while (*release == 0) {
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
        if (now - start > timeout_ns) {
            *timed_out = 1;
            return;
        }
    }
}

// Device-to-device copy, 16 bytes per load and store, grid-stride.
extern "C" __global__ void copy_f32x4(const float4* __restrict__ src, float4* __restrict__ dst,
                                      unsigned long long n4) {
    unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; i < n4;
         i += stride) {
        dst[i] = src[i];
    }
}

// Device-to-device copy, two 16-byte vectors per thread in one pass (no grid-stride loop): both
// loads are issued before either store, keeping 32 bytes per thread in flight.
extern "C" __global__ void copy_f32x4_x2(const float4* __restrict__ src, float4* __restrict__ dst,
                                         unsigned long long n4) {
    unsigned long long j0 = (unsigned long long)blockIdx.x * blockDim.x * 2 + threadIdx.x;
    unsigned long long j1 = j0 + blockDim.x;
    float4 a, b;
    if (j0 < n4) a = src[j0];
    if (j1 < n4) b = src[j1];
    if (j0 < n4) dst[j0] = a;
    if (j1 < n4) dst[j1] = b;
}

// Evict L2 by reading a buffer twice its size. Reading (rather than memset) leaves L2 full of
// clean lines, so the timed kernel pays no write-back of the flush's own data. The store never
// happens (the buffer holds zeros) but the compiler cannot know, so every load stays.
extern "C" __global__ void flush_l2_by_reading(const float4* __restrict__ buf, unsigned long long n4,
                                               float* sink) {
    unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    float acc = 0.0f;
    for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; i < n4;
         i += stride) {
        float4 v = buf[i];
        acc += v.x + v.y + v.z + v.w;
    }
    if (acc == 1234.5f) *sink = acc;
}

// Read-only bandwidth: two 16-byte loads per thread per iteration, grid-stride; the sum is
// stored only if it equals an impossible value, so every load stays.
extern "C" __global__ void read_f32x4(const float4* __restrict__ src, unsigned long long n4,
                                      float* sink) {
    unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x * 2;
    float acc = 0.0f;
    for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x * 2 + threadIdx.x;
         i < n4; i += stride) {
        float4 a = src[i];
        float4 b = i + blockDim.x < n4 ? src[i + blockDim.x] : make_float4(0, 0, 0, 0);
        acc += (a.x + a.y) + (a.z + a.w) + (b.x + b.y) + (b.z + b.w);
    }
    if (acc == 1234.5f) *sink = acc;
}

// Write-only bandwidth: 16-byte stores, grid-stride.
extern "C" __global__ void write_f32x4(float4* __restrict__ dst, unsigned long long n4, float v) {
    unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; i < n4;
         i += stride) {
        dst[i] = make_float4(v, v, v, v);
    }
}

// FP32 FMA throughput: 8 independent chains x = x * a + b per thread, all in registers.
// FLOPs: threads * 8 * iters * 2. out[t] = sum of the chains, checked against the same
// recurrence on the CPU (fmaf and f32::mul_add are both correctly rounded, so it is exact).
#define FMA_CHAINS 8
extern "C" __global__ void fma_chains(float* __restrict__ out, int iters, float a, float b) {
    unsigned long long t = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
    float x[FMA_CHAINS];
#pragma unroll
    for (int k = 0; k < FMA_CHAINS; k++) x[k] = (float)(t % 1024) * 0.001f + (float)k * 0.125f;
#pragma unroll 16
    for (int i = 0; i < iters; i++) {
#pragma unroll
        for (int k = 0; k < FMA_CHAINS; k++) x[k] = fmaf(x[k], a, b);
    }
    float s = 0.0f;
#pragma unroll
    for (int k = 0; k < FMA_CHAINS; k++) s += x[k];
    out[t] = s;
}

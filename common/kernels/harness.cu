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

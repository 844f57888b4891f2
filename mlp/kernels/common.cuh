// What both kernel files of the step use (each is compiled with this file in front of it):
// 64-bit element indices, the thread's global index, and bf16 carried as its 16 bits, rounded
// to nearest even by hand so that no CUDA header is needed.

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

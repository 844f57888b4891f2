// out = in^T for an n x n row-major fp32 matrix, three ways.

typedef long long i64;

// Naive: thread (x, y) reads in[y][x] and writes out[x][y]. Neighbouring threads read
// neighbouring words (coalesced) but write words n * 4 bytes apart: each warp's store touches 32
// different 32-byte sectors for 128 useful bytes.
extern "C" __global__ void transpose_naive(const float* __restrict__ in, float* __restrict__ out,
                                           int n) {
    int x = blockIdx.x * blockDim.x + threadIdx.x;
    int y = blockIdx.y * blockDim.y + threadIdx.y;
    if (x < n && y < n) out[(i64)x * n + y] = in[(i64)y * n + x];
}

// Tiled: a block stages a TILE x TILE tile in shared memory. It reads rows of the tile from `in`
// (coalesced), then writes rows of the transposed tile to `out` (coalesced), reading the shared
// tile by columns. With PAD = 1 a column of the tile spans all 32 banks; with PAD = 0 a column
// sits in one bank and a warp's 32 reads serialize (32-way bank conflict).
// Block: 32 x 8 threads; each thread moves TILE * TILE / 256 elements.
template <int TILE, int PAD>
__device__ __forceinline__ void transpose_through_tile(const float* __restrict__ in,
                                                       float* __restrict__ out, int n) {
    __shared__ float tile[TILE][TILE + PAD];
    int x0 = blockIdx.x * TILE, y0 = blockIdx.y * TILE;
#pragma unroll
    for (int cx = 0; cx < TILE; cx += 32) {
#pragma unroll
        for (int r = threadIdx.y; r < TILE; r += 8) {
            int x = x0 + cx + threadIdx.x, y = y0 + r;
            if (x < n && y < n) tile[r][cx + threadIdx.x] = in[(i64)y * n + x];
        }
    }
    __syncthreads();
#pragma unroll
    for (int cy = 0; cy < TILE; cy += 32) {
#pragma unroll
        for (int r = threadIdx.y; r < TILE; r += 8) {
            int x = y0 + cy + threadIdx.x, y = x0 + r;
            if (x < n && y < n) out[(i64)y * n + x] = tile[cy + threadIdx.x][r];
        }
    }
}

extern "C" __global__ void transpose_tiled32_unpadded(const float* __restrict__ in,
                                                      float* __restrict__ out, int n) {
    transpose_through_tile<32, 0>(in, out, n);
}

extern "C" __global__ void transpose_tiled32(const float* __restrict__ in,
                                             float* __restrict__ out, int n) {
    transpose_through_tile<32, 1>(in, out, n);
}

// 64 x 64 tiles: each thread keeps 16 loads in flight instead of 4 (more bytes in flight per
// SM, which a 4.8 TB/s memory needs to stay busy).
extern "C" __global__ void transpose_tiled64(const float* __restrict__ in,
                                             float* __restrict__ out, int n) {
    transpose_through_tile<64, 1>(in, out, n);
}

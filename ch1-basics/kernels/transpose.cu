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

// Tiled: a block stages a ROWS x COLS tile of `in` in shared memory. It reads rows of the tile
// (coalesced), then writes rows of the transposed tile to `out` (coalesced), reading the shared
// tile by columns. With PAD = 1 a column of the tile spans all 32 banks; with PAD = 0 a column
// of a 32-wide tile sits in one bank and a warp's 32 reads serialize (32-way bank conflict).
// Block: 32 x BLOCK_ROWS threads.
template <int ROWS, int COLS, int PAD, int BLOCK_ROWS>
__device__ __forceinline__ void transpose_through_tile(const float* __restrict__ in,
                                                       float* __restrict__ out, int n) {
    __shared__ float tile[ROWS][COLS + PAD];
    int x0 = blockIdx.x * COLS, y0 = blockIdx.y * ROWS;
#pragma unroll
    for (int cx = 0; cx < COLS; cx += 32) {
#pragma unroll
        for (int r = threadIdx.y; r < ROWS; r += BLOCK_ROWS) {
            int x = x0 + cx + threadIdx.x, y = y0 + r;
            if (x < n && y < n) tile[r][cx + threadIdx.x] = in[(i64)y * n + x];
        }
    }
    __syncthreads();
    // Output rows x0 .. x0 + COLS, columns y0 .. y0 + ROWS.
#pragma unroll
    for (int cy = 0; cy < ROWS; cy += 32) {
#pragma unroll
        for (int r = threadIdx.y; r < COLS; r += BLOCK_ROWS) {
            int x = y0 + cy + threadIdx.x, y = x0 + r;
            if (x < n && y < n) out[(i64)y * n + x] = tile[cy + threadIdx.x][r];
        }
    }
}

extern "C" __global__ void transpose_tiled32_unpadded(const float* __restrict__ in,
                                                      float* __restrict__ out, int n) {
    transpose_through_tile<32, 32, 0, 8>(in, out, n);
}

// The textbook kernel: 32 x 32 tile, 32 x 8 threads, 4 elements each.
extern "C" __global__ void transpose_tiled32(const float* __restrict__ in,
                                             float* __restrict__ out, int n) {
    transpose_through_tile<32, 32, 1, 8>(in, out, n);
}

// 32 x 32 tile, 32 x 16 threads: 2 elements each, twice the warps per tile.
extern "C" __global__ void transpose_tiled32_rows16(const float* __restrict__ in,
                                                    float* __restrict__ out, int n) {
    transpose_through_tile<32, 32, 1, 16>(in, out, n);
}

// 32 x 64 tile, 32 x 8 threads: 8 loads in flight per thread, 256-byte rows.
extern "C" __global__ void transpose_tiled32x64(const float* __restrict__ in,
                                                float* __restrict__ out, int n) {
    transpose_through_tile<32, 64, 1, 8>(in, out, n);
}

// 64 x 64 tile, 32 x 8 threads: 16 loads in flight per thread.
extern "C" __global__ void transpose_tiled64(const float* __restrict__ in,
                                             float* __restrict__ out, int n) {
    transpose_through_tile<64, 64, 1, 8>(in, out, n);
}

// 32 x 32 tile, 8 x 32 threads, 16-byte accesses: each thread loads one float4 of a tile row and
// stores one float4 of a transposed row (4 scalar shared-memory reads, conflict-free with the
// padding). Fewer, wider memory instructions, as the copy kernels use. Scalar fallback where a
// row is not 16-byte aligned (n % 4 != 0) and at the matrix edge.
extern "C" __global__ void transpose_tiled32_vec4(const float* __restrict__ in,
                                                  float* __restrict__ out, int n) {
    __shared__ float tile[32][33];
    int tx = threadIdx.x, ty = threadIdx.y;  // tx in 0..8, ty in 0..32
    int x0 = blockIdx.x * 32, y0 = blockIdx.y * 32;
    bool aligned = (n % 4) == 0;
    int x = x0 + 4 * tx, y = y0 + ty;
    if (y < n) {
        const float* row = in + (i64)y * n;
        if (aligned && x + 3 < n) {
            float4 v = *reinterpret_cast<const float4*>(row + x);
            tile[ty][4 * tx] = v.x;
            tile[ty][4 * tx + 1] = v.y;
            tile[ty][4 * tx + 2] = v.z;
            tile[ty][4 * tx + 3] = v.w;
        } else {
            for (int j = 0; j < 4; j++)
                if (x + j < n) tile[ty][4 * tx + j] = row[x + j];
        }
    }
    __syncthreads();
    int orow = x0 + ty, ocol = y0 + 4 * tx;
    if (orow < n) {
        float* row = out + (i64)orow * n;
        if (aligned && ocol + 3 < n) {
            *reinterpret_cast<float4*>(row + ocol) =
                make_float4(tile[4 * tx][ty], tile[4 * tx + 1][ty], tile[4 * tx + 2][ty],
                            tile[4 * tx + 3][ty]);
        } else {
            for (int j = 0; j < 4; j++)
                if (ocol + j < n) row[ocol + j] = tile[4 * tx + j][ty];
        }
    }
}

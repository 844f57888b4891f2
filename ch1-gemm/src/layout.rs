//! Row-major products through a column-major library.
//!
//! cuBLAS reads matrices column-major. A row-major `m x n` matrix is, byte for byte, the
//! column-major `n x m` matrix of its transpose. So the row-major `C = A · B` is the column-major
//! `Cᵀ = Bᵀ · Aᵀ`: pass B as cuBLAS's first operand and A as its second, swap `m` and `n`, and
//! transpose nothing. Leading dimensions are the row lengths: `n` for B and C, `k` for A.

use cudarc::cublas::sys::cublasOperation_t::CUBLAS_OP_N;
use cudarc::cublas::{GemmConfig, StridedBatchedConfig};

use crate::problem::Shape;

/// The column-major call computing one row-major product `C = 1 · A · B + 0 · C` of a validated
/// shape (every dimension at most `i32::MAX`): its first operand (`a` to cuBLAS, leading
/// dimension `lda`) is B, its second A (see the module comment).
pub fn gemm_config(shape: &Shape) -> GemmConfig<f32> {
    let int = |v: usize| i32::try_from(v).expect("shape validated: dimensions fit in int");
    GemmConfig {
        transa: CUBLAS_OP_N,
        transb: CUBLAS_OP_N,
        m: int(shape.n),
        n: int(shape.m),
        k: int(shape.k),
        alpha: 1.0,
        lda: int(shape.n),
        ldb: int(shape.k),
        beta: 0.0,
        ldc: int(shape.n),
    }
}

/// The first `count` products as one strided-batched call: from one product's B, A and C to the
/// next is one matrix of each.
pub fn strided_config(shape: &Shape, count: usize) -> StridedBatchedConfig<f32> {
    StridedBatchedConfig {
        gemm: gemm_config(shape),
        batch_size: i32::try_from(count).expect("shape validated: count fits in int"),
        stride_a: shape.b_len() as i64,
        stride_b: shape.a_len() as i64,
        stride_c: shape.c_len() as i64,
    }
}

/// Element offsets of product `i`'s A, B and C in the three back-to-back buffers.
pub fn offsets(shape: &Shape, i: usize) -> (usize, usize, usize) {
    (i * shape.a_len(), i * shape.b_len(), i * shape.c_len())
}

/// The device addresses of `count` f32 matrices of `stride` elements each, the first at `base`:
/// the table the pointer-array batched call reads.
pub fn pointer_table(base: u64, stride: usize, count: usize) -> Vec<u64> {
    (0..count as u64)
        .map(|i| base + i * stride as u64 * std::mem::size_of::<f32>() as u64)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::problem::{inputs, reference};

    /// What cuBLAS computes for `C = first · second` with `cfg` (column-major, untransposed),
    /// on the host.
    fn column_major_gemm(cfg: &GemmConfig<f32>, first: &[f32], second: &[f32], c: &mut [f32]) {
        let [m, n, k, lda, ldb, ldc] =
            [cfg.m, cfg.n, cfg.k, cfg.lda, cfg.ldb, cfg.ldc].map(|v| v as usize);
        for j in 0..n {
            for i in 0..m {
                let acc: f64 = (0..k)
                    .map(|l| first[i + l * lda] as f64 * second[l + j * ldb] as f64)
                    .sum();
                c[i + j * ldc] = acc as f32;
            }
        }
    }

    #[test]
    fn the_swapped_call_computes_the_row_major_product() {
        // Non-square, odd sizes: a transposed or mis-strided layout cannot pass by symmetry.
        let shapes = [
            Shape::new(3, 5, 7, 3),
            Shape::new(1, 4, 2, 2),
            Shape::square(6, 2),
        ];
        for shape in shapes {
            let (a, b) = inputs(&shape, 5);
            let want = reference(&shape, &a, &b, 0, shape.count);
            let call = strided_config(&shape, shape.count);
            let mut got = vec![f32::NAN; shape.c_len() * shape.count];
            for i in 0..shape.count {
                // The strided call's strides land on the same offsets as the loop's.
                let (ao, bo, co) = offsets(&shape, i);
                let at = |stride: i64| (i as i64 * stride) as usize;
                assert_eq!(
                    (bo, ao, co),
                    (at(call.stride_a), at(call.stride_b), at(call.stride_c))
                );
                column_major_gemm(&call.gemm, &b[bo..], &a[ao..], &mut got[co..]);
            }
            let err = common::verify::rel_l2_error(&got, &want);
            assert!(err < 1e-6, "{shape:?}: {err}");
        }
    }

    #[test]
    fn the_unswapped_call_is_wrong() {
        // The mistake the swap avoids: A first, as if cuBLAS were row-major.
        let shape = Shape::square(4, 1);
        let (a, b) = inputs(&shape, 6);
        let want = reference(&shape, &a, &b, 0, 1);
        let mut got = vec![0f32; 16];
        column_major_gemm(&gemm_config(&shape), &a, &b, &mut got);
        assert!(common::verify::rel_l2_error(&got, &want) > 0.1);
    }

    #[test]
    fn pointer_tables_step_by_one_matrix() {
        let base = 0x7f00_0000_0000;
        let t = pointer_table(base, 32 * 256, 3);
        assert_eq!(t, vec![base, base + 32768, base + 65536]);
        assert!(pointer_table(base, 5, 0).is_empty());
        // Every entry 256-byte aligned when the base and the matrix bytes are.
        assert!(pointer_table(base, 64, 10).iter().all(|p| p % 256 == 0));
    }
}

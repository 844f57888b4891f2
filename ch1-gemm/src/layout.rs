//! Row-major products through a column-major library.
//!
//! cuBLAS reads matrices column-major. A row-major `m x n` matrix is, byte for byte, the
//! column-major `n x m` matrix of its transpose. So the row-major `C = A · B` is the column-major
//! `Cᵀ = Bᵀ · Aᵀ`: pass B as cuBLAS's first operand and A as its second, swap `m` and `n`, and
//! transpose nothing. Leading dimensions are the row lengths: `n` for B and C, `k` for A.

use cudarc::cublas::sys::cublasOperation_t;
use cudarc::cublas::{GemmConfig, StridedBatchedConfig};

use crate::problem::Shape;

/// The arguments of one column-major cuBLAS call computing row-major `C = A · B`. The call's
/// first operand is B and its second is A (see the module comment).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ColumnMajorCall {
    /// Rows of the column-major result: the row-major `n`.
    pub m: i32,
    /// Columns of the column-major result: the row-major `m`.
    pub n: i32,
    pub k: i32,
    /// Leading dimension of the first operand (B): its row length `n`.
    pub ld_first: i32,
    /// Leading dimension of the second operand (A): its row length `k`.
    pub ld_second: i32,
    /// Leading dimension of C: its row length `n`.
    pub ldc: i32,
    /// Elements from one product's B, A and C to the next (strided-batched call).
    pub stride_first: i64,
    pub stride_second: i64,
    pub stride_c: i64,
}

impl ColumnMajorCall {
    /// The call for a validated shape (every dimension at most `i32::MAX`).
    pub fn for_row_major(shape: &Shape) -> ColumnMajorCall {
        let int = |v: usize| i32::try_from(v).expect("shape validated: dimensions fit in int");
        ColumnMajorCall {
            m: int(shape.n),
            n: int(shape.m),
            k: int(shape.k),
            ld_first: int(shape.n),
            ld_second: int(shape.k),
            ldc: int(shape.n),
            stride_first: shape.b_len() as i64,
            stride_second: shape.a_len() as i64,
            stride_c: shape.c_len() as i64,
        }
    }

    /// `C = 1 · first · second + 0 · C`, nothing transposed.
    pub fn gemm_config(&self) -> GemmConfig<f32> {
        GemmConfig {
            transa: cublasOperation_t::CUBLAS_OP_N,
            transb: cublasOperation_t::CUBLAS_OP_N,
            m: self.m,
            n: self.n,
            k: self.k,
            alpha: 1.0,
            lda: self.ld_first,
            ldb: self.ld_second,
            beta: 0.0,
            ldc: self.ldc,
        }
    }

    /// The same products, `count` of them, as one strided-batched call.
    pub fn strided_config(&self, count: usize) -> StridedBatchedConfig<f32> {
        StridedBatchedConfig {
            gemm: self.gemm_config(),
            batch_size: i32::try_from(count).expect("shape validated: count fits in int"),
            stride_a: self.stride_first,
            stride_b: self.stride_second,
            stride_c: self.stride_c,
        }
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

    /// What cuBLAS computes for `C = first · second` with these arguments (column-major,
    /// untransposed), on the host.
    fn column_major_gemm(call: &ColumnMajorCall, first: &[f32], second: &[f32], c: &mut [f32]) {
        let (m, n, k) = (call.m as usize, call.n as usize, call.k as usize);
        let (lda, ldb, ldc) = (
            call.ld_first as usize,
            call.ld_second as usize,
            call.ldc as usize,
        );
        for j in 0..n {
            for i in 0..m {
                let mut acc = 0f64;
                for l in 0..k {
                    acc += first[i + l * lda] as f64 * second[l + j * ldb] as f64;
                }
                c[i + j * ldc] = acc as f32;
            }
        }
    }

    #[test]
    fn the_swapped_call_computes_the_row_major_product() {
        // Non-square, odd sizes: a transposed or mis-strided layout cannot pass by symmetry.
        for shape in [
            Shape {
                m: 3,
                n: 5,
                k: 7,
                count: 3,
            },
            Shape {
                m: 1,
                n: 4,
                k: 2,
                count: 2,
            },
            Shape::square(6, 2),
        ] {
            let (a, b) = inputs(&shape, 5);
            let want = reference(&shape, &a, &b, 0, shape.count);
            let call = ColumnMajorCall::for_row_major(&shape);
            let mut got = vec![f32::NAN; shape.c_len() * shape.count];
            for i in 0..shape.count {
                // The strided call's strides land on the same offsets as the loop's.
                let (ao, bo, co) = offsets(&shape, i);
                assert_eq!(bo as i64, i as i64 * call.stride_first);
                assert_eq!(ao as i64, i as i64 * call.stride_second);
                assert_eq!(co as i64, i as i64 * call.stride_c);
                column_major_gemm(&call, &b[bo..], &a[ao..], &mut got[co..]);
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
        let call = ColumnMajorCall::for_row_major(&shape);
        let mut got = vec![0f32; 16];
        column_major_gemm(&call, &a, &b, &mut got);
        assert!(common::verify::rel_l2_error(&got, &want) > 0.1);
    }

    #[test]
    fn configs_carry_the_call() {
        let call = ColumnMajorCall::for_row_major(&Shape::CHAPTER);
        assert_eq!((call.m, call.n, call.k), (256, 32, 256));
        assert_eq!((call.ld_first, call.ld_second, call.ldc), (256, 256, 256));
        let g = call.gemm_config();
        assert_eq!(
            (g.m, g.n, g.k, g.lda, g.ldb, g.ldc),
            (256, 32, 256, 256, 256, 256)
        );
        assert_eq!((g.alpha, g.beta), (1.0, 0.0));
        let s = call.strided_config(40);
        assert_eq!(s.batch_size, 40);
        assert_eq!(
            (s.stride_a, s.stride_b, s.stride_c),
            (256 * 256, 32 * 256, 32 * 256)
        );
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

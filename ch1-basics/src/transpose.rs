//! The coalescing pair: transpose an n x n fp32 matrix. The naive kernel reads rows and writes
//! columns, so every warp's store is scattered over 32 rows; the tiled kernels stage a tile in
//! shared memory (padded against bank conflicts) so that both global reads and writes are
//! coalesced. Bytes are the same (n^2 * 4 read, n^2 * 4 written); only the access pattern
//! changes. Output is compared with the exact transpose (tolerance 0).

use cudarc::driver::{CudaFunction, CudaSlice, LaunchConfig, PushKernelArg};
use serde_json::json;

use common::counters::Work;
use common::error::CudaContext as _;
use common::gpu::Gpu;
use common::kernels::{self, KernelSource};
use common::lesson::{Lesson, VariantSpec};
use common::verify::{normal_f32, Precision};
use common::Result;

pub const KERNELS: KernelSource = KernelSource {
    name: "transpose",
    code: include_str!("../kernels/transpose.cu"),
};

/// Largest side accepted: 65536^2 fp32 is 16 GiB per matrix.
pub const MAX_SIDE: u64 = 1 << 16;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TransposeVariant {
    Naive,
    Tiled32Unpadded,
    Tiled32,
    Tiled32Rows16,
    Tiled32x64,
    Tiled64,
    Tiled32Vec4,
}

impl TransposeVariant {
    pub const ALL: [TransposeVariant; 7] = [
        TransposeVariant::Naive,
        TransposeVariant::Tiled32Unpadded,
        TransposeVariant::Tiled32,
        TransposeVariant::Tiled32Rows16,
        TransposeVariant::Tiled32x64,
        TransposeVariant::Tiled64,
        TransposeVariant::Tiled32Vec4,
    ];

    /// The baseline; the optimized side of the pair is the padded tiled kernels, all shapes.
    pub const BASELINE: TransposeVariant = TransposeVariant::Naive;
    pub const TILED: [TransposeVariant; 5] = [
        TransposeVariant::Tiled32,
        TransposeVariant::Tiled32Rows16,
        TransposeVariant::Tiled32x64,
        TransposeVariant::Tiled64,
        TransposeVariant::Tiled32Vec4,
    ];

    pub fn name(self) -> &'static str {
        match self {
            TransposeVariant::Naive => "naive",
            TransposeVariant::Tiled32Unpadded => "tiled32-unpadded",
            TransposeVariant::Tiled32 => "tiled32",
            TransposeVariant::Tiled32Rows16 => "tiled32-rows16",
            TransposeVariant::Tiled32x64 => "tiled32x64",
            TransposeVariant::Tiled64 => "tiled64",
            TransposeVariant::Tiled32Vec4 => "tiled32-vec4",
        }
    }

    pub fn kernel(self) -> &'static str {
        match self {
            TransposeVariant::Naive => "transpose_naive",
            TransposeVariant::Tiled32Unpadded => "transpose_tiled32_unpadded",
            TransposeVariant::Tiled32 => "transpose_tiled32",
            TransposeVariant::Tiled32Rows16 => "transpose_tiled32_rows16",
            TransposeVariant::Tiled32x64 => "transpose_tiled32x64",
            TransposeVariant::Tiled64 => "transpose_tiled64",
            TransposeVariant::Tiled32Vec4 => "transpose_tiled32_vec4",
        }
    }

    pub fn description(self) -> &'static str {
        match self {
            TransposeVariant::Naive => "read rows, write columns: coalesced reads, scattered writes",
            TransposeVariant::Tiled32Unpadded => {
                "32x32 shared tile, no padding: coalesced, but 32-way bank conflicts on the column reads"
            }
            TransposeVariant::Tiled32 => "32x32 shared tile padded to 33 columns: coalesced, conflict-free",
            TransposeVariant::Tiled32Rows16 => "32x32 padded tile, 32x16 threads (2 elements each)",
            TransposeVariant::Tiled32x64 => "32x64 padded tile: 8 loads in flight per thread",
            TransposeVariant::Tiled32Vec4 => "32x32 padded tile, 16-byte global loads and stores",
            TransposeVariant::Tiled64 => {
                "64x64 padded shared tile: coalesced, conflict-free, 16 loads in flight per thread"
            }
        }
    }

    fn launch_config(self, n: u32) -> LaunchConfig {
        // (tile rows, tile columns, thread rows) of each kernel.
        let (rows, cols, block_rows) = match self {
            TransposeVariant::Naive => (8, 32, 8),
            TransposeVariant::Tiled32Unpadded | TransposeVariant::Tiled32 => (32, 32, 8),
            TransposeVariant::Tiled32Rows16 => (32, 32, 16),
            TransposeVariant::Tiled32x64 => (32, 64, 8),
            TransposeVariant::Tiled64 => (64, 64, 8),
            TransposeVariant::Tiled32Vec4 => (32, 32, 32),
        };
        if self == TransposeVariant::Tiled32Vec4 {
            return LaunchConfig {
                grid_dim: (n.div_ceil(32), n.div_ceil(32), 1),
                block_dim: (8, 32, 1),
                shared_mem_bytes: 0,
            };
        }
        LaunchConfig {
            grid_dim: (n.div_ceil(cols), n.div_ceil(rows), 1),
            block_dim: (32, block_rows, 1),
            shared_mem_bytes: 0,
        }
    }
}

pub struct Transpose {
    n: u64,
    seed: u64,
    input: CudaSlice<f32>,
    output: CudaSlice<f32>,
    kernels: Vec<CudaFunction>,
    variants: Vec<TransposeVariant>,
    reference: Vec<f64>,
}

impl Transpose {
    pub fn new(gpu: &Gpu, n: u64, seed: u64, variants: &[TransposeVariant]) -> Result<Transpose> {
        let elems = n * n;
        gpu.check_fits(&format!("two {n} x {n} fp32 matrices"), 2 * 4 * elems)?;
        common::gpu::check_host_fits(
            &format!("the {n} x {n} input and its float64 transpose"),
            (4 + 8 + 4) * elems,
        )?;
        let module = kernels::load(gpu, KERNELS, &[])?;
        let kernels = variants
            .iter()
            .map(|v| module.function(v.kernel()))
            .collect::<Result<Vec<_>>>()?;
        let len = elems as usize;
        let host = normal_f32(seed, len, 1.0);
        let side = n as usize;
        let reference = common::par::map(len, |i| {
            let (r, c) = (i / side, i % side);
            host[c * side + r] as f64
        });
        Ok(Transpose {
            n,
            seed,
            input: gpu.upload(&host, "transpose input")?,
            output: gpu.alloc(len, "transpose output")?,
            kernels,
            variants: variants.to_vec(),
            reference,
        })
    }
}

impl Lesson for Transpose {
    fn name(&self) -> &'static str {
        "ch1-basics"
    }

    fn parameters(&self) -> serde_json::Value {
        json!({ "part": "transpose", "n": self.n, "seed": self.seed, "dtype": "f32" })
    }

    fn variants(&self) -> Vec<VariantSpec> {
        let bytes = 4 * self.n * self.n;
        self.variants
            .iter()
            .map(|v| VariantSpec {
                // Moving values is exact: any difference is a bug.
                tolerance: 0.0,
                ..VariantSpec::new(
                    v.name(),
                    v.description(),
                    Precision::Fp32,
                    Work {
                        bytes_read: bytes,
                        bytes_written: bytes,
                        flops: 0,
                    },
                )
            })
            .collect()
    }

    fn baseline(&self) -> &'static str {
        TransposeVariant::BASELINE.name()
    }

    fn reference(&self) -> &[f64] {
        &self.reference
    }

    fn reference_label(&self) -> &'static str {
        "the exact transpose"
    }

    fn poison(&mut self, gpu: &Gpu) -> Result<()> {
        gpu.poison(&mut self.output)
    }

    fn run(&mut self, gpu: &Gpu, index: usize) -> Result<()> {
        let n = self.n as i32;
        let cfg = self.variants[index].launch_config(self.n as u32);
        let mut b = gpu.stream.launch_builder(&self.kernels[index]);
        b.arg(&self.input).arg(&mut self.output).arg(&n);
        // SAFETY: (const float*, float*, int n) over n x n elements of each buffer.
        unsafe { b.launch(cfg) }.cuda(self.variants[index].kernel())?;
        Ok(())
    }

    fn output(&mut self, gpu: &Gpu) -> Result<Vec<f32>> {
        gpu.download(&self.output)
    }
}

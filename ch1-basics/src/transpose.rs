//! # Coalescing: a side x side fp32 transpose
//!
//! The naive kernel's warps store to 32 memory segments each; the tiled kernels stage a tile in
//! shared memory (padded against bank conflicts) so that reads and writes are both coalesced.
//! The bytes are the same; only the access pattern changes.

use cudarc::driver::{CudaFunction, CudaSlice, LaunchConfig, PushKernelArg};
use serde_json::json;

use common::counters::Work;
use common::error::CudaContext as _;
use common::gpu::Gpu;
use common::kernels::{self, KernelSource};
use common::runner::{Lesson, Reference, VariantSpec};
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

    /// The optimized side of the pair: the padded tiled kernels, all shapes.
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

    /// `transpose_` and its name, '-' read as '_'.
    pub fn kernel(self) -> String {
        format!("transpose_{}", self.name().replace('-', "_"))
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

    pub fn launch_config(self, n: u32) -> LaunchConfig {
        // (tile rows, tile columns, threads) of each kernel.
        let (rows, cols, threads) = match self {
            TransposeVariant::Naive => (8, 32, (32, 8)),
            TransposeVariant::Tiled32Unpadded | TransposeVariant::Tiled32 => (32, 32, (32, 8)),
            TransposeVariant::Tiled32Rows16 => (32, 32, (32, 16)),
            TransposeVariant::Tiled32x64 => (32, 64, (32, 8)),
            TransposeVariant::Tiled64 => (64, 64, (32, 8)),
            TransposeVariant::Tiled32Vec4 => (32, 32, (8, 32)),
        };
        LaunchConfig {
            grid_dim: (n.div_ceil(cols), n.div_ceil(rows), 1),
            block_dim: (threads.0, threads.1, 1),
            shared_mem_bytes: 0,
        }
    }
}

pub fn specs(side: u64) -> Vec<VariantSpec> {
    let bytes = 4 * side * side;
    let work = Work {
        bytes_read: bytes,
        bytes_written: bytes,
        flops: 0,
    };
    TransposeVariant::ALL
        .iter()
        .map(|v| {
            // Moving values is exact: any difference is a bug.
            VariantSpec::new(v.name(), v.description(), Precision::Fp32, work).with_tolerance(0.0)
        })
        .collect()
}

pub struct Transpose {
    side: u64,
    seed: u64,
    input: CudaSlice<f32>,
    output: CudaSlice<f32>,
    kernels: Vec<CudaFunction>,
    reference: Reference,
}

impl Transpose {
    pub fn new(gpu: &Gpu, side: u64, seed: u64) -> Result<Transpose> {
        let elems = side * side;
        gpu.check_fits(&format!("two {side} x {side} fp32 matrices"), 2 * 4 * elems)?;
        common::gpu::check_host_fits(
            &format!("the {side} x {side} input and its float64 transpose"),
            (4 + 8 + 4) * elems,
        )?;
        let module = kernels::load(gpu, KERNELS, &[])?;
        let kernels = TransposeVariant::ALL
            .iter()
            .map(|v| module.function(&v.kernel()))
            .collect::<Result<Vec<_>>>()?;
        let len = elems as usize;
        let host = normal_f32(seed, len, 1.0);
        let n = side as usize;
        let transposed = common::par::map(len, |i| {
            let (r, c) = (i / n, i % n);
            host[c * n + r] as f64
        });
        Ok(Transpose {
            side,
            seed,
            input: gpu.upload(&host, "transpose input")?,
            output: gpu.alloc(len, "transpose output")?,
            kernels,
            reference: Reference::single("the exact transpose", transposed),
        })
    }
}

impl Lesson for Transpose {
    fn name(&self) -> &str {
        "ch1-basics"
    }

    fn parameters(&self) -> serde_json::Value {
        json!({ "side": self.side, "seed": self.seed, "dtype": "f32" })
    }

    fn variants(&self) -> Vec<VariantSpec> {
        specs(self.side)
    }

    fn reference(&self, _index: usize) -> Option<&Reference> {
        Some(&self.reference)
    }

    fn run(&mut self, gpu: &Gpu, index: usize) -> Result<()> {
        let variant = TransposeVariant::ALL[index];
        let side = self.side as i32;
        let cfg = variant.launch_config(self.side as u32);
        let mut b = gpu.stream.launch_builder(&self.kernels[index]);
        b.arg(&self.input).arg(&mut self.output).arg(&side);
        // SAFETY: (const float*, float*, int n) over side x side elements of each buffer.
        unsafe { b.launch(cfg) }.cuda(&variant.kernel())?;
        Ok(())
    }

    fn output_buffer(&mut self, _index: usize) -> Option<&mut CudaSlice<f32>> {
        Some(&mut self.output)
    }
}

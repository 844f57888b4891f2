//! The double-buffering pair's chunk plan, the model of what overlap can reach, and the pass
//! in each mode, queued on the caller's stream.

use std::sync::Arc;

use cudarc::driver::{CudaEvent, CudaFunction, CudaSlice, CudaStream, LaunchConfig, PushKernelArg};
use serde::Serialize;

use common::error::CudaContext as _;
use common::gpu::Gpu;
use common::kernels::{self, KernelSource};
use common::pinned::Pinned;
use common::verify::{check_by, Verification};
use common::Result;

pub const KERNELS: KernelSource = KernelSource {
    name: "pipeline",
    code: include_str!("../../kernels/pipeline.cu"),
};

/// The map's constants: x <- A x + B. |A| < 1 keeps values bounded and rounding damped.
pub const A: f32 = 0.999;
pub const B: f32 = 0.001;

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Chunk {
    pub index: usize,
    pub start: usize,
    pub len: usize,
    pub buffer: usize,
    /// Chunk whose copy-out must finish before this chunk's copy-in may overwrite its buffer.
    pub reuses_after: Option<usize>,
}

/// Split `n` elements into chunks of `chunk` (the last may be shorter), assigned round-robin
/// to `buffers` device buffers.
pub fn plan(n: usize, chunk: usize, buffers: usize) -> Vec<Chunk> {
    assert!(chunk > 0 && buffers > 0);
    (0..n.div_ceil(chunk))
        .map(|i| Chunk {
            index: i,
            start: i * chunk,
            len: chunk.min(n - i * chunk),
            buffer: i % buffers,
            reuses_after: i.checked_sub(buffers),
        })
        .collect()
}

/// The time the overlapped run of a plan takes when a full chunk's stages take `stage` (copy
/// in, compute, copy out) and each engine does one thing at a time: what it should approach.
pub fn simulate(chunks: &[Chunk], stage: (f64, f64, f64)) -> f64 {
    let (mut free_in, mut free_compute, mut free_out) = (0.0f64, 0.0f64, 0.0f64);
    let mut out_done = vec![0.0f64; chunks.len()];
    for c in chunks {
        let frac = c.len as f64 / chunks[0].len as f64;
        let buffer_free = c.reuses_after.map(|p| out_done[p]).unwrap_or(0.0);
        free_in = free_in.max(buffer_free) + stage.0 * frac;
        free_compute = free_compute.max(free_in) + stage.1 * frac;
        free_out = free_out.max(free_compute) + stage.2 * frac;
        out_done[c.index] = free_out;
    }
    free_out
}

/// Relative L2 tolerance of the output against the float64 closed form: one rounding per
/// iteration, damped by |A| < 1, leaves ~1e-6.
pub const TOLERANCE: f64 = 1e-5;

/// x after `iterations` steps of x <- A x + B, in float64 (closed form).
pub fn reference_value(x: f32, iterations: u32) -> f64 {
    let (a, b) = (A as f64, B as f64);
    let an = a.powi(iterations as i32);
    an * x as f64 + b * (1.0 - an) / (1.0 - a)
}

/// A grid-stride launch over `len` elements: at most 16 blocks of 256 threads per SM.
pub fn grid_stride(len: usize, sm_count: u32) -> LaunchConfig {
    LaunchConfig {
        grid_dim: ((len.div_ceil(256) as u32).min(sm_count * 16).max(1), 1, 1),
        block_dim: (256, 1, 1),
        shared_mem_bytes: 0,
    }
}

/// The compute stage: the map, `iterations` times per element.
pub struct Affine {
    kernel: CudaFunction,
    sm_count: u32,
    pub iterations: u32,
}

impl Affine {
    pub fn new(gpu: &Gpu, iterations: u32) -> Result<Affine> {
        Ok(Affine {
            kernel: kernels::load(gpu, KERNELS, &[])?.function("affine_iterate")?,
            sm_count: gpu.info.sm_count,
            iterations,
        })
    }

    pub fn queue(
        &self,
        stream: &Arc<CudaStream>,
        buf: &mut CudaSlice<f32>,
        len: usize,
    ) -> Result<()> {
        assert!(len <= buf.len());
        let (count, a, b, it) = (len as i64, A, B, self.iterations as i32);
        let mut l = stream.launch_builder(&self.kernel);
        l.arg(buf).arg(&count).arg(&a).arg(&b).arg(&it);
        // SAFETY: affine_iterate(float*, i64, float, float, int) over len <= buf.len() elements.
        unsafe { l.launch(grid_stride(len, self.sm_count)) }.cuda("affine_iterate")?;
        Ok(())
    }

    /// `mapped` against the float64 closed form of the map of `input`, computed on the fly (a
    /// stored reference would be another 2 GiB at the pipeline's default size).
    pub fn check(&self, mapped: &[f32], input: &[f32]) -> Verification {
        let closed_form = |i: usize| reference_value(input[i], self.iterations);
        check_by(mapped, closed_form, TOLERANCE, "the float64 closed form")
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Serial,
    Overlapped,
    /// Stages alone.
    CopyInOnly,
    ComputeOnly,
    CopyOutOnly,
}

/// The sizes of the pair (the command line's flags say what each is).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct PipelineConfig {
    pub elements: usize,
    pub chunk: usize,
    pub buffers: usize,
    pub iterations: u32,
    pub seed: u64,
}

impl PipelineConfig {
    pub fn validate(&self) -> std::result::Result<(), String> {
        if self.chunk > self.elements {
            return Err(format!(
                "--chunk ({}) is larger than --pipeline-elements ({}): use a smaller chunk",
                self.chunk, self.elements
            ));
        }
        if self.elements == 0 || self.chunk == 0 || self.buffers == 0 {
            return Err("elements, chunk and buffers must be at least 1".into());
        }
        Ok(())
    }

    pub fn plan(&self) -> Vec<Chunk> {
        plan(self.elements, self.chunk, self.buffers)
    }

    pub fn chunks(&self) -> usize {
        self.elements.div_ceil(self.chunk.max(1))
    }
}

pub struct Pipeline {
    pub cfg: PipelineConfig,
    host_in: Pinned<f32>,
    host_out: Pinned<f32>,
    dev: Vec<CudaSlice<f32>>,
    affine: Affine,
    streams: [Arc<CudaStream>; 3],
    start: CudaEvent,
    in_done: Vec<CudaEvent>,
    compute_done: Vec<CudaEvent>,
    out_done: Vec<CudaEvent>,
}

impl Pipeline {
    pub fn new(gpu: &Gpu, cfg: PipelineConfig) -> Result<Pipeline> {
        let (n, buffers) = (cfg.elements, cfg.buffers);
        let cfg = PipelineConfig {
            chunk: cfg.chunk.min(n),
            ..cfg
        };
        gpu.check_fits(
            "the pipeline's device buffers",
            (4 * cfg.chunk * buffers) as u64,
        )?;
        let affine = Affine::new(gpu, cfg.iterations)?;
        // Drawn straight into the page-locked input: no 1 GiB copy of it made first.
        let mut host_in = Pinned::<f32>::new(gpu, n, "the pipeline input")?;
        common::verify::uniform_f32_into(cfg.seed, host_in.as_mut_slice(), -1.0, 1.0);
        let host_out = Pinned::<f32>::new(gpu, n, "the pipeline output")?;
        let dev = (0..buffers)
            .map(|_| gpu.alloc::<f32>(cfg.chunk, "a pipeline buffer"))
            .collect::<Result<Vec<_>>>()?;
        let stream = || gpu.ctx.new_stream().cuda("creating a stream");
        let event = || gpu.ctx.new_event(None).cuda("creating an event");
        let events = || (0..buffers).map(|_| event()).collect::<Result<Vec<_>>>();
        Ok(Pipeline {
            cfg,
            host_in,
            host_out,
            dev,
            affine,
            streams: [stream()?, stream()?, stream()?],
            start: event()?,
            in_done: events()?,
            compute_done: events()?,
            out_done: events()?,
        })
    }

    /// Queue one whole pass in `mode`, forked from and joined to `main`, so that the harness's
    /// timer brackets it.
    pub fn queue(&mut self, main: &Arc<CudaStream>, mode: Mode) -> Result<()> {
        let chunks = self.cfg.plan();
        let streams = self.streams.clone();
        if mode != Mode::Overlapped {
            for c in &chunks {
                let mut d = self.dev[0].slice_mut(..c.len);
                let range = c.start..c.start + c.len;
                if matches!(mode, Mode::Serial | Mode::CopyInOnly) {
                    let _phase = common::nvtx::range("copy in");
                    self.host_in.copy_to_device(range, &mut d, main)?;
                }
                if matches!(mode, Mode::Serial | Mode::ComputeOnly) {
                    let _phase = common::nvtx::range("compute");
                    self.affine.queue(main, &mut self.dev[0], c.len)?;
                }
                if matches!(mode, Mode::Serial | Mode::CopyOutOnly) {
                    let _phase = common::nvtx::range("copy out");
                    let d = self.dev[0].slice(..c.len);
                    self.host_out.copy_from_device(c.start, &d, main)?;
                }
            }
            return Ok(());
        }
        let [copy_in, compute, copy_out] = &streams;
        self.start.record(main).cuda("recording the fork")?;
        for s in &streams {
            s.wait(&self.start).cuda("forking a stage stream")?;
        }
        for c in &chunks {
            let b = c.buffer;
            if c.reuses_after.is_some() {
                // Recorded by chunk c - buffers, the last user of this buffer.
                copy_in
                    .wait(&self.out_done[b])
                    .cuda("waiting for a buffer")?;
            }
            let phase = common::nvtx::range("copy in");
            let mut d = self.dev[b].slice_mut(..c.len);
            self.host_in
                .copy_to_device(c.start..c.start + c.len, &mut d, copy_in)?;
            drop(phase);
            let phase = common::nvtx::range("compute");
            self.in_done[b].record(copy_in).cuda("recording copy-in")?;
            compute.wait(&self.in_done[b]).cuda("ordering compute")?;
            self.affine.queue(compute, &mut self.dev[b], c.len)?;
            self.compute_done[b]
                .record(compute)
                .cuda("recording compute")?;
            drop(phase);
            let _phase = common::nvtx::range("copy out");
            copy_out
                .wait(&self.compute_done[b])
                .cuda("ordering copy-out")?;
            let d = self.dev[b].slice(..c.len);
            self.host_out.copy_from_device(c.start, &d, copy_out)?;
            self.out_done[b]
                .record(copy_out)
                .cuda("recording copy-out")?;
        }
        for s in &streams {
            main.join(s).cuda("joining a stage stream")?;
        }
        Ok(())
    }

    pub fn poison_output(&mut self) {
        common::par::for_each_chunk_mut(self.host_out.as_mut_slice(), 1 << 20, |_, c| {
            c.fill(f32::NAN)
        });
    }

    pub fn check_closed_form(&self) -> Verification {
        self.affine
            .check(self.host_out.as_slice(), self.host_in.as_slice())
    }

    pub fn output(&self) -> &[f32] {
        self.host_out.as_slice()
    }
}

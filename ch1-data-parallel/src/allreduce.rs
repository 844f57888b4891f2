//! `--allreduce`: NCCL's fp32 sum all-reduce over every rank, message sizes 1 MiB to 4 GiB (by
//! powers of four), out of place, issued from one thread as one NCCL group per call. Each
//! rank's input is a seeded random block repeated over the buffer, so the largest sizes cost no
//! host time to make. Timed by the harness's meter on rank 0's stream, which waits on every
//! other rank's stream after each call; a sample is several calls back to back (at least
//! [SAMPLE_S] of them), as nccl-tests and PyTorch's benchmarks time it; each size is checked
//! once against the float64 sum of the ranks' inputs, at sampled elements. With `--register`
//! the buffers come from NCCL's allocator and are registered with the communicators (user
//! buffer registration). Reported as nccl-tests does: algbw = bytes / time, busbw = algbw *
//! 2(n-1)/n, undefined for one rank.

use cudarc::driver::{CudaEvent, CudaSlice, DevicePtr, DevicePtrMut};
use serde_json::json;

use common::bench::{BenchConfig, Timer};
use common::error::CudaContext as _;
use common::runner::Meter;
use common::stop::StopRule;
use common::table::{three_figures, Table};
use common::verify::{check, uniform_f32, Verification};
use common::{Gpu, Result};

use crate::busbw::{algbw, busbw, sizes};
use crate::nccl::{all_reduce_all, Communicator, RankCall, Registered};

pub const MIN_BYTES: u64 = 1 << 20;
pub const MAX_BYTES: u64 = 4 << 30;
/// Elements checked per size, spread evenly.
const CHECKED: usize = 4096;
/// Elements of each rank's random block (about 16 MiB, not a power of two, so the repeats do
/// not line up with NCCL's chunks).
const BLOCK: usize = 4_000_037;
/// The shortest sample: calls back to back until it is this long.
pub const SAMPLE_S: f64 = 0.025;
/// Channels per collective unless told otherwise. NCCL's own choice for two H200s of one host
/// is 24, which leaves NVLink bandwidth unused: with 32 the same calls reached 342 GB/s bus
/// bandwidth at 1 GiB instead of 329.
pub const ALLREDUCE_CHANNELS: u32 = 32;

/// One message size's result.
#[derive(Debug, Clone)]
pub struct SizeResult {
    pub bytes: u64,
    pub median_s: f64,
    pub algbw: f64,
    pub busbw: Option<f64>,
    pub check: Verification,
    pub samples_s: Vec<f64>,
}

/// A rank's input and output: plain allocations, or NCCL's registered ones.
enum Buffers {
    Plain {
        send: CudaSlice<f32>,
        recv: CudaSlice<f32>,
    },
    Registered {
        send: Registered,
        recv: Registered,
    },
}

struct RankBuffers {
    buffers: Buffers,
    done: CudaEvent,
}

impl RankBuffers {
    fn new(gpu: &Gpu, comm: &Communicator, elements: usize, register: bool) -> Result<Self> {
        let bytes = elements * 4;
        gpu.check_fits("the all-reduce's input and output", 2 * bytes as u64)?;
        let buffers = if register {
            Buffers::Registered {
                send: Registered::new(gpu, comm, bytes)?,
                recv: Registered::new(gpu, comm, bytes)?,
            }
        } else {
            Buffers::Plain {
                send: gpu.alloc::<f32>(elements, "the all-reduce input")?,
                recv: gpu.alloc::<f32>(elements, "the all-reduce output")?,
            }
        };
        Ok(RankBuffers {
            buffers,
            done: gpu.ctx.new_event(None).cuda("creating an event")?,
        })
    }

    /// Input and output pointers.
    fn ptrs(&mut self, gpu: &Gpu) -> (u64, u64) {
        match &mut self.buffers {
            Buffers::Plain { send, recv } => (
                send.device_ptr(&gpu.stream).0,
                recv.device_ptr_mut(&gpu.stream).0,
            ),
            Buffers::Registered { send, recv } => (send.ptr(), recv.ptr()),
        }
    }

    /// The input: `block` repeated over `elements`.
    fn fill(&mut self, gpu: &Gpu, block: &[f32], elements: usize) -> Result<()> {
        let (send, _) = self.ptrs(gpu);
        let staged = gpu.upload(block, "the all-reduce's input block")?;
        let from = staged.device_ptr(&gpu.stream).0;
        let mut at = 0;
        while at < elements {
            let n = block.len().min(elements - at);
            // SAFETY: both ranges lie inside their allocations; stream-ordered copy.
            unsafe {
                cudarc::driver::result::memcpy_dtod_async(
                    send + 4 * at as u64,
                    from,
                    4 * n,
                    gpu.stream.cu_stream(),
                )
            }
            .cuda("filling the all-reduce input")?;
            at += n;
        }
        gpu.sync()
    }

    /// The first `count` outputs poisoned (0xFF bytes: NaN).
    fn poison(&mut self, gpu: &Gpu, count: usize) -> Result<()> {
        let (_, recv) = self.ptrs(gpu);
        // SAFETY: the output holds at least `count` f32; stream-ordered.
        unsafe {
            cudarc::driver::result::memset_d8_async(recv, 0xFF, 4 * count, gpu.stream.cu_stream())
        }
        .cuda("poisoning the all-reduce output")
    }

    /// The first `count` outputs, read back.
    fn output(&mut self, gpu: &Gpu, count: usize) -> Result<Vec<f32>> {
        let (_, recv) = self.ptrs(gpu);
        let mut host = vec![0f32; count];
        gpu.ctx.bind_to_thread().cuda("binding the context")?;
        // SAFETY: recv holds at least `count` f32; the copy is synchronous.
        unsafe { cudarc::driver::result::memcpy_dtoh_sync(&mut host, recv) }
            .cuda("copying the all-reduce output back")?;
        Ok(host)
    }
}

/// Measure every size on `gpus` (rank r on `gpus[r]`), at most `max_bytes`; `register` puts
/// the buffers in NCCL's registered memory.
pub fn measure_sizes(
    gpus: &[&Gpu],
    max_bytes: u64,
    register: bool,
    stop: StopRule,
) -> Result<Vec<SizeResult>> {
    let comms = Communicator::for_each(gpus)?;
    let max_elements = (max_bytes / 4) as usize;
    let blocks: Vec<Vec<f32>> = (0..gpus.len())
        .map(|r| uniform_f32(7 + r as u64, BLOCK.min(max_elements), -1.0, 1.0))
        .collect();
    let mut bufs = Vec::new();
    for ((gpu, comm), block) in gpus.iter().zip(&comms).zip(&blocks) {
        let mut b = RankBuffers::new(gpu, comm, max_elements, register)?;
        b.fill(gpu, block, max_elements)?;
        bufs.push(b);
    }
    let comms: Vec<&Communicator> = comms.iter().collect();
    let mut timer = Timer::new(gpus[0])?;
    let bench = BenchConfig {
        stop,
        hold: false,
        min_sample_s: SAMPLE_S,
        ..BenchConfig::default()
    };
    let mut meter = Meter::new(gpus[0], &mut timer, bench);
    let mut out = Vec::new();
    for bytes in sizes(MIN_BYTES, max_bytes, 4) {
        let count = (bytes / 4) as usize;
        bufs[0].poison(gpus[0], count)?;
        all_reduce(gpus, &comms, &mut bufs, count)?;
        for g in gpus {
            g.sync()?;
        }
        let got = bufs[0].output(gpus[0], count)?;
        let check = check_sum(&got, &blocks);
        let timed = meter.measure(&bench, &mut || all_reduce(gpus, &comms, &mut bufs, count))?;
        let median_s = timed.time_ms.median / 1e3;
        out.push(SizeResult {
            bytes,
            median_s,
            algbw: algbw(bytes, median_s),
            busbw: busbw(bytes, median_s, gpus.len()),
            check,
            samples_s: timed.measurement.samples_s,
        });
    }
    for g in gpus {
        g.sync()?;
    }
    drop(bufs);
    Ok(out)
}

fn all_reduce(
    gpus: &[&Gpu],
    comms: &[&Communicator],
    bufs: &mut [RankBuffers],
    count: usize,
) -> Result<()> {
    let ptrs: Vec<(u64, u64)> = gpus
        .iter()
        .zip(bufs.iter_mut())
        .map(|(gpu, b)| b.ptrs(gpu))
        .collect();
    let calls: Vec<RankCall> = gpus
        .iter()
        .zip(bufs.iter())
        .zip(ptrs)
        .map(|((gpu, b), (src, dst))| RankCall {
            stream: &gpu.stream,
            src,
            dst,
            done: &b.done,
        })
        .collect();
    all_reduce_all(comms, &calls, count)
}

/// Sampled elements of an output against the float64 sum of every rank's input block there.
fn check_sum(got: &[f32], blocks: &[Vec<f32>]) -> Verification {
    let count = got.len();
    let step = (count / CHECKED).max(1);
    let idx: Vec<usize> = (0..count).step_by(step).collect();
    let sampled: Vec<f32> = idx.iter().map(|&i| got[i]).collect();
    let want: Vec<f64> = idx
        .iter()
        .map(|&i| blocks.iter().map(|b| b[i % b.len()] as f64).sum())
        .collect();
    check(
        &sampled,
        &want,
        1e-6,
        "the float64 sum of the ranks' inputs",
    )
    .named("sampled elements")
}

/// The table nccl-tests users expect.
pub fn table(results: &[SizeResult]) -> Table {
    let mut t = Table::new()
        .right("size")
        .right("time (us)")
        .right("algbw (GB/s)")
        .right("busbw (GB/s)")
        .left("check");
    for r in results {
        t.row(vec![
            format!("{} MiB", r.bytes >> 20),
            three_figures(r.median_s * 1e6),
            three_figures(r.algbw / 1e9),
            match r.busbw {
                Some(b) => three_figures(b / 1e9),
                None => "undefined".into(),
            },
            if r.check.passed {
                "ok".into()
            } else {
                format!("FAILED ({:.1e})", r.check.rel_l2_error)
            },
        ]);
    }
    t
}

/// The results as JSON, with the machine they ran on.
pub fn to_json(results: &[SizeResult], gpus: &[&Gpu], register: bool) -> serde_json::Value {
    json!({
        "lesson": "ch1-data-parallel",
        "mode": "allreduce",
        "devices": gpus.iter().map(|g| &g.info).collect::<Vec<_>>(),
        "provenance": common::report::Provenance::now(),
        "ranks": gpus.len(),
        "op": "fp32 sum, out of place",
        "buffers": if register { "ncclMemAlloc, registered with ncclCommRegister" } else { "plain device allocations" },
        "sample": format!("calls back to back for at least {} ms", SAMPLE_S * 1e3),
        "nccl_version": crate::nccl::version(),
        "nccl_nvls_enable": std::env::var("NCCL_NVLS_ENABLE").ok(),
        "nccl_environment": nccl_environment(),
        "busbw_convention": "nccl-tests: algbw * 2(n-1)/n, undefined for one rank",
        "sizes": results.iter().map(|r| json!({
            "bytes": r.bytes,
            "median_s": r.median_s,
            "algbw_bytes_per_s": r.algbw,
            "busbw_bytes_per_s": r.busbw,
            "verified": r.check.passed,
            "rel_l2_error": r.check.rel_l2_error,
            "samples_s": r.samples_s,
        })).collect::<Vec<_>>(),
    })
}

/// Every `NCCL_*` variable of this process: what NCCL was told beyond its defaults.
pub fn nccl_environment() -> serde_json::Map<String, serde_json::Value> {
    let mut vars: Vec<(String, String)> = std::env::vars()
        .filter(|(k, _)| k.starts_with("NCCL_"))
        .collect();
    vars.sort();
    vars.into_iter().map(|(k, v)| (k, v.into())).collect()
}

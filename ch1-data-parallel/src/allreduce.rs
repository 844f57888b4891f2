//! `--allreduce`: NCCL's fp32 sum all-reduce over every rank, message sizes 1 MiB to 1 GiB (by
//! powers of four), out of place, issued from one thread as one NCCL group per call. Timed by
//! the harness's meter on rank 0's stream, which waits on every other rank's stream after each
//! call (warmup, then samples until the stop rule); each size is checked once against the sum
//! of the ranks' seeded inputs, at sampled elements. Reported as nccl-tests does: algbw = bytes
//! / time, busbw = algbw * 2(n-1)/n, undefined for one rank.

use cudarc::driver::{CudaEvent, CudaSlice, DevicePtr, DevicePtrMut};
use cudarc::nccl::result;
use serde_json::json;

use common::bench::{BenchConfig, Timer};
use common::error::CudaContext as _;
use common::runner::Meter;
use common::stop::StopRule;
use common::table::{three_figures, Table};
use common::verify::{check, uniform_f32, Verification};
use common::{Gpu, Result};

use crate::busbw::{algbw, busbw, sizes};
use crate::nccl::{nccl_error, Communicator};

pub const MIN_BYTES: u64 = 1 << 20;
pub const MAX_BYTES: u64 = 1 << 30;
/// Elements checked per size, spread evenly.
const CHECKED: usize = 4096;

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

struct RankBuffers {
    send: CudaSlice<f32>,
    recv: CudaSlice<f32>,
    done: CudaEvent,
}

/// Measure every size on `gpus` (rank r on `gpus[r]`), at most `max_bytes`.
pub fn measure_sizes(gpus: &[&Gpu], max_bytes: u64, stop: StopRule) -> Result<Vec<SizeResult>> {
    let comms = Communicator::for_each(gpus)?;
    let max_elements = (max_bytes / 4) as usize;
    let inputs: Vec<Vec<f32>> = (0..gpus.len())
        .map(|r| uniform_f32(7 + r as u64, max_elements, -1.0, 1.0))
        .collect();
    let mut bufs = Vec::new();
    for (gpu, input) in gpus.iter().zip(&inputs) {
        bufs.push(RankBuffers {
            send: gpu.upload(input, "the all-reduce input")?,
            recv: gpu.alloc::<f32>(max_elements, "the all-reduce output")?,
            done: gpu.ctx.new_event(None).cuda("creating an event")?,
        });
    }
    let mut timer = Timer::new(gpus[0])?;
    let bench = BenchConfig {
        stop,
        hold: false,
        min_sample_s: 1e-3,
        ..BenchConfig::default()
    };
    let mut meter = Meter::new(gpus[0], &mut timer, bench);
    let mut out = Vec::new();
    for bytes in sizes(MIN_BYTES, max_bytes, 4) {
        let count = (bytes / 4) as usize;
        gpus[0].poison(&mut bufs[0].recv)?;
        all_reduce(gpus, &comms, &mut bufs, count)?;
        for g in gpus {
            g.sync()?;
        }
        let check = check_sum(gpus[0], &bufs[0].recv, &inputs, count)?;
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
    Ok(out)
}

fn all_reduce(
    gpus: &[&Gpu],
    comms: &[Communicator],
    bufs: &mut [RankBuffers],
    count: usize,
) -> Result<()> {
    let nccl = |e| nccl_error("an all-reduce", e);
    result::group_start().map_err(nccl)?;
    let mut queued = Ok(());
    for ((gpu, comm), b) in gpus.iter().zip(comms).zip(bufs.iter_mut()) {
        let src = b.send.device_ptr(&gpu.stream).0;
        let dst = b.recv.device_ptr_mut(&gpu.stream).0;
        queued = comm.all_reduce_to(&gpu.stream, src, dst, count);
        if queued.is_err() {
            break;
        }
    }
    result::group_end().map_err(nccl)?;
    queued?;
    for (gpu, b) in gpus.iter().zip(bufs.iter()).skip(1) {
        b.done.record(&gpu.stream).cuda("recording a rank's end")?;
        gpus[0].stream.wait(&b.done).cuda("waiting for a rank")?;
    }
    Ok(())
}

/// Sampled elements of rank 0's output against the float64 sum of every rank's input.
fn check_sum(
    gpu: &Gpu,
    recv: &CudaSlice<f32>,
    inputs: &[Vec<f32>],
    count: usize,
) -> Result<Verification> {
    let got = gpu
        .stream
        .clone_dtoh(&recv.slice(..count))
        .cuda("copying the all-reduce output back")?;
    let step = (count / CHECKED).max(1);
    let idx: Vec<usize> = (0..count).step_by(step).collect();
    let sampled: Vec<f32> = idx.iter().map(|&i| got[i]).collect();
    let want: Vec<f64> = idx
        .iter()
        .map(|&i| inputs.iter().map(|v| v[i] as f64).sum())
        .collect();
    Ok(check(
        &sampled,
        &want,
        1e-6,
        "the float64 sum of the ranks' inputs",
    )
    .named("sampled elements"))
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
pub fn to_json(results: &[SizeResult], gpus: &[&Gpu]) -> serde_json::Value {
    json!({
        "lesson": "ch1-data-parallel",
        "mode": "allreduce",
        "devices": gpus.iter().map(|g| &g.info).collect::<Vec<_>>(),
        "provenance": common::report::Provenance::now(),
        "ranks": gpus.len(),
        "op": "fp32 sum, out of place",
        "nccl_version": crate::nccl::version(),
        "nccl_nvls_enable": std::env::var("NCCL_NVLS_ENABLE").ok(),
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

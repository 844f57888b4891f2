//! `tuner memory` and `tuner autobatch`: where memory goes and which batch fits, checked with
//! real training steps (forward, backward and the optimizer step) on the GPU.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Serialize;

use common::error::CudaContext as _;
use common::gpu::{DeviceInfo, Gpu};
use common::report::Provenance;
use common::table::{cell, Table};
use common::Result;

use crate::config::{Settings, MAX_BATCH};
use crate::memory::{self, Estimate};
use crate::recommend::{self, BatchStatus, PeakModel, Tiers};
use crate::search::{self, Accumulation, Found, Granularity, Probe};
use crate::trial::{Peak, Session};
use crate::writeback::{self, TeamEntry};

/// Sizes in MB, or in bytes below 100 kB (a small model's parameters would read 0.0 MB).
fn mb(b: u64) -> String {
    if b < 100_000 {
        format!("{b} B")
    } else {
        format!("{:.1} MB", b as f64 / 1e6)
    }
}

/// One GPU of the machine.
#[derive(Debug, Clone, Serialize)]
pub struct GpuSummary {
    pub ordinal: usize,
    pub name: String,
    pub total_bytes: u64,
    /// From NVML where present (any process's use), else only for the opened device.
    pub used_bytes: Option<u64>,
    pub free_bytes: Option<u64>,
    pub compute_capability: (i32, i32),
    pub sm_count: u32,
}

/// Every GPU the driver sees (CUDA ordinals), with NVML's memory readings where present.
pub fn list_gpus(opened: &Gpu) -> Result<Vec<GpuSummary>> {
    use cudarc::driver::result::device;
    use cudarc::driver::sys::CUdevice_attribute as Attr;
    let count = device::get_count().cuda("counting devices")? as usize;
    let nvml = open_nvml();
    let mut out = Vec::with_capacity(count);
    for i in 0..count {
        let dev = device::get(i as i32).cuda("opening a device")?;
        // SAFETY: a valid device handle; plain attribute reads.
        let (total, major, minor, sms) = unsafe {
            (
                device::total_mem(dev).cuda("reading total memory")? as u64,
                device::get_attribute(dev, Attr::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)
                    .cuda("reading an attribute")?,
                device::get_attribute(dev, Attr::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)
                    .cuda("reading an attribute")?,
                device::get_attribute(dev, Attr::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)
                    .cuda("reading an attribute")?,
            )
        };
        let name = device::get_name(dev).cuda("reading a device name")?;
        let (mut used, mut free) = (None, None);
        if i == opened.info.ordinal {
            let (f, t) = opened.memory()?;
            used = Some(t - f);
            free = Some(f);
        }
        if let Some(n) = &nvml {
            if let Ok(m) = n.device_by_index(i as u32).and_then(|d| d.memory_info()) {
                used = Some(m.used);
                free = Some(m.free);
            }
        }
        out.push(GpuSummary {
            ordinal: i,
            name,
            total_bytes: total,
            used_bytes: used,
            free_bytes: free,
            compute_capability: (major, minor),
            sm_count: sms as u32,
        });
    }
    Ok(out)
}

fn open_nvml() -> Option<nvml_wrapper::Nvml> {
    nvml_wrapper::Nvml::builder()
        .lib_path(std::ffi::OsStr::new("libnvidia-ml.so.1"))
        .init()
        .or_else(|_| nvml_wrapper::Nvml::init())
        .ok()
}

/// `--watch`: memory in use and utilization of GPU `index` (NVML's numbering) every `period`,
/// for `seconds` (forever when None). Needs no CUDA context, so it disturbs nothing.
pub fn watch(index: u32, period: Duration, seconds: Option<f64>) -> Result<()> {
    let nvml = open_nvml().ok_or_else(|| {
        common::Error::invalid("--watch needs NVML (libnvidia-ml.so.1, part of the NVIDIA driver)")
    })?;
    let dev = nvml
        .device_by_index(index)
        .map_err(|e| common::Error::invalid(format!("NVML has no GPU {index}: {e}")))?;
    let name = dev.name().unwrap_or_else(|_| "GPU".into());
    let start = Instant::now();
    loop {
        let m = dev
            .memory_info()
            .map_err(|e| common::Error::invalid(format!("NVML memory: {e}")))?;
        let u = dev
            .utilization_rates()
            .map_err(|e| common::Error::invalid(format!("NVML utilization: {e}")))?;
        println!(
            "{:>7.1} s  GPU {index} {name}: {:.2} GB used of {:.2} GB ({:.0}%), utilization {}%",
            start.elapsed().as_secs_f64(),
            m.used as f64 / 1e9,
            m.total as f64 / 1e9,
            100.0 * m.used as f64 / m.total.max(1) as f64,
            u.gpu
        );
        if seconds.is_some_and(|s| start.elapsed().as_secs_f64() + period.as_secs_f64() > s) {
            return Ok(());
        }
        std::thread::sleep(period);
    }
}

/// One batch size of `tuner memory`: the estimate and what real steps used.
#[derive(Debug, Clone, Serialize)]
pub struct BatchCheck {
    pub estimate: Estimate,
    pub share_of_device: f64,
    /// Peaks of 3 real steps at the batch; None when they ran out of memory.
    pub measured: Option<Peak>,
    /// (estimate - measured in use) / measured in use.
    pub estimate_error: Option<f64>,
}

#[derive(Debug, Serialize)]
pub struct MemoryReport {
    pub schema: &'static str,
    pub device: DeviceInfo,
    pub provenance: Provenance,
    pub gpus: Vec<GpuSummary>,
    pub settings: Settings,
    pub amp: bool,
    pub batches: Vec<BatchCheck>,
    /// Free device memory once the CUDA context, the kernels and the cuBLAS handle are set up
    /// (what the batch can have).
    pub available_bytes: u64,
    /// What setting up took from the device before any batch (context excluded: it exists
    /// before the first reading).
    pub setup_bytes: u64,
    pub margin: f64,
    pub tiers: Tiers,
    /// The largest batch the estimate allows in the available memory (not snapped).
    pub estimate_limit: usize,
    /// The estimated maximum as first computed (snapped), and the real-step checks that
    /// settled it.
    pub estimated_maximum: usize,
    pub maximum_checks: Vec<(usize, bool)>,
    /// The configured batch (the config's batch_size, else the first batch asked for).
    pub configured_batch: usize,
    pub batch_status: BatchStatus,
}

/// How many times the estimated maximum is stepped down when a real step disagrees.
const MAX_CHECKS: usize = 8;

/// Real steps per measured batch.
pub const MEASURED_STEPS: usize = 3;

/// `tuner memory` for one or more batch sizes.
pub fn memory_report(
    gpu: &Gpu,
    settings: Settings,
    batches: &[usize],
    granularity: Granularity,
    margin: Option<f64>,
) -> Result<MemoryReport> {
    let amp = single_amp(&settings)?;
    if batches.is_empty() {
        return Err(common::Error::invalid("no batch size to measure"));
    }
    let before_setup = gpu.memory()?.0;
    let gpus = list_gpus(gpu)?;
    let data = Arc::new(crate::sweep::load_data(&settings)?);
    let mut session = Session::new(gpu, settings.clone(), data)?;
    session.clean_up()?;
    let (available, total) = gpu.memory()?;
    let mut checks_of_batches = Vec::with_capacity(batches.len());
    for &batch in batches {
        let estimate = memory::estimate(&settings.arch, &settings.optimizer, amp, batch);
        let measured = session.fits(batch, amp, MEASURED_STEPS, 1)?;
        checks_of_batches.push(BatchCheck {
            share_of_device: estimate.total as f64 / total as f64,
            estimate_error: measured
                .map(|m| (estimate.total as f64 - m.used as f64) / m.used as f64),
            estimate,
            measured,
        });
    }
    let estimate_limit = memory::max_batch_for(
        &settings.arch,
        &settings.optimizer,
        amp,
        available,
        MAX_BATCH as usize,
    );
    let mut max = recommend::snap_down(granularity, estimate_limit);
    let estimated_maximum = max;
    let mut checks = Vec::new();
    while max > 0 && checks.len() < MAX_CHECKS {
        let ok = session.fits(max, amp, 2, 1)?.is_some();
        checks.push((max, ok));
        if ok {
            break;
        }
        max = recommend::snap_down(granularity, max - 1);
    }
    if checks.last().is_some_and(|c| !c.1) {
        max = 0;
    }
    let margin = margin.unwrap_or_else(|| recommend::margin_for(total));
    let peak =
        |b: usize| memory::estimate(&settings.arch, &settings.optimizer, amp, b).total as f64;
    let tiers = recommend::tiers(
        max,
        granularity,
        margin,
        PeakModel::Bytes {
            peak: &peak,
            limit: available,
        },
    );
    let configured = settings.batch_size.unwrap_or(batches[0]);
    Ok(MemoryReport {
        schema: "tuner-memory/3",
        device: gpu.info.clone(),
        provenance: Provenance::now(),
        gpus,
        amp,
        batches: checks_of_batches,
        available_bytes: available,
        setup_bytes: before_setup.saturating_sub(available),
        margin,
        estimate_limit,
        estimated_maximum,
        maximum_checks: checks,
        configured_batch: configured,
        batch_status: recommend::status(configured, &tiers),
        tiers,
        settings,
    })
}

fn single_amp(s: &Settings) -> Result<bool> {
    match s.amp.as_slice() {
        [one] => Ok(*one),
        _ => Err(common::Error::invalid(
            "choose one precision here: --amp on or --amp off",
        )),
    }
}

/// One column per batch size: where its memory goes, the estimate, what real steps used.
fn batch_table(r: &MemoryReport) -> Table {
    let mut t = Table::new().left("batch");
    for c in &r.batches {
        t = t.right(c.estimate.batch.to_string());
    }
    let mut add = |name: &str, value: &dyn Fn(&BatchCheck) -> String| {
        let mut row = vec![name.to_string()];
        row.extend(r.batches.iter().map(value));
        t.row(row);
    };
    add("inputs (2 slots)", &|c| mb(c.estimate.batch_memory.inputs));
    add("activations saved for backward", &|c| {
        mb(c.estimate.batch_memory.saved_activations)
    });
    add("transient: activation gradients, losses, bias sums", &|c| {
        mb(c.estimate.batch_memory.transient)
    });
    add("bf16 activation copies", &|c| {
        mb(c.estimate.batch_memory.amp_copies)
    });
    add("cuBLAS workspace", &|c| mb(c.estimate.workspace));
    add("model", &|c| mb(c.estimate.model.total()));
    add("**estimated total**", &|c| {
        format!(
            "{} ({:.2}% of the device)",
            mb(c.estimate.total),
            100.0 * c.share_of_device
        )
    });
    add(
        &format!("measured peak in use ({MEASURED_STEPS} real steps)"),
        &|c| match c.measured {
            Some(p) => mb(p.used),
            None => "out of memory".into(),
        },
    );
    add("estimate error", &|c| {
        cell(c.estimate_error, |e| format!("{:+.3}%", 100.0 * e))
    });
    add("measured peak taken from the device", &|c| {
        cell(c.measured.and_then(|p| p.reserved), mb)
    });
    t
}

pub fn render_memory(r: &MemoryReport) -> String {
    let mut o = String::new();
    let _ = writeln!(
        o,
        "## tuner memory: {} ({})\n",
        crate::sweep::model_label(&r.settings),
        r.settings.optimizer.name()
    );
    let _ = writeln!(o, "GPUs: {}", r.gpus.len());
    for g in &r.gpus {
        let _ = writeln!(
            o,
            "- GPU {}: {}, {:.1} GB total, {} used, {} free, compute capability {}.{}, {} SMs",
            g.ordinal,
            g.name,
            g.total_bytes as f64 / 1e9,
            g.used_bytes.map(mb).unwrap_or_else(|| "?".into()),
            g.free_bytes.map(mb).unwrap_or_else(|| "?".into()),
            g.compute_capability.0,
            g.compute_capability.1,
            g.sm_count
        );
    }
    let Some(first) = r.batches.first() else {
        return o;
    };
    let m = &first.estimate.model;
    let _ = writeln!(
        o,
        "\nmodel ({} parameters, {}):",
        r.settings.arch.param_count(),
        if r.amp {
            "AMP: fp32 masters + bf16 copy"
        } else {
            "fp32"
        }
    );
    let mut parts = Table::new().left("part").right("bytes");
    for (name, v) in [
        ("parameters", m.parameters),
        ("gradients", m.gradients),
        ("optimizer state", m.optimizer_state),
        ("bf16 weight copy", m.amp_weights),
        ("model total", m.total()),
    ] {
        parts.row(vec![name.into(), mb(v)]);
    }
    o.push_str(&parts.markdown());
    o.push('\n');
    o.push_str(&batch_table(r).markdown());
    o.push('\n');
    let _ = writeln!(
        o,
        "setting up (kernels, cuBLAS handle) took {} outside the pool",
        mb(r.setup_bytes)
    );
    let _ = writeln!(
        o,
        "batch sizes ({} free after setup): {}; the maximum from the estimate (it allows {}, {} at the granularity), checked by real steps: {:?}",
        mb(r.available_bytes),
        recommend::describe(&r.tiers, r.margin),
        r.estimate_limit,
        r.estimated_maximum,
        r.maximum_checks,
    );
    let _ = writeln!(
        o,
        "configured batch {}: {:?}",
        r.configured_batch, r.batch_status
    );
    o
}

#[derive(Debug, Serialize)]
pub struct AutobatchReport {
    pub schema: &'static str,
    pub device: DeviceInfo,
    pub provenance: Provenance,
    pub settings: Settings,
    pub amp: bool,
    pub start: usize,
    pub granularity: Granularity,
    pub found: Found,
    pub trial_bound: usize,
    /// The largest batch the memory estimate allows in the free memory at the start (not
    /// snapped): the model's prediction of what the search found by real steps.
    pub estimate_limit: usize,
    pub margin: f64,
    pub tiers: Tiers,
    /// The split written (or that would be) and whether it trained 100 optimizer steps.
    pub check: SplitCheck,
    /// maximum + one multiple (or the next power of two) ran out of memory.
    pub next_fails: bool,
    pub accumulation: Option<Accumulation>,
    pub free_before_bytes: u64,
    pub free_after_bytes: u64,
    pub search_wall_s: f64,
    pub written_config: Option<PathBuf>,
    pub backup: Option<PathBuf>,
    /// The team entry, and where it was written (None with --test-only or without --team).
    pub team_entry: TeamEntryReport,
    pub team_file: Option<PathBuf>,
}

/// The batch and accumulation written back, checked by training them.
#[derive(Debug, Clone, Serialize)]
pub struct SplitCheck {
    pub batch_size: usize,
    pub accumulation_steps: usize,
    pub steps: usize,
    pub trained: bool,
}

/// Optimizer steps the split written back trains before it is trusted.
pub const CHECK_STEPS: usize = 100;

/// A team entry as the report shows it.
#[derive(Debug, Clone, Serialize)]
pub struct TeamEntryReport {
    pub gpu: String,
    pub model: String,
    pub batch_size: usize,
    pub accumulation_steps: usize,
    pub precision: String,
}

impl From<&TeamEntry> for TeamEntryReport {
    fn from(e: &TeamEntry) -> TeamEntryReport {
        TeamEntryReport {
            gpu: e.gpu.clone(),
            model: e.model.clone(),
            batch_size: e.batch_size,
            accumulation_steps: e.accumulation_steps,
            precision: e.precision.clone(),
        }
    }
}

pub struct AutobatchOptions {
    pub start: usize,
    pub granularity: Granularity,
    pub margin: Option<f64>,
    pub effective_batch: Option<usize>,
    pub config: Option<PathBuf>,
    pub test_only: bool,
    pub team: Option<PathBuf>,
    /// The team entry's model (default: the preset or the command).
    pub model_name: Option<String>,
    /// One line per trial on stderr.
    pub progress: bool,
}

/// Check what can be checked before any GPU time: where the answer goes.
pub fn check_autobatch_options(o: &AutobatchOptions) -> std::result::Result<(), String> {
    if o.start == 0 {
        return Err("--start must be at least 1".into());
    }
    if let Granularity::Multiple(0) = o.granularity {
        return Err("--multiple-of must be at least 1".into());
    }
    if !o.test_only {
        match &o.config {
            Some(path) => writeback::check_writable(path)?,
            None => {
                return Err(
                    "nothing to write the batch size into: give --config FILE, or --test-only"
                        .into(),
                )
            }
        }
    }
    Ok(())
}

/// The split to write: the one that keeps a target effective batch, else the recommended batch
/// alone.
pub fn split_to_write(accumulation: &Option<Accumulation>, recommended: usize) -> (usize, usize) {
    match accumulation {
        Some(a) => (a.batch, a.steps),
        None => (recommended, 1),
    }
}

/// What the finder writes: the config (after a backup) and the team entry, unless
/// `--test-only`, which leaves every file as it was.
pub struct Written {
    pub config: Option<PathBuf>,
    pub backup: Option<PathBuf>,
    pub team: Option<PathBuf>,
}

pub fn write_answer(
    o: &AutobatchOptions,
    batch: usize,
    accumulation_steps: usize,
    entry: &TeamEntry,
) -> std::result::Result<Written, String> {
    let mut w = Written {
        config: None,
        backup: None,
        team: None,
    };
    if o.test_only {
        return Ok(w);
    }
    if let Some(path) = &o.config {
        w.backup = Some(writeback::write_config(path, batch, accumulation_steps)?);
        w.config = Some(path.clone());
    }
    if let Some(team) = &o.team {
        writeback::write_team(team, entry)?;
        w.team = Some(team.clone());
    }
    Ok(w)
}

/// The tuner's own model as a team entry names it: the preset or the layout, and the optimizer.
pub fn mlp_model_name(s: &Settings) -> String {
    format!("{}, {}", crate::sweep::model_label(s), s.optimizer.name())
}

/// `tuner autobatch`.
pub fn autobatch(gpu: &Gpu, settings: Settings, o: &AutobatchOptions) -> Result<AutobatchReport> {
    check_autobatch_options(o).map_err(common::Error::invalid)?;
    let amp = single_amp(&settings)?;
    let data = Arc::new(crate::sweep::load_data(&settings)?);
    let mut session = Session::new(gpu, settings.clone(), data)?;
    session.clean_up()?;
    let (free_before, total) = gpu.memory()?;
    let started = Instant::now();
    let mut trial = 0;
    let found = search::find(o.start, o.granularity, MAX_BATCH as usize, |b| {
        let t = Instant::now();
        let peak = session.fits(b, amp, 2, 1)?;
        trial += 1;
        if o.progress {
            eprintln!(
                "trial {trial}: batch {b} {} ({:.2} s)",
                if peak.is_some() {
                    "fits"
                } else {
                    "out of memory"
                },
                t.elapsed().as_secs_f64()
            );
        }
        Ok::<Probe, common::Error>(Probe {
            fits: peak.is_some(),
            peak_bytes: peak.map(|p| p.used),
            limit_bytes: Some(free_before),
        })
    })?
    .map_err(common::Error::invalid)?;
    let search_wall_s = started.elapsed().as_secs_f64();
    // The next candidate: one multiple more, or the next power of two.
    let step = o.granularity.multiple().unwrap_or(found.maximum);
    let next_fails = if found.next_failed {
        true
    } else {
        session.fits(found.maximum + step, amp, 2, 1)?.is_none()
    };
    let margin = o.margin.unwrap_or_else(|| recommend::margin_for(total));
    let estimate = |b: usize| memory::estimate(&settings.arch, &settings.optimizer, amp, b);
    let peak = |b: usize| estimate(b).total as f64;
    let tiers = recommend::tiers(
        found.maximum,
        o.granularity,
        margin,
        PeakModel::Bytes {
            peak: &peak,
            limit: free_before,
        },
    );
    let target = o
        .effective_batch
        .or(settings.batch_size.map(|b| b * settings.accumulation_steps));
    let adam = matches!(settings.optimizer, mlp::Optimizer::AdamW { .. });
    let accumulation = target.map(|t| search::accumulation(t, tiers.recommended.max(1), adam));
    let (batch_to_write, accum_steps) = split_to_write(&accumulation, tiers.recommended.max(1));
    // The split that is written trains, accumulating as written.
    let trained = session
        .fits(batch_to_write, amp, CHECK_STEPS, accum_steps)?
        .is_some();
    session.clean_up()?;
    let free_after = gpu.memory()?.0;
    let entry = TeamEntry {
        gpu: gpu.info.name.clone(),
        model: o
            .model_name
            .clone()
            .unwrap_or_else(|| mlp_model_name(&settings)),
        batch_size: batch_to_write,
        accumulation_steps: accum_steps,
        precision: if amp { "bf16".into() } else { "fp32".into() },
    };
    let written =
        write_answer(o, batch_to_write, accum_steps, &entry).map_err(common::Error::invalid)?;
    Ok(AutobatchReport {
        schema: "tuner-autobatch/2",
        device: gpu.info.clone(),
        provenance: Provenance::now(),
        trial_bound: search::trial_bound(found.maximum.max(1), o.start, step.max(1)),
        estimate_limit: memory::max_batch_for(
            &settings.arch,
            &settings.optimizer,
            amp,
            free_before,
            MAX_BATCH as usize,
        ),
        amp,
        start: o.start,
        granularity: o.granularity,
        found,
        margin,
        tiers,
        check: SplitCheck {
            batch_size: batch_to_write,
            accumulation_steps: accum_steps,
            steps: CHECK_STEPS,
            trained,
        },
        next_fails,
        accumulation,
        free_before_bytes: free_before,
        free_after_bytes: free_after,
        search_wall_s,
        written_config: written.config,
        backup: written.backup,
        team_entry: TeamEntryReport::from(&entry),
        team_file: written.team,
        settings,
    })
}

/// The lines every autobatch report ends with: the split and its check, what was written.
pub fn render_answer(
    o: &mut String,
    check: &SplitCheck,
    accumulation: &Option<Accumulation>,
    written: (&Option<PathBuf>, &Option<PathBuf>, &Option<PathBuf>),
    entry: &TeamEntryReport,
) {
    if let Some(a) = accumulation {
        let _ = writeln!(o, "gradient accumulation: {}", a.advice);
    }
    let _ = writeln!(
        o,
        "batch {} x {} accumulation step(s) trained {} optimizer steps: {}",
        check.batch_size,
        check.accumulation_steps,
        check.steps,
        if check.trained { "yes" } else { "NO" }
    );
    let (config, backup, team) = written;
    match (config, backup) {
        (Some(c), Some(b)) => {
            let _ = writeln!(
                o,
                "wrote batch_size and accumulation_steps into {} (backup {})",
                c.display(),
                b.display()
            );
        }
        _ => {
            let _ = writeln!(
                o,
                "test only: nothing written (config and team file left as they are)"
            );
        }
    }
    let what = format!(
        "[gpus.\"{}\".\"{}\"] batch_size = {}, accumulation_steps = {}, precision = \"{}\"",
        entry.gpu, entry.model, entry.batch_size, entry.accumulation_steps, entry.precision
    );
    match team {
        Some(t) => {
            let _ = writeln!(o, "team settings updated: {}: {what}", t.display());
        }
        None => {
            let _ = writeln!(o, "team entry (not written): {what}");
        }
    }
}

pub fn render_autobatch(r: &AutobatchReport) -> String {
    let mut o = String::new();
    let _ = writeln!(
        o,
        "## tuner autobatch: {} on {}\n",
        crate::sweep::model_label(&r.settings),
        r.device.name
    );
    let _ = writeln!(
        o,
        "search from {} ({:?}): {} trials (bound {}), {:.1} s: {:?}",
        r.start,
        r.granularity,
        r.found.trials.len(),
        r.trial_bound,
        r.search_wall_s,
        r.found.trials
    );
    let _ = writeln!(
        o,
        "{} (next size fails: {})",
        recommend::describe(&r.tiers, r.margin),
        r.next_fails
    );
    let predicted = recommend::snap_down(r.granularity, r.estimate_limit);
    let _ = writeln!(
        o,
        "the memory estimate allows {} in the free memory, {} at this granularity ({:+.3}% from the maximum found)",
        r.estimate_limit,
        predicted,
        100.0 * (predicted as f64 - r.found.maximum as f64) / r.found.maximum.max(1) as f64
    );
    let _ = writeln!(
        o,
        "free memory before {} and after {} ({:+.3}%)",
        mb(r.free_before_bytes),
        mb(r.free_after_bytes),
        100.0 * (r.free_after_bytes as f64 - r.free_before_bytes as f64)
            / r.free_before_bytes.max(1) as f64
    );
    render_answer(
        &mut o,
        &r.check,
        &r.accumulation,
        (&r.written_config, &r.backup, &r.team_file),
        &r.team_entry,
    );
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts() -> AutobatchOptions {
        AutobatchOptions {
            start: 8,
            granularity: Granularity::Multiple(8),
            margin: None,
            effective_batch: None,
            config: None,
            test_only: true,
            team: None,
            model_name: None,
            progress: false,
        }
    }

    #[test]
    fn the_memory_report_puts_each_batch_in_a_column_with_its_error() {
        let settings = crate::config::Overrides::default().resolve().unwrap();
        let est = |b| memory::estimate(&settings.arch, &settings.optimizer, false, b);
        let (a, b) = (est(256), est(1 << 20));
        let tiers = recommend::tiers(4096, Granularity::Pow2, 0.05, PeakModel::Proportional);
        let r = MemoryReport {
            schema: "tuner-memory/3",
            device: common::testing::h200_info(),
            provenance: Provenance::now(),
            gpus: vec![],
            amp: false,
            batches: vec![
                BatchCheck {
                    estimate: a,
                    share_of_device: a.total as f64 / 150e9,
                    measured: Some(Peak {
                        used: a.total + a.total / 50,
                        reserved: Some(40 << 20),
                    }),
                    estimate_error: Some(-1.0 / 51.0),
                },
                BatchCheck {
                    estimate: b,
                    share_of_device: b.total as f64 / 150e9,
                    measured: None,
                    estimate_error: None,
                },
            ],
            available_bytes: 100_000_000,
            setup_bytes: 8 << 20,
            margin: 0.05,
            tiers: tiers.clone(),
            estimate_limit: 4500,
            estimated_maximum: 4096,
            maximum_checks: vec![(4096, true)],
            configured_batch: 256,
            batch_status: recommend::status(256, &tiers),
            settings,
        };
        let text = render_memory(&r);
        assert!(text.contains("| batch | 256 | 1048576 |"), "{text}");
        let error_row = text
            .lines()
            .find(|l| l.starts_with("| estimate error"))
            .unwrap();
        assert_eq!(error_row, "| estimate error | -1.961% | - |");
        let measured = text
            .lines()
            .find(|l| l.starts_with("| measured peak in use"))
            .unwrap();
        assert!(measured.ends_with("| out of memory |"), "{measured}");
        assert!(text.contains("| 41.9 MB |"), "{text}");
        assert!(text.contains("configured batch 256:"), "{text}");
        assert!(text.contains("| parameters | 19304 B |"), "{text}");
    }

    #[test]
    fn the_autobatch_report_compares_the_estimate_at_the_granularity() {
        let report = |granularity, maximum, estimate_limit| AutobatchReport {
            schema: "tuner-autobatch/1",
            device: common::testing::h200_info(),
            provenance: Provenance::now(),
            settings: crate::config::Overrides::default().resolve().unwrap(),
            amp: false,
            start: 8,
            granularity,
            found: Found {
                maximum,
                trials: vec![(8, true), (16, false)],
                next_failed: true,
            },
            trial_bound: 3,
            estimate_limit,
            margin: 0.05,
            tiers: recommend::tiers(maximum, Granularity::Pow2, 0.05, PeakModel::Proportional),
            check: SplitCheck {
                batch_size: 1024,
                accumulation_steps: 1,
                steps: CHECK_STEPS,
                trained: true,
            },
            next_fails: true,
            accumulation: Some(search::accumulation(1024, 4096, false)),
            free_before_bytes: 1000,
            free_after_bytes: 990,
            search_wall_s: 1.0,
            written_config: None,
            backup: None,
            team_entry: TeamEntryReport {
                gpu: "NVIDIA H200".into(),
                model: "small preset".into(),
                batch_size: 1024,
                accumulation_steps: 1,
                precision: "fp32".into(),
            },
            team_file: None,
        };
        // Powers of two: 11.4M allows 8M, which is what the search found.
        let text = render_autobatch(&report(Granularity::Pow2, 8 << 20, 11_392_699));
        assert!(
            text.contains(
                "allows 11392699 in the free memory, 8388608 at this granularity (+0.000%"
            ),
            "{text}"
        );
        let text = render_autobatch(&report(Granularity::Multiple(8), 1000, 1011));
        assert!(text.contains("1008 at this granularity (+0.800%"), "{text}");
        assert!(
            text.contains("free memory before 1000 B and after 990 B (-1.000%)"),
            "{text}"
        );
        assert!(
            text.contains("1 step(s) of 1024 keep the effective batch"),
            "{text}"
        );
        assert!(text.contains("test only: nothing written"), "{text}");
    }

    #[test]
    fn bad_autobatch_inputs_are_refused_before_any_gpu_time() {
        assert!(check_autobatch_options(&opts()).is_ok());
        let e = check_autobatch_options(&AutobatchOptions { start: 0, ..opts() }).unwrap_err();
        assert!(e.contains("--start"));
        let e = check_autobatch_options(&AutobatchOptions {
            granularity: Granularity::Multiple(0),
            ..opts()
        })
        .unwrap_err();
        assert!(e.contains("--multiple-of"));
        let e = check_autobatch_options(&AutobatchOptions {
            test_only: false,
            ..opts()
        })
        .unwrap_err();
        assert!(e.contains("--config"));
        let e = check_autobatch_options(&AutobatchOptions {
            test_only: false,
            config: Some("/nonexistent/cfg.toml".into()),
            ..opts()
        })
        .unwrap_err();
        assert!(e.contains("cannot read"), "{e}");
    }

    #[test]
    fn test_only_leaves_the_config_and_the_team_file_alone() {
        let dir = std::env::temp_dir().join(format!("tuner-test-only-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (config, team) = (dir.join("run.toml"), dir.join("team.toml"));
        std::fs::write(&config, "[training]\nbatch_size = 64\n").unwrap();
        let entry = TeamEntry {
            gpu: "NVIDIA H100 80GB HBM3".into(),
            model: "small preset, MLP 256 -> 3 x 16 -> 10, sgd".into(),
            batch_size: 512,
            accumulation_steps: 2,
            precision: "fp32".into(),
        };
        let o = AutobatchOptions {
            config: Some(config.clone()),
            team: Some(team.clone()),
            ..opts()
        };
        let w = write_answer(&o, 512, 2, &entry).unwrap();
        assert!(w.config.is_none() && w.backup.is_none() && w.team.is_none());
        assert_eq!(
            std::fs::read_to_string(&config).unwrap(),
            "[training]\nbatch_size = 64\n"
        );
        assert!(!team.exists() && !dir.join("run.toml.bak").exists());
        // Without --test-only both are written.
        let w = write_answer(
            &AutobatchOptions {
                test_only: false,
                ..o
            },
            512,
            2,
            &entry,
        )
        .unwrap();
        assert_eq!(w.team.as_deref(), Some(team.as_path()));
        assert!(std::fs::read_to_string(&config)
            .unwrap()
            .contains("batch_size = 512"));
        let entries = writeback::read_team_text(&std::fs::read_to_string(&team).unwrap()).unwrap();
        assert_eq!(entries, vec![entry]);
        let _ = std::fs::remove_dir_all(dir);
    }
}

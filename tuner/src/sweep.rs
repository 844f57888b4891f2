//! `tuner sweep`: every configuration of the axes (workers x AMP x pinning), batch sizes in
//! increasing order; a configuration that runs out of memory skips its larger batches. Then the
//! table, the picks, the diagnosis, the JSON and the plot.

use std::io::Write as _;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use serde::Serialize;

use common::gpu::{DeviceInfo, Gpu};
use common::report::{Provenance, Startup};
use common::table::{cell, Table};
use common::Result;

use crate::analysis::{self, Best, Diagnosis, TrialKey, TrialResult, TrialStatus};
use crate::config::Settings;
use crate::data::Dataset;
use crate::trial::Session;

/// The order trials run in.
pub fn plan(s: &Settings) -> Vec<TrialKey> {
    let mut keys = Vec::new();
    for &workers in &s.workers {
        for &amp in &s.amp {
            for &pin in &s.pin {
                for &batch in &s.batch_sizes {
                    keys.push(TrialKey {
                        batch,
                        workers,
                        amp,
                        pin: Some(pin),
                    });
                }
            }
        }
    }
    keys
}

/// Whether a smaller batch of the same configuration already ran out of memory.
pub fn skipped_after_oom(done: &[TrialResult], key: &TrialKey) -> bool {
    done.iter()
        .any(|t| t.status == TrialStatus::Oom && t.key.batch < key.batch && t.key.same_setting(key))
}

/// The step checked against float64 before the sweep, per precision.
#[derive(Debug, Clone, Serialize)]
pub struct StepCheck {
    pub amp: bool,
    pub batch: usize,
    pub gradient_rel_l2: Option<f64>,
    pub loss_abs_error: Option<f64>,
    pub tolerance: f64,
    pub passed: bool,
    pub note: Option<String>,
}

/// Relative L2 error of one step's gradient allowed: fp32 (SGEMM) 1e-4; AMP 5e-3 per Linear
/// layer. Under AMP the reference gets the same bf16-rounded inputs and weights, but every
/// layer's activations and activation gradients are rounded to bf16 on the GPU too (and a ReLU
/// can flip near zero), so the error compounds with depth: measured on an H200, 3.1e-3 for the
/// small preset (4 layers) and 2.8e-2 for the medium one (7 layers).
pub fn gradient_tolerance(amp: bool, layers: usize) -> f64 {
    if amp {
        5e-3 * layers as f64
    } else {
        1e-4
    }
}

#[derive(Debug, Serialize)]
pub struct SweepReport {
    pub schema: &'static str,
    pub device: DeviceInfo,
    pub provenance: Provenance,
    pub settings: Settings,
    pub model_parameters: usize,
    pub flops_per_sample: u64,
    pub device_memory_bytes: u64,
    /// Free device memory once the session was set up: every trial's memory limit.
    pub available_bytes: u64,
    pub timing: String,
    pub step_checks: Vec<StepCheck>,
    pub trials: Vec<TrialResult>,
    pub best: Best,
    pub diagnosis: Vec<Diagnosis>,
    /// Wall time of the trials (sum of their setup, steps and teardown).
    pub trials_wall_s: f64,
    /// Process start to the end of the last trial: what a user waits for.
    pub total_wall_s: f64,
}

pub struct Output {
    pub json: Option<PathBuf>,
    pub plot: Option<PathBuf>,
    pub progress: bool,
    /// The rule's margin (default by the GPU's memory class).
    pub margin: Option<f64>,
}

fn progress(done: usize, total: usize, what: &str) {
    let width = 30;
    let filled = width * done / total.max(1);
    eprint!(
        "\r[{}{}] {done}/{total} {what:<40}",
        "#".repeat(filled),
        ".".repeat(width - filled)
    );
    let _ = std::io::stderr().flush();
}

/// Load the data the settings name (or make the synthetic set).
pub fn load_data(s: &Settings) -> Result<Dataset> {
    match &s.data {
        Some(path) => {
            let d = Dataset::from_file(path, s.labels.as_deref(), s.arch.classes)
                .map_err(common::Error::invalid)?;
            if d.input != s.arch.input {
                return Err(common::Error::invalid(format!(
                    "{}: the data has {} features per sample, the model's input is {}; set --input {}",
                    path.display(),
                    d.input,
                    s.arch.input,
                    d.input
                )));
            }
            Ok(d)
        }
        None => {
            common::gpu::check_host_fits(
                "the synthetic dataset",
                (s.samples as u64) * (s.arch.input as u64 + 1) * 4,
            )?;
            Ok(Dataset::synthetic(
                s.arch.input,
                s.arch.classes,
                s.samples,
                s.seed,
            ))
        }
    }
}

/// Run the sweep and write what was asked for; `startup` is the process's start-up clock (the
/// report's phases and total wall time count from it).
pub fn run(
    gpu: &Gpu,
    settings: Settings,
    out: &Output,
    mut startup: Startup,
) -> Result<(SweepReport, bool)> {
    let data = Arc::new(load_data(&settings)?);
    startup.mark("data ready");
    let mut session = Session::new(gpu, settings.clone(), data)?;
    startup.mark("kernels, cuBLAS and timer ready");

    // Verify the step before timing it.
    let mut checks = Vec::new();
    let check_batch = 64usize.min(session.data.samples());
    for &amp in &settings.amp {
        let cost = settings.arch.flops_per_sample() as f64 * check_batch as f64;
        let tolerance = gradient_tolerance(amp, settings.arch.depth + 1);
        if cost > 2e10 {
            checks.push(StepCheck {
                amp,
                batch: check_batch,
                gradient_rel_l2: None,
                loss_abs_error: None,
                tolerance,
                passed: true,
                note: Some("model too large for the float64 reference; not checked".into()),
            });
            continue;
        }
        let (rel, loss_err) = match session.check_gradient(amp, check_batch, 1) {
            Ok(c) => (c.rel_l2, c.loss_error),
            Err(e) if e.is_out_of_memory() => (f64::NAN, f64::NAN),
            Err(e) => return Err(e),
        };
        checks.push(StepCheck {
            amp,
            batch: check_batch,
            gradient_rel_l2: rel.is_finite().then_some(rel),
            loss_abs_error: loss_err.is_finite().then_some(loss_err),
            tolerance,
            passed: rel <= tolerance,
            note: None,
        });
    }
    let verified = checks.iter().all(|c| c.passed);

    let keys = plan(&settings);
    session.clean_up()?;
    let available = gpu.memory()?.0;
    let started = Instant::now();
    let mut trials: Vec<TrialResult> = Vec::with_capacity(keys.len());
    for (i, key) in keys.iter().enumerate() {
        if out.progress {
            progress(
                i,
                keys.len(),
                &format!("batch {} {}", key.batch, key.line_label()),
            );
        }
        if skipped_after_oom(&trials, key) {
            let est =
                crate::memory::estimate(&settings.arch, &settings.optimizer, key.amp, key.batch)
                    .total;
            trials.push(TrialResult::empty(
                *key,
                TrialStatus::Skipped,
                est,
                Some("a smaller batch of this configuration ran out of memory".into()),
            ));
            continue;
        }
        let mut r = session.run(*key)?;
        r.memory_limit_bytes = Some(available);
        trials.push(r);
    }
    if out.progress {
        progress(keys.len(), keys.len(), "done");
        eprintln!();
    }
    let trials_wall_s = started.elapsed().as_secs_f64();
    let total_wall_s = startup.elapsed_s();
    let device_memory = gpu.info.total_memory_bytes;
    let margin = out
        .margin
        .unwrap_or_else(|| crate::recommend::margin_for(device_memory));
    let best = analysis::best(&trials, margin);
    let diagnosis = analysis::diagnose(&trials, &best);
    let report = SweepReport {
        schema: "tuner-sweep/2",
        device: gpu.info.clone(),
        provenance: {
            let mut p = Provenance::now();
            p.startup_phases = startup.phases().to_vec();
            p
        },
        model_parameters: settings.arch.param_count(),
        flops_per_sample: settings.arch.flops_per_sample(),
        device_memory_bytes: device_memory,
        available_bytes: available,
        timing: "CUDA events on the training stream, per step after warmup; medians with spread; busy = back-to-back device time of a step over the loop's median step".into(),
        settings,
        step_checks: checks,
        trials,
        best,
        diagnosis,
        trials_wall_s,
        total_wall_s,
    };
    if let Some(path) = &out.json {
        common::files::write_json_file(path, &report, "the sweep")?;
    }
    if let Some(stem) = &out.plot {
        let title = format!(
            "tuner sweep on the {}: {} ({} params, {})",
            report.device.name,
            model_label(&report.settings),
            report.model_parameters,
            report.settings.optimizer.name()
        );
        crate::plot::render(&report.trials, &title, stem).map_err(common::Error::invalid)?;
    }
    Ok((report, verified))
}

/// Redraw a sweep's plot from its JSON.
pub fn replot(from: &std::path::Path, stem: &std::path::Path) -> std::result::Result<(), String> {
    let text = std::fs::read_to_string(from)
        .map_err(|e| format!("{}: cannot read: {e}", from.display()))?;
    let doc: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| format!("{}: not JSON: {e}", from.display()))?;
    let trials: Vec<TrialResult> = serde_json::from_value(doc["trials"].clone())
        .map_err(|e| format!("{}: not a tuner sweep result ({e})", from.display()))?;
    if let Some(argv) = doc["command"].as_array() {
        // A sweep of a program.
        let argv: Vec<String> = argv
            .iter()
            .map(|a| a.as_str().unwrap_or("?").to_string())
            .collect();
        let title = format!(
            "tuner sweep of {} on {}",
            crate::external::Program::display(&argv),
            doc["devices"][0]["name"].as_str().unwrap_or("GPU")
        );
        return crate::plot::render(&trials, &title, stem).map(|_| ());
    }
    let settings = &doc["settings"];
    let arch = &settings["arch"];
    let preset = settings["preset"]
        .as_str()
        .map(|p| format!("{p} preset, "))
        .unwrap_or_default();
    let title = format!(
        "tuner sweep on the {}: {preset}MLP {} -> {} x {} -> {} ({} params, {})",
        doc["device"]["name"].as_str().unwrap_or("GPU"),
        arch["input"],
        arch["depth"],
        arch["hidden"],
        arch["classes"],
        doc["model_parameters"],
        settings["optimizer"]["kind"].as_str().unwrap_or("?")
    );
    crate::plot::render(&trials, &title, stem).map(|_| ())
}

pub fn model_label(s: &Settings) -> String {
    let a = s.arch;
    let name = s
        .preset
        .map(|p| format!("{} preset, ", p.name()))
        .unwrap_or_default();
    format!(
        "{name}MLP {} -> {} x {} -> {}",
        a.input, a.depth, a.hidden, a.classes
    )
}

fn ms(s: &Option<common::stats::Summary>) -> String {
    cell(s.as_ref(), |s| format!("{:.3}", s.median))
}

fn pct(v: Option<f64>) -> String {
    cell(v, |v| format!("{:.0}", 100.0 * v))
}

pub fn on_off(v: bool) -> String {
    if v { "on" } else { "off" }.into()
}

/// One row per trial: the phases, throughput, busy share, memory and status; for a program's
/// trials also its own count of samples/s, the peak it reported and the GPU it ran on (columns
/// no trial has are left out).
pub fn trial_table(trials: &[TrialResult]) -> Table {
    let mut t = Table::new()
        .right("batch")
        .right("workers")
        .left("AMP")
        .left("pin")
        .right("data ms")
        .right("fwd ms")
        .right("bwd ms")
        .right("opt ms")
        .right("total ms")
        .right("samples/s")
        .right("vs program %")
        .right("vs clock %")
        .right("GPU busy %")
        .right("NVML %")
        .right("memory GB")
        .right("framework GB")
        .left("status")
        .left("GPU");
    let gb = |b: u64| format!("{:.3}", b as f64 / 1e9);
    for r in trials {
        t.row(vec![
            r.key.batch.to_string(),
            r.key.workers.to_string(),
            on_off(r.key.amp),
            cell(r.key.pin, on_off),
            ms(&r.data_ms),
            ms(&r.forward_ms),
            ms(&r.backward_ms),
            ms(&r.optimizer_ms),
            ms(&r.total_ms),
            cell(r.samples_per_s, |v| format!("{v:.0}")),
            cell(r.program_difference, |d| format!("{:+.2}", 100.0 * d)),
            cell(r.clock_difference, |d| format!("{:+.2}", 100.0 * d)),
            pct(r.busy_fraction),
            cell(r.nvml_util_pct, |v| format!("{v:.0}")),
            cell(r.peak_bytes.filter(|_| r.status == TrialStatus::Ok), gb),
            cell(
                r.framework_peak_bytes
                    .filter(|_| r.status == TrialStatus::Ok),
                gb,
            ),
            r.status.label().into(),
            cell(r.device.as_ref(), |d| d.clone()),
        ]);
    }
    t.drop_empty(&["pin", "vs program %", "vs clock %", "framework GB", "GPU"]);
    t
}

/// The picks and the diagnosis, as both modes print them.
pub fn render_conclusions(best: &analysis::Best, diagnosis: &[Diagnosis]) -> String {
    let mut o = String::new();
    let pick = |name: &str, p: &Option<analysis::Pick>| match p {
        Some(p) => format!(
            "- {name}: batch {}, {}: {}\n",
            p.key.batch,
            p.key.line_label(),
            p.why
        ),
        None => format!("- {name}: none (no trial fits)\n"),
    };
    o.push_str(&pick("highest throughput", &best.highest_throughput));
    o.push_str(&pick("best efficiency", &best.best_efficiency));
    o.push_str(&pick("recommended", &best.recommended));
    o.push('\n');
    for d in diagnosis {
        o.push_str(&format!("diagnosis: {}\n", d.message));
    }
    o
}

/// The summary table (markdown) and the conclusions, as printed on stdout.
pub fn render_text(r: &SweepReport) -> String {
    let mut o = String::new();
    o.push_str(&format!(
        "## tuner sweep: {} on {} ({} SMs, {:.0} GB)\n\n",
        model_label(&r.settings),
        r.device.name,
        r.device.sm_count,
        r.device_memory_bytes as f64 / 1e9
    ));
    o.push_str(&format!(
        "optimizer {}, lr {}, {} steps after {} warmup per trial. Times: {}.\n\n",
        r.settings.optimizer.name(),
        r.settings.lr,
        r.settings.steps,
        r.settings.warmup_steps,
        r.timing
    ));
    for c in &r.step_checks {
        o.push_str(&format!(
            "step check ({}): gradient rel. L2 {} vs float64 (tolerance {:.0e}) {}\n",
            if c.amp { "AMP bf16" } else { "fp32" },
            c.gradient_rel_l2
                .map(|v| format!("{v:.2e}"))
                .unwrap_or_else(|| "-".into()),
            c.tolerance,
            if c.passed { "OK" } else { "FAILED" }
        ));
    }
    o.push('\n');
    o.push_str(&trial_table(&r.trials).markdown());
    o.push('\n');
    o.push_str(&render_conclusions(&r.best, &r.diagnosis));
    o.push_str(&format!(
        "\nsweep: {} trials in {:.1} s ({:.1} s from process start)\n",
        r.trials.len(),
        r.trials_wall_s,
        r.total_wall_s
    ));
    o
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Overrides;

    #[test]
    fn plan_covers_every_axis_in_order() {
        let s = Overrides {
            batch_sizes: Some(vec![8, 2]),
            workers: Some(vec![0, 4]),
            amp: Some(crate::config::Switch::Both),
            ..Default::default()
        }
        .resolve()
        .unwrap();
        let p = plan(&s);
        assert_eq!(p.len(), 8);
        assert_eq!((p[0].batch, p[0].workers, p[0].amp), (2, 0, false));
        assert_eq!(p[1].batch, 8);
        assert!(p[2].amp);
        assert_eq!(p[4].workers, 4);
    }

    #[test]
    fn the_trial_table_has_a_row_per_trial() {
        let key = TrialKey {
            batch: 64,
            workers: 4,
            amp: true,
            pin: Some(false),
        };
        let text = trial_table(&[TrialResult::empty(key, TrialStatus::Oom, 0, None)]).markdown();
        let lines: Vec<&str> = text.lines().collect();
        assert!(
            lines[0].starts_with("| batch | workers | AMP | pin | data ms |"),
            "{text}"
        );
        assert_eq!(
            lines[2],
            "| 64 | 4 | on | off | - | - | - | - | - | - | - | - | - | OOM |"
        );
    }

    #[test]
    fn larger_batches_of_an_oom_configuration_are_skipped_only() {
        let k = |batch, amp| TrialKey {
            batch,
            workers: 4,
            amp,
            pin: Some(true),
        };
        let done = vec![TrialResult::empty(k(64, false), TrialStatus::Oom, 0, None)];
        assert!(skipped_after_oom(&done, &k(128, false)));
        assert!(!skipped_after_oom(&done, &k(32, false)));
        assert!(
            !skipped_after_oom(&done, &k(128, true)),
            "another configuration goes on"
        );
    }
}

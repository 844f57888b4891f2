//! `tuner sweep -- COMMAND`: every AMP setting x worker count x batch size, batches ascending,
//! over the GPUs from one queue; a setting that runs out of memory skips its larger batches.
//! The report: a row per trial (the program's per-phase step times, samples/s, how busy the GPU
//! was by the program's figure and by NVML, memory), the picks (highest throughput, best
//! efficiency, recommended), a diagnosis that states only what was measured, and the plot.

use std::fmt::Write as _;
use std::path::Path;

use serde::Serialize;

use common::stats::Summary;
use common::table::{cell, Columns, Table};
use common::{Error, Result};

use crate::analysis::{self, metric_text, names_in, Best, Diagnosis, Pick, PickRule};
use crate::classify::Status;
use crate::gpu::cpu_list;

use crate::protocol::{Measured, ThroughputSource};
use crate::run::Ran;
use crate::trial::TrialResult;

pub const SCHEMA: &str = "tuner-sweep/2";

/// How the tuner's samples/s compare with another count of the same trials.
#[derive(Debug, Clone, Serialize)]
pub struct Agreement {
    pub trials_compared: usize,
    /// The largest |ours / theirs - 1|, and the batch it was at.
    pub worst_difference: f64,
    pub worst_batch: usize,
}

/// The tuner's samples/s against the program's own count (its end line) and against the
/// tuner's own clock (the report's lines as they arrived): the first shows the report was read
/// whole, the second that the reported step times add up to the loop the program ran.
#[derive(Debug, Clone, Serialize)]
pub struct ThroughputCheck {
    pub program: Option<Agreement>,
    pub clock: Option<Agreement>,
}

pub fn throughput_check(trials: &[TrialResult]) -> ThroughputCheck {
    let agreement = |difference: fn(&TrialResult) -> Option<f64>| {
        // The differences are set only for a samples/s from step lines.
        let ok = trials.iter().filter(|r| r.status == Status::Ok);
        let compared: Vec<(&TrialResult, f64)> =
            ok.filter_map(|r| Some((r, difference(r)?))).collect();
        let &(worst, d) = (compared.iter()).max_by(|a, b| a.1.abs().total_cmp(&b.1.abs()))?;
        Some(Agreement {
            trials_compared: compared.len(),
            worst_difference: d,
            worst_batch: worst.params.batch_size,
        })
    };
    ThroughputCheck {
        program: agreement(|r| r.measured.program_difference),
        clock: agreement(|r| r.measured.clock_difference),
    }
}

#[derive(Debug, Serialize)]
pub struct SweepReport {
    pub schema: &'static str,
    #[serde(flatten)]
    pub ran: Ran,
    pub best: Best,
    pub diagnosis: Vec<Diagnosis>,
    pub throughput_check: ThroughputCheck,
    /// `--pick` named a metric no trial reported: the trials are kept, the pick is not made.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pick_error: Option<String>,
}

/// The report of a sweep's trials, wherever they ran: the picks, the diagnosis, the checks and
/// the plot.
pub fn report(ran: Ran, pick: Option<&PickRule>, plot: Option<&Path>) -> Result<SweepReport> {
    let best = analysis::best_by(&ran.trials, ran.margin, pick);
    let diagnosis = analysis::diagnose(&ran.trials, &best);
    let report = SweepReport {
        schema: SCHEMA,
        throughput_check: throughput_check(&ran.trials),
        pick_error: pick.and_then(|rule| rule.unreported(&ran.trials)),
        best,
        diagnosis,
        ran,
    };
    if let Some(stem) = plot {
        let (ran, gpu) = (&report.ran, report.ran.devices.first());
        let gpu = gpu.and_then(|d| d.name.as_deref());
        crate::plot::render(&ran.trials, &ran.command, gpu, stem).map_err(Error::invalid)?;
    }
    Ok(report)
}

/// One row per trial (columns no trial has are left out); figures only of a trial that ended OK.
/// A column per axis of the user's and per metric the program reported; with `pick` (the rule
/// and the margin), an OK trial the rule cannot pick says why in its status.
pub fn trial_table(trials: &[TrialResult], pick: Option<(&PickRule, f64)>) -> Table {
    let axes = names_in(trials, |r| r.params.axes.names().collect());
    let metrics = names_in(trials, |r| r.measured.metrics.names().collect());
    let gb = |b: u64| plotting::format::gigabytes_number(b as f64, 3);
    let fixed = |decimals: usize| move |v: f64| format!("{v:.decimals$}");
    let percent = |v: f64| format!("{:.0}", 100.0 * v);
    let ms = |phase: fn(&Measured) -> &Option<Summary>| {
        if_ok(move |r| Some(phase(&r.measured).as_ref()?.median), fixed(3))
    };
    let signed = |d: fn(&Measured) -> Option<f64>| {
        move |r: &TrialResult| cell(d(&r.measured), |d| format!("{:+.2}", 100.0 * d))
    };
    let mut c = Columns::<TrialResult>::new()
        .right("batch", |r| r.params.batch_size.to_string())
        .right("workers", |r| r.params.workers.to_string())
        .left("AMP", |r| r.params.amp_text());
    for name in &axes {
        c = c.left(*name, move |r| cell(r.params.axes.get(name), String::clone));
    }
    c = c
        .right("data ms", ms(|m| &m.data_ms))
        .right("fwd ms", ms(|m| &m.forward_ms))
        .right("bwd ms", ms(|m| &m.backward_ms))
        .right("opt ms", ms(|m| &m.optimizer_ms))
        .right("step ms", ms(|m| &m.step_ms))
        .right("samples/s", if_ok(|r| r.measured.samples_per_s, fixed(0)));
    for name in &metrics {
        let value = move |r: &TrialResult| r.measured.metrics.get(name).copied();
        c = c.right(*name, if_ok(value, metric_text));
    }
    c = c
        .right_if_any("vs program %", signed(|m| m.program_difference))
        .right_if_any("vs clock %", signed(|m| m.clock_difference))
        .right_if_any("GPU busy %", if_ok(|r| r.measured.gpu_busy, percent))
        .right("NVML util %", if_ok(|r| r.nvml_util_pct, fixed(0)))
        .right("memory GB", |r| cell(r.ok_peak(), gb))
        .right_if_any(
            "framework GB",
            if_ok(|r| r.measured.framework_peak_bytes, gb),
        )
        .right_if_any("bad lines", |r| {
            cell(Some(r.report.bad_lines).filter(|&n| n > 0), |n| {
                n.to_string()
            })
        })
        .left("status", |r| status(r, pick))
        .left_if_any("GPU", |r| {
            cell(Some(&r.device).filter(|d| !d.is_empty()), |d| d.clone())
        })
        .left_if_any("CPU cores", |r| cell(r.cpus.as_deref(), cpu_list));
    c.table(trials)
}

/// A column's cell of a figure shown only for a trial that ended OK.
fn if_ok<'a, T>(
    figure: impl Fn(&TrialResult) -> Option<T> + 'a,
    show: impl Fn(T) -> String + 'a,
) -> impl Fn(&TrialResult) -> String + 'a {
    move |r| cell(figure(r).filter(|_| r.status == Status::Ok), &show)
}

/// A trial's status, and why `pick` cannot pick it where it ended OK.
fn status(r: &TrialResult, pick: Option<(&PickRule, f64)>) -> String {
    let mut status: String = match (r.status, r.measured.source) {
        (Status::Ok, ThroughputSource::WallClock) => "OK: no step lines: samples/s from the process's wall time, start-up included (never picked)".into(),
        (Status::Ok, ThroughputSource::None) => "OK: no measured step lines".into(),
        (s, _) => s.name(),
    };
    let why = (pick.filter(|_| r.status == Status::Ok))
        .and_then(|(rule, margin)| r.not_picked_by(rule, margin));
    status.extend(why.map(|why| format!(": {why} (not picked)")));
    status
}

pub fn render(r: &SweepReport) -> String {
    let mut o = r.ran.header("sweep");
    let s = &r.ran.settings;
    let each = match s.ranks {
        1 => "each trial a process of its own".to_string(),
        n => format!("each trial a group of {n} processes, one per GPU (batch and figures per GPU, rank 0's; memory the rank's that held the most)"),
    };
    let _ = writeln!(
        o,
        "{each}: {} measured steps after {} warmup, accumulation {}, time limit {:.0} s, stall limit {:.0} s. Times: the program's own per step (the protocol), medians; GPU busy: the program's figure; NVML util: NVML's utilization over the measured steps; memory: NVML's reading of its processes, else its own peak.\n",
        s.steps, s.warmup_steps, s.accumulation_steps, s.time_limit_s, s.stall_limit_s
    );
    let rule = r.best.picked_by.as_ref();
    o.push_str(&trial_table(&r.ran.trials, rule.map(|p| (p, r.best.margin))).markdown());
    o.push('\n');
    let pick = |name: &str, p: &Option<Pick>, none: &str| match p {
        Some(p) => format!(
            "- {name}: batch {}, {}: {}\n",
            p.key.batch,
            p.key.line_label(),
            p.why
        ),
        None => format!("- {name}: none ({none})\n"),
    };
    let unpicked = "no trial that fit reported its steps and a peak memory, its own or NVML's";
    o.push_str(&pick(
        "highest throughput",
        &r.best.highest_throughput,
        unpicked,
    ));
    o.push_str(&pick("best efficiency", &r.best.best_efficiency, unpicked));
    let (name, none) = match rule {
        Some(rule) => (
            format!("recommended, by {}", rule.describe()),
            r.pick_error.clone().unwrap_or_else(|| {
                format!(
                    "no trial ended OK, reported {} as a number and leaves the margin free",
                    rule.metric
                )
            }),
        ),
        None => ("recommended".into(), unpicked.into()),
    };
    o.push_str(&pick(&name, &r.best.recommended, &none));
    o.push('\n');
    for d in &r.diagnosis {
        let _ = writeln!(o, "diagnosis: {}", d.message);
    }
    let checks = [
        (
            &r.throughput_check.program,
            "the program's own count",
            "the program reported none (an end line with samples_per_s)",
        ),
        (
            &r.throughput_check.clock,
            "the tuner's clock over the report's lines",
            "no trial had a warmup step to start it from and lines that arrived over time",
        ),
    ];
    for (check, against, none) in checks {
        let _ = match check {
            Some(c) => writeln!(
                o,
                "samples/s against {against}: within {:.2}% on {} trial(s) (largest at batch {})",
                100.0 * c.worst_difference.abs(),
                c.trials_compared,
                c.worst_batch
            ),
            None => writeln!(o, "samples/s against {against}: {none}"),
        };
    }
    o.push_str(&r.ran.footer("sweep"));
    o
}

/// Redraw a sweep's plot from its JSON.
pub fn replot(from: &Path, stem: &Path) -> std::result::Result<(), String> {
    #[derive(serde::Deserialize)]
    struct Saved {
        schema: String,
        command: Vec<String>,
        #[serde(default)]
        devices: Vec<SavedDevice>,
        trials: Vec<TrialResult>,
    }
    /// Of a GPU, its name alone: sweeps written before a field was added still redraw.
    #[derive(serde::Deserialize)]
    struct SavedDevice {
        name: Option<String>,
    }
    let text = std::fs::read_to_string(from).map_err(|e| format!("{}: {e}", from.display()))?;
    let saved: Saved = serde_json::from_str(&text)
        .map_err(|e| format!("{}: not a sweep's JSON ({e})", from.display()))?;
    if saved.schema != SCHEMA {
        return Err(format!(
            "{}: schema '{}' is not {SCHEMA}: run the sweep again with this tuner",
            from.display(),
            saved.schema
        ));
    }
    let gpu = saved.devices.first().and_then(|d| d.name.as_deref());
    crate::plot::render(&saved.trials, &saved.command, gpu, stem).map(|_| ())
}

#[cfg(test)]
mod tests {
    use crate::config::plan;
    use crate::program::{Axis, Params, Precision};

    #[test]
    fn the_grid_is_every_setting_with_batches_ascending() {
        let s = crate::config::Overrides {
            batch_sizes: Some(vec![64, 16, 32]),
            workers: Some(vec![4, 0]),
            amp: Some(crate::config::parse_amp("both").unwrap()),
            accumulation_steps: Some(2),
            steps: Some(7),
            warmup_steps: Some(1),
            ..Default::default()
        }
        .resolve()
        .unwrap();
        let g = plan(&s);
        assert_eq!(g.len(), 12);
        let keys: Vec<(Precision, usize, usize)> =
            g.iter().map(|p| (p.amp, p.workers, p.batch_size)).collect();
        use Precision::{Off, On};
        let first = [(Off, 0, 16), (Off, 0, 32), (Off, 0, 64), (Off, 4, 16)];
        assert_eq!(keys[..4], first);
        assert_eq!(keys[11], (On, 4, 64));
        assert!(g
            .iter()
            .all(|p| (p.accumulation, p.steps, p.warmup_steps) == (2, 7, 1)));
    }

    #[test]
    fn the_user_s_axes_multiply_the_grid_inside_each_setting() {
        let mut s = crate::config::Overrides {
            batch_sizes: Some(vec![16, 8]),
            ..Default::default()
        }
        .resolve()
        .unwrap();
        s.axes = vec![
            Axis::parse("lr=0.1,0.01,0.001").unwrap(),
            Axis::parse("depth=18,34").unwrap(),
        ];
        let g = plan(&s);
        assert_eq!(g.len(), 2 * 3 * 2);
        let shown: Vec<String> = g.iter().take(4).map(Params::describe).collect();
        assert_eq!(
            shown,
            [
                "batch 8, workers 4, amp off, lr 0.1, depth 18",
                "batch 16, workers 4, amp off, lr 0.1, depth 18",
                "batch 8, workers 4, amp off, lr 0.1, depth 34",
                "batch 16, workers 4, amp off, lr 0.1, depth 34",
            ]
        );
        assert_eq!(g[11].axes.get("lr").map(String::as_str), Some("0.001"));
    }
}

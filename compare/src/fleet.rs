//! `compare --devices all|LIST`: the chapter on several GPUs of the host, one compare process
//! per GPU (each judged by its own gate, its table printed as it would be alone), then the fleet
//! check: for every variant, each GPU's median beside those of the other GPUs of its model, and
//! a GPU whose device-paced median is more than `--fleet-bar` percent off its peers' median
//! flagged.
//!
//! Every GPU runs at once, and then the pairs with a device-paced variant whose bytes cross the
//! host link (its report's `traffic`) run again one GPU at a time, their figures replacing the
//! ones taken at once: GPUs copying together share the host's memory and PCIe, so a copy-bound
//! time taken at once says as much about the neighbours as about the GPU. Host-paced variants
//! are shown and never flagged: the runs share the host's CPUs.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, Stdio};
use std::time::Instant;

use serde::Serialize;

use common::counters::Traffic;
use common::table::{format_ms, Table};

use crate::host::Pacing;
use crate::outcome::{CompareReport, RunStatus};

/// The flags of a fleet run that its per-GPU runs must not get (they are given their own).
const FLEET_ONLY: [&str; 5] = [
    "--devices",
    "--fleet-bar",
    "--plant-on",
    "--json",
    "--device",
];

/// `argv` without the flags `drop` (and their values, `--flag VALUE` or `--flag=VALUE`).
fn without(argv: &[String], drop: &[&str]) -> Vec<String> {
    let mut out = Vec::new();
    let mut skip_value = false;
    for a in argv {
        if skip_value {
            skip_value = false;
            continue;
        }
        if drop.contains(&a.as_str()) {
            skip_value = true;
            continue;
        }
        if drop
            .iter()
            .any(|f| a.strip_prefix(f).is_some_and(|rest| rest.starts_with('=')))
        {
            continue;
        }
        out.push(a.clone());
    }
    out
}

/// The command line of one GPU's run: this run's arguments without the fleet's own flags; a
/// slowdown planted on one GPU (`--plant-on`) is passed to that GPU's run only.
pub fn member_args(argv: &[String], gpu: usize, plant_on: Option<usize>) -> Vec<String> {
    let args = without(argv, &FLEET_ONLY);
    match plant_on {
        Some(p) if p != gpu => without(&args, &["--plant-slowdown"]),
        _ => args,
    }
}

/// The command line of one GPU's run of `pairs` alone: its run's, with a filter per pair in
/// place of the run's own.
pub fn alone_args(
    argv: &[String],
    gpu: usize,
    plant_on: Option<usize>,
    pairs: &[String],
) -> Vec<String> {
    let mut args = without(&member_args(argv, gpu, plant_on), &["--filter"]);
    for p in pairs {
        args.push("--filter".into());
        args.push(p.clone());
    }
    args
}

/// One GPU's run: its ordinal, how its process ended and what it wrote.
#[derive(Debug, Clone, Serialize)]
pub struct Member {
    pub ordinal: usize,
    /// The exit code of its run with every GPU at once (None: killed by a signal).
    pub exit: Option<i32>,
    /// Its report, with the pairs run alone in place of their runs at once.
    pub report: Option<CompareReport>,
    /// Why there is no report, when there is none.
    pub error: Option<String>,
    /// Why the pairs to run alone have no result on this GPU, when they have none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub alone_error: Option<String>,
}

impl Member {
    /// "GPU 1 (NVIDIA H100 80GB HBM3)".
    pub fn label(&self) -> String {
        match self.report.as_ref().and_then(|r| r.device.as_ref()) {
            Some(d) => format!("GPU {} ({})", self.ordinal, d.name),
            None => format!("GPU {}", self.ordinal),
        }
    }

    fn model(&self) -> Option<&str> {
        Some(self.report.as_ref()?.device.as_ref()?.name.as_str())
    }

    /// The median of a variant, when it ran and verified.
    fn median(&self, id: &str) -> Option<(f64, Option<Pacing>)> {
        let v = self
            .report
            .as_ref()?
            .variants
            .iter()
            .find(|v| v.id() == id)?;
        if v.status != RunStatus::Ok {
            return None;
        }
        Some((v.timing?.median_s, v.paced_by))
    }

    /// Put the runs of `pairs` from `alone` (this GPU's run of them by itself) in place of
    /// those taken with every GPU at once; without `alone`, those runs are left out.
    pub fn take_alone(&mut self, pairs: &[String], alone: Option<&CompareReport>) {
        let Some(report) = self.report.as_mut() else {
            return;
        };
        let rows: Vec<_> = report
            .pairs
            .iter()
            .filter(|p| pairs.contains(&p.id))
            .cloned()
            .collect();
        for row in rows {
            let ids = row.run_ids();
            report.variants.retain(|v| !ids.contains(&v.id()));
            report.pairs.retain(|p| p != &row);
            let Some(alone) = alone else { continue };
            for v in alone.variants.iter().filter(|v| ids.contains(&v.id())) {
                if !report.variants.iter().any(|r| r.id() == v.id()) {
                    report.variants.push(v.clone());
                }
            }
            report.pairs.extend(
                alone
                    .pairs
                    .iter()
                    .filter(|p| p.id == row.id && p.args == row.args)
                    .cloned(),
            );
        }
    }

    /// Why this GPU's run counts as failed: no report, or its gate's own problems.
    fn problems(&self) -> Vec<String> {
        let g = self.ordinal;
        let mut out = Vec::new();
        match (&self.report, &self.error) {
            (Some(r), _) => out.extend(r.problems().iter().map(|p| format!("GPU {g}: {p}"))),
            (None, Some(e)) => out.push(format!("GPU {g}: no result: {e}")),
            (None, None) => out.push(format!("GPU {g}: no result")),
        }
        if let Some(e) = &self.alone_error {
            out.push(format!("GPU {g}: no result for the pairs run alone: {e}"));
        }
        out
    }
}

/// The pairs to run one GPU at a time: those with a device-paced variant whose bytes cross the
/// host link, in any GPU's run (ids "lesson/pair").
pub fn host_link_pairs(members: &[Member]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for r in members.iter().filter_map(|m| m.report.as_ref()) {
        let crossing: Vec<String> = r
            .variants
            .iter()
            .filter(|v| v.paced_by == Some(Pacing::Device))
            .filter(|v| {
                v.report
                    .as_ref()
                    .is_some_and(|v| v.traffic == Traffic::HostDevice)
            })
            .map(|v| v.id())
            .collect();
        for p in &r.pairs {
            if p.run_ids().iter().any(|id| crossing.contains(id)) && !out.contains(&p.id) {
                out.push(p.id.clone());
            }
        }
    }
    out
}

/// How a variant's figures across the fleet were taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Taken {
    /// Every GPU at the same time.
    AtOnce,
    /// One GPU at a time.
    Alone,
}

/// One variant across the fleet.
#[derive(Debug, Clone, Serialize)]
pub struct FleetRow {
    pub variant: String,
    pub paced_by: Option<Pacing>,
    pub taken: Taken,
    /// Seconds, per member in order (None: not run or not verified there).
    pub medians: Vec<Option<f64>>,
    /// Per member: its median over the median of its model's GPUs, less 1.
    pub off_peers: Vec<Option<f64>>,
    /// The slowest over the fastest of one model, less 1 (the largest over the models).
    pub spread: Option<f64>,
    /// Ordinals more than the bar off their peers (device-paced variants only).
    pub flagged: Vec<usize>,
}

/// The fleet check of a set of runs.
#[derive(Debug, Clone, Serialize)]
pub struct Fleet {
    pub bar: f64,
    pub gpus: Vec<usize>,
    pub rows: Vec<FleetRow>,
}

/// Where the fleet's time went (seconds of wall time).
#[derive(Debug, Clone, Copy, Serialize)]
pub struct FleetTime {
    /// Every GPU's run at once.
    pub at_once_s: f64,
    /// The pairs run one GPU at a time, all GPUs together.
    pub alone_s: f64,
    /// The whole fleet run.
    pub wall_s: f64,
}

impl FleetTime {
    pub fn line(&self) -> String {
        format!(
            "fleet wall time: {:.1} s (every GPU at once {:.1} s, then one GPU at a time {:.1} s)",
            self.wall_s, self.at_once_s, self.alone_s
        )
    }
}

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    let n = xs.len();
    if n % 2 == 1 {
        xs[n / 2]
    } else {
        (xs[n / 2 - 1] + xs[n / 2]) / 2.0
    }
}

/// Every variant of the runs, each GPU against the others of its model; the variants of
/// `alone` pairs were taken one GPU at a time.
pub fn check(members: &[Member], bar: f64, alone: &[String]) -> Fleet {
    let mut ids: Vec<String> = Vec::new();
    for m in members {
        for v in m.report.iter().flat_map(|r| &r.variants) {
            if !ids.contains(&v.id()) {
                ids.push(v.id());
            }
        }
    }
    let alone_ids: Vec<String> = members
        .iter()
        .filter_map(|m| m.report.as_ref())
        .flat_map(|r| &r.pairs)
        .filter(|p| alone.contains(&p.id))
        .flat_map(|p| p.run_ids())
        .collect();
    let mut models: Vec<&str> = members.iter().filter_map(Member::model).collect();
    models.sort_unstable();
    models.dedup();
    let rows = ids
        .into_iter()
        .map(|id| {
            let found: Vec<Option<(f64, Option<Pacing>)>> =
                members.iter().map(|m| m.median(&id)).collect();
            let paced_by = found.iter().flatten().find_map(|(_, p)| *p);
            let medians: Vec<Option<f64>> = found.iter().map(|f| f.map(|(s, _)| s)).collect();
            let mut off_peers = vec![None; members.len()];
            let mut spread: Option<f64> = None;
            let mut flagged = Vec::new();
            for &model in &models {
                let of_model: Vec<(usize, f64)> = members
                    .iter()
                    .enumerate()
                    .filter(|(_, m)| m.model() == Some(model))
                    .filter_map(|(i, _)| Some((i, medians[i]?)))
                    .collect();
                if of_model.len() < 2 {
                    continue;
                }
                let center = median(of_model.iter().map(|&(_, s)| s).collect());
                let (lo, hi) = of_model
                    .iter()
                    .fold((f64::MAX, 0.0f64), |(lo, hi), &(_, s)| {
                        (lo.min(s), hi.max(s))
                    });
                spread = Some(spread.unwrap_or(0.0).max(hi / lo - 1.0));
                for &(i, s) in &of_model {
                    let off = s / center - 1.0;
                    off_peers[i] = Some(off);
                    if paced_by == Some(Pacing::Device) && off.abs() > bar {
                        flagged.push(members[i].ordinal);
                    }
                }
            }
            FleetRow {
                taken: if alone_ids.contains(&id) {
                    Taken::Alone
                } else {
                    Taken::AtOnce
                },
                variant: id,
                paced_by,
                medians,
                off_peers,
                spread,
                flagged,
            }
        })
        .collect();
    Fleet {
        bar,
        gpus: members.iter().map(|m| m.ordinal).collect(),
        rows,
    }
}

impl Fleet {
    /// The table: a row per variant, a column per GPU (median, and how far off its peers).
    pub fn markdown(&self) -> String {
        let mut t = Table::new()
            .left("variant")
            .left("paced by")
            .left("GPUs run");
        for g in &self.gpus {
            t = t.right(format!("GPU {g}"));
        }
        t = t.right("spread").left("flagged");
        for r in &self.rows {
            let mut cells = vec![
                r.variant.clone(),
                match r.paced_by {
                    Some(Pacing::Device) => "device".into(),
                    Some(Pacing::Host) => "host".into(),
                    None => "-".into(),
                },
                match r.taken {
                    Taken::AtOnce => "at once".into(),
                    Taken::Alone => "one at a time".into(),
                },
            ];
            for (m, off) in r.medians.iter().zip(&r.off_peers) {
                cells.push(match (m, off) {
                    (Some(s), Some(o)) => format!("{} ({:+.1}%)", format_ms(s * 1e3), o * 100.0),
                    (Some(s), None) => format_ms(s * 1e3),
                    (None, _) => "-".into(),
                });
            }
            cells.push(
                r.spread
                    .map_or("-".into(), |s| format!("{:.1}%", s * 100.0)),
            );
            cells.push(if r.flagged.is_empty() {
                String::new()
            } else {
                r.flagged
                    .iter()
                    .map(|g| format!("GPU {g}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            });
            t.row(cells);
        }
        format!(
            "## The fleet: each GPU against the others of its model\n\n{}\nA device-paced variant more than {:.1}% off its peers' median is flagged. Pairs whose device-paced variants copy over the host link were run again one GPU at a time: GPUs copying at once share the host's memory and PCIe. Host-paced variants share the host's CPUs with the other runs and are shown, not judged.\n",
            t.markdown(),
            self.bar * 100.0
        )
    }

    /// One line per flagged GPU and variant.
    pub fn problems(&self) -> Vec<String> {
        let mut out = Vec::new();
        for r in &self.rows {
            for &g in &r.flagged {
                let i = self.gpus.iter().position(|&x| x == g).expect("a member");
                let off = r.off_peers[i].unwrap_or(0.0);
                out.push(format!(
                    "GPU {g}: {} is {:.1}% {} than the median of its model's GPUs",
                    r.variant,
                    off.abs() * 100.0,
                    if off > 0.0 { "slower" } else { "faster" }
                ));
            }
        }
        out
    }
}

/// What a fleet run runs: the compare `program` with this run's `argv` on each of `ordinals`.
pub struct Plan {
    pub program: PathBuf,
    pub argv: Vec<String>,
    pub ordinals: Vec<usize>,
    /// The fleet bar (a fraction).
    pub bar: f64,
    /// The GPU a planted slowdown goes to (None: every GPU that runs the variant).
    pub plant_on: Option<usize>,
    /// Print each GPU's phases table after its table (`--phases`).
    pub phases: bool,
}

/// One GPU's compare, started: `program args --device g --json DIR/gpu-g[-tag].json`, its
/// stdout and stderr to files beside the JSON.
struct Started {
    gpu: usize,
    stem: PathBuf,
    child: Child,
}

impl Started {
    fn start(
        program: &Path,
        args: &[String],
        gpu: usize,
        stem: PathBuf,
    ) -> anyhow::Result<Started> {
        let file = |ext: &str| stem.with_extension(ext);
        let child = Command::new(program)
            .args(args)
            .args(["--device", &gpu.to_string(), "--json"])
            .arg(file("json"))
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(file("out"))?)
            .stderr(std::fs::File::create(file("err"))?)
            .spawn()
            .map_err(|e| anyhow::anyhow!("could not start {}: {e}", program.display()))?;
        Ok(Started { gpu, stem, child })
    }

    /// Wait for it and read its report (or why there is none), keeping what it printed.
    fn finish(mut self) -> anyhow::Result<Finished> {
        let status = self.child.wait()?;
        let read =
            |ext: &str| std::fs::read_to_string(self.stem.with_extension(ext)).unwrap_or_default();
        let (out, err) = (read("out"), read("err"));
        let report = CompareReport::read(&self.stem.with_extension("json")).map_err(|e| {
            err.lines()
                .rev()
                .find(|l| !l.trim().is_empty())
                .map_or(e, str::to_string)
        });
        // Its gate's own lines are left to the fleet, which says them again from the figures
        // it keeps (those of a pair run again alone replace the ones taken at once).
        let gate: Vec<String> = report
            .as_ref()
            .map(|r| r.problems().iter().map(|p| format!("error: {p}")).collect())
            .unwrap_or_default();
        let notes = err
            .lines()
            .filter(|l| !l.trim().is_empty() && !gate.iter().any(|g| g == l))
            .map(str::to_string)
            .collect();
        Ok(Finished {
            exit: status.code(),
            out,
            notes,
            report,
        })
    }
}

/// One GPU's compare, ended: its exit code, what it printed and its report.
struct Finished {
    exit: Option<i32>,
    out: String,
    /// Its stderr, less its gate's verdicts.
    notes: Vec<String>,
    report: Result<CompareReport, String>,
}

/// Run every GPU's compare at once, then the pairs whose device-paced variants cross the host
/// link on each GPU in turn; print each GPU's output, then the fleet table and its wall time;
/// write the whole as JSON when asked. Exit 1 when a GPU's run failed or regressed, or a GPU
/// is flagged.
pub fn run(plan: &Plan, json: Option<&Path>, scratch: &Path) -> anyhow::Result<ExitCode> {
    let started = Instant::now();
    println!(
        "compare on {} GPU(s) at once, one process each: {}",
        plan.ordinals.len(),
        plan.ordinals
            .iter()
            .map(|g| format!("GPU {g}"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    let stem = |g: usize, tag: &str| scratch.join(format!("gpu-{g}{tag}"));
    let mut running = Vec::new();
    for &g in &plan.ordinals {
        let args = member_args(&plan.argv, g, plan.plant_on);
        running.push(Started::start(&plan.program, &args, g, stem(g, ""))?);
    }
    let mut members = Vec::new();
    let mut printed = Vec::new();
    for s in running {
        let g = s.gpu;
        let done = s.finish()?;
        let (report, error) = match done.report {
            Ok(r) => (Some(r), None),
            Err(e) => (None, Some(e)),
        };
        members.push(Member {
            ordinal: g,
            exit: done.exit,
            report,
            error,
            alone_error: None,
        });
        printed.push((done.out, done.notes));
    }
    let at_once_s = started.elapsed().as_secs_f64();
    let alone = host_link_pairs(&members);
    if !alone.is_empty() {
        println!(
            "again one GPU at a time, their copies crossing the host link alone: {}",
            alone.join(", ")
        );
    }
    // A GPU whose run gave no report has nothing to replace (and its error is said already).
    let with_report = members.iter_mut().zip(&mut printed);
    for (m, (_, notes)) in with_report.filter(|(m, _)| m.report.is_some() && !alone.is_empty()) {
        let g = m.ordinal;
        let args = alone_args(&plan.argv, g, plan.plant_on, &alone);
        let done = Started::start(&plan.program, &args, g, stem(g, "-alone"))?.finish()?;
        notes.extend(done.notes);
        m.take_alone(&alone, done.report.as_ref().ok());
        m.alone_error = done.report.err();
    }
    // Each GPU's table as its gate judged it, the pairs run alone in it from their runs alone.
    for (m, (out, notes)) in members.iter().zip(&printed) {
        let g = m.ordinal;
        match &m.report {
            Some(r) => print!("\n# GPU {g}\n\n{}", r.markdown()),
            None => println!("\n# GPU {g}\n\n{}", out.trim_end()),
        }
        if let Some(r) = m.report.as_ref().filter(|_| plan.phases) {
            print!("\n{}", r.phases_markdown());
        }
        if m.report.is_some() && !alone.is_empty() {
            println!(
                "taken with this GPU alone, after the others: {} (their copies cross the host link)",
                alone.join(", ")
            );
        }
        for line in notes {
            eprintln!("GPU {g}: {line}");
        }
    }
    let fleet = check(&members, plan.bar, &alone);
    let time = FleetTime {
        at_once_s,
        alone_s: started.elapsed().as_secs_f64() - at_once_s,
        wall_s: started.elapsed().as_secs_f64(),
    };
    println!("\n{}\n{}", fleet.markdown(), time.line());
    if let Some(path) = json {
        #[derive(Serialize)]
        struct FleetReport<'a> {
            members: &'a [Member],
            fleet: &'a Fleet,
            time: FleetTime,
        }
        common::files::write_json_file(
            path,
            &FleetReport {
                members: &members,
                fleet: &fleet,
                time,
            },
            "the fleet's comparison",
        )?;
        println!("wrote {}", path.display());
    }
    let mut problems = fleet.problems();
    problems.extend(members.iter().flat_map(Member::problems));
    Ok(common::cli::exit_for_problems(&problems))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::outcome::VariantRun;
    use crate::rule::Timing;

    fn args(s: &str) -> Vec<String> {
        s.split_whitespace().map(String::from).collect()
    }

    #[test]
    fn a_member_gets_the_run_s_flags_without_the_fleet_s() {
        let argv = args(
            "--devices all --quick --fleet-bar 2 --filter gemm --json f.json --device=1 --cold",
        );
        assert_eq!(
            member_args(&argv, 0, None),
            args("--quick --filter gemm --cold")
        );
        assert_eq!(
            member_args(&args("--devices=0,1 --fleet-bar=5 --timeout 60"), 1, None),
            args("--timeout 60")
        );
        // A slowdown planted on GPU 1 goes to GPU 1's run only.
        let planted = args("--devices 0,1 --plant-slowdown a/fused --plant-on 1 --quick");
        assert_eq!(
            member_args(&planted, 1, Some(1)),
            args("--plant-slowdown a/fused --quick")
        );
        assert_eq!(member_args(&planted, 0, Some(1)), args("--quick"));
        assert_eq!(
            member_args(&args("--plant-slowdown=a/fused"), 0, None),
            args("--plant-slowdown=a/fused")
        );
    }

    #[test]
    fn a_run_alone_takes_a_filter_per_pair_in_place_of_the_run_s() {
        let argv = args("--devices all --filter ch1 --quick --plant-slowdown b/x --plant-on 2");
        let pairs = ["b/copy".to_string(), "c/copy".to_string()];
        assert_eq!(
            alone_args(&argv, 2, Some(2), &pairs),
            args("--quick --plant-slowdown b/x --filter b/copy --filter c/copy")
        );
        assert_eq!(
            alone_args(&argv, 0, Some(2), &pairs),
            args("--quick --filter b/copy --filter c/copy")
        );
    }

    fn member(ordinal: usize, model: &str, variants: &[(&str, f64, Pacing)]) -> Member {
        let report: CompareReport = serde_json::from_value(serde_json::json!({
            "schema_version": crate::outcome::COMPARE_SCHEMA_VERSION,
            "device": null, "host": null,
            "provenance": common::report::Provenance::now(),
            "rule": crate::rule::Rule::default(),
            "expectations": null, "variants": [], "pairs": [], "wall_s": 1.0
        }))
        .unwrap();
        let mut report = report;
        let mut device: common::gpu::DeviceInfo = serde_json::from_value(serde_json::json!({
            "ordinal": ordinal, "name": model, "uuid": format!("GPU-{ordinal}"),
            "compute_capability": [9, 0], "sm_count": 132, "total_memory_bytes": 1,
            "l2_bytes": 1, "max_sm_clock_mhz": 1, "memory_clock_mhz": 1,
            "memory_bus_width_bits": 1, "driver_version": "0", "cuda_driver_version": "13.0",
            "nvrtc_version": "13.0"
        }))
        .unwrap();
        device.ordinal = ordinal;
        report.device = Some(device);
        report.variants = variants
            .iter()
            .map(|&(id, ms, pacing)| {
                let (lesson, variant) = id.split_once('/').unwrap();
                let mut v: VariantRun = serde_json::from_value(serde_json::json!({
                    "lesson": lesson, "variant": variant, "status": {"kind": "ok"},
                    "timing": null, "report": null, "expected": null, "verdict": null,
                    "change": null, "wall_s": 1.0
                }))
                .unwrap();
                v.timing = Some(Timing {
                    median_s: ms / 1e3,
                    noise: 0.001,
                    samples: 100,
                });
                v.paced_by = Some(pacing);
                v
            })
            .collect();
        Member {
            ordinal,
            exit: Some(0),
            report: Some(report),
            error: None,
            alone_error: None,
        }
    }

    #[test]
    fn a_gpu_off_its_peers_on_a_device_paced_variant_is_flagged() {
        use Pacing::{Device, Host};
        let h = "NVIDIA H200";
        let members = vec![
            member(0, h, &[("a/fused", 1.00, Device), ("a/loop", 10.0, Host)]),
            member(1, h, &[("a/fused", 1.01, Device), ("a/loop", 13.0, Host)]),
            member(2, h, &[("a/fused", 1.05, Device), ("a/loop", 10.0, Host)]),
            member(3, h, &[("a/fused", 0.99, Device), ("a/loop", 10.0, Host)]),
        ];
        let f = check(&members, 0.03, &[]);
        let fused = &f.rows[0];
        assert_eq!(fused.variant, "a/fused");
        // Peers' median 1.005 ms: GPU 2 is 4.5% off, the others within 1.5%.
        assert_eq!(fused.flagged, vec![2]);
        assert!((fused.off_peers[2].unwrap() - (1.05 / 1.005 - 1.0)).abs() < 1e-12);
        assert!((fused.spread.unwrap() - (1.05 / 0.99 - 1.0)).abs() < 1e-12);
        // A host-paced variant 30% off is shown, not flagged.
        let host = &f.rows[1];
        assert!(host.flagged.is_empty() && host.spread.unwrap() > 0.29);
        let problems = f.problems();
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(
            problems[0].starts_with("GPU 2: a/fused is 4.5% slower than the median"),
            "{problems:?}"
        );
        let table = common::table::unpadded(&f.markdown());
        assert!(table.contains("| a/fused | device |"), "{table}");
        assert!(table.contains("(+4.5%)"), "{table}");
    }

    #[test]
    fn gpus_of_other_models_are_not_peers() {
        let members = vec![
            member(
                0,
                "NVIDIA H100 80GB HBM3",
                &[("a/fused", 1.3, Pacing::Device)],
            ),
            member(1, "NVIDIA H200", &[("a/fused", 1.0, Pacing::Device)]),
        ];
        let f = check(&members, 0.03, &[]);
        assert!(f.rows[0].flagged.is_empty());
        assert_eq!(f.rows[0].spread, None, "one GPU of each model: no spread");
        assert!(f.problems().is_empty());
    }

    #[test]
    fn a_variant_missing_on_one_gpu_leaves_the_others_compared() {
        let h = "NVIDIA H100 80GB HBM3";
        let mut failed = member(2, h, &[]);
        failed.report = None;
        failed.error = Some("no GPU 2".into());
        let members = vec![
            member(0, h, &[("a/fused", 1.0, Pacing::Device)]),
            member(1, h, &[("a/fused", 1.1, Pacing::Device)]),
            failed,
        ];
        let f = check(&members, 0.03, &[]);
        assert_eq!(f.rows[0].medians[2], None);
        // Two peers: each is 4.8% off their median (1.05 ms).
        assert_eq!(f.rows[0].flagged, vec![0, 1]);
    }

    /// `m` with the pair `id` of `lesson/baseline` and `lesson/optimized`, whose bytes move as
    /// `traffic`.
    fn with_pair(mut m: Member, id: &str, sides: (&str, &str), traffic: Traffic) -> Member {
        let r = m.report.as_mut().unwrap();
        let lesson = id.split_once('/').unwrap().0;
        for v in r.variants.iter_mut().filter(|v| v.lesson == lesson) {
            if v.variant == sides.0 || v.variant == sides.1 {
                let mut inner = common::report::VariantReport::checked(
                    &v.variant,
                    "",
                    common::verify::Precision::Fp32,
                    Vec::new(),
                    common::counters::Work::default(),
                );
                inner.traffic = traffic;
                v.report = Some(inner);
            }
        }
        r.pairs.push(
            serde_json::from_value(serde_json::json!({
                "id": id, "baseline": sides.0, "optimized": sides.1, "baseline_s": null,
                "optimized_s": null, "speedup": null, "speedup_uncertainty": null,
                "verified": true, "of_ceiling": null
            }))
            .unwrap(),
        );
        m
    }

    /// A GPU of H100s with a device-bound pair, a copy-bound device-paced pair and a copy-bound
    /// host-paced one, `serial_ms` the copy-bound device-paced baseline's median.
    fn copying(ordinal: usize, serial_ms: f64, fused_ms: f64) -> Member {
        use Pacing::{Device, Host};
        let m = member(
            ordinal,
            "NVIDIA H100 80GB HBM3",
            &[
                ("a/base", 2.0, Device),
                ("a/fused", fused_ms, Device),
                ("b/serial", serial_ms, Device),
                ("b/overlapped", 0.5, Device),
                ("c/loop", 9.0, Host),
                ("c/pinned", 7.0, Host),
            ],
        );
        let m = with_pair(m, "a/fusion", ("base", "fused"), Traffic::DeviceMemory);
        let m = with_pair(
            m,
            "b/pipeline",
            ("serial", "overlapped"),
            Traffic::HostDevice,
        );
        with_pair(m, "c/training", ("loop", "pinned"), Traffic::HostDevice)
    }

    #[test]
    fn only_pairs_with_a_device_paced_variant_over_the_host_link_run_alone() {
        let members = vec![copying(0, 1.0, 1.0), copying(1, 1.08, 1.0)];
        // The host-paced pair also copies, but is never judged: it stays at once.
        let alone = host_link_pairs(&members);
        assert_eq!(alone, ["b/pipeline"]);
        // At once, the copies of two GPUs share the host: 8% apart, both would be flagged.
        let at_once = check(&members, 0.03, &[]);
        assert_eq!(at_once.rows[2].variant, "b/serial");
        assert_eq!(at_once.rows[2].flagged, vec![0, 1]);
        assert_eq!(at_once.rows[2].taken, Taken::AtOnce);
    }

    #[test]
    fn runs_alone_replace_those_taken_at_once_and_are_judged() {
        let alone = vec!["b/pipeline".to_string()];
        let mut members = vec![copying(0, 1.0, 1.0), copying(1, 1.08, 1.0)];
        for (m, serial_ms) in members.iter_mut().zip([1.0, 1.005]) {
            let by_itself = copying(m.ordinal, serial_ms, 3.0).report.unwrap();
            m.take_alone(&alone, Some(&by_itself));
        }
        let f = check(&members, 0.03, &alone);
        let row = |id: &str| f.rows.iter().find(|r| r.variant == id).unwrap();
        let serial = row("b/serial");
        assert_eq!(serial.taken, Taken::Alone);
        assert_eq!(serial.medians, vec![Some(1.0 / 1e3), Some(1.005 / 1e3)]);
        assert!(serial.flagged.is_empty());
        assert_eq!(row("b/overlapped").taken, Taken::Alone);
        // The other pairs keep their figures taken at once (the run alone's fused is ignored).
        assert_eq!(row("a/fused").taken, Taken::AtOnce);
        assert_eq!(row("a/fused").medians, vec![Some(1.0e-3); 2]);
        assert!(f.problems().is_empty(), "{:?}", f.problems());
        let r = members[1].report.as_ref().unwrap();
        assert_eq!(r.pairs.len(), 3, "the pair's row replaced, not added");
        assert_eq!(r.variants.len(), 6);
        let table = common::table::unpadded(&f.markdown());
        assert!(
            table.contains("| b/serial | device | one at a time | 1.000 ms (-0.2%) |"),
            "{table}"
        );
        assert!(table.contains("| a/fused | device | at once |"), "{table}");
    }

    #[test]
    fn a_gpu_whose_run_alone_failed_leaves_those_variants_out_and_says_so() {
        let alone = vec!["b/pipeline".to_string()];
        let mut m = copying(1, 1.08, 1.0);
        m.take_alone(&alone, None);
        m.alone_error = Some("error: no GPU 1".into());
        let r = m.report.as_ref().unwrap();
        assert!(r.variants.iter().all(|v| v.lesson != "b"));
        assert!(r.pairs.iter().all(|p| p.id != "b/pipeline"));
        assert_eq!(
            m.problems(),
            ["GPU 1: no result for the pairs run alone: error: no GPU 1"]
        );
    }
}

//! `compare --devices all|LIST`: the chapter on several GPUs of the host at once, one compare
//! process per GPU (each judged by its own gate, its table printed as it would be alone), then
//! the fleet check: for every variant, each GPU's median beside those of the other GPUs of its
//! model, and a GPU whose device-paced median is more than `--fleet-bar` percent off its peers'
//! median flagged. Host-paced variants are shown and never flagged: the runs share the host's
//! CPUs, so their times say as much about the neighbours as about the GPU.

use std::path::Path;
use std::process::{Command, ExitCode, Stdio};

use serde::Serialize;

use common::table::{format_ms, Table};

use crate::host::Pacing;
use crate::outcome::{CompareReport, RunStatus};

/// The flags of a fleet run that its per-GPU runs must not get (they are given their own).
const FLEET_ONLY: [&str; 4] = ["--devices", "--fleet-bar", "--json", "--device"];

/// The command line of one GPU's run: this run's arguments without the fleet's own flags (and
/// their values, `--flag VALUE` or `--flag=VALUE`).
pub fn member_args(argv: &[String]) -> Vec<String> {
    let mut out = Vec::new();
    let mut skip_value = false;
    for a in argv {
        if skip_value {
            skip_value = false;
            continue;
        }
        if FLEET_ONLY.contains(&a.as_str()) {
            skip_value = true;
            continue;
        }
        if FLEET_ONLY
            .iter()
            .any(|f| a.strip_prefix(f).is_some_and(|rest| rest.starts_with('=')))
        {
            continue;
        }
        out.push(a.clone());
    }
    out
}

/// One GPU's run: its ordinal, how its process ended and what it wrote.
#[derive(Debug, Clone, Serialize)]
pub struct Member {
    pub ordinal: usize,
    /// The process's exit code (None: killed by a signal).
    pub exit: Option<i32>,
    pub report: Option<CompareReport>,
    /// Why there is no report, when there is none.
    pub error: Option<String>,
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
}

/// One variant across the fleet.
#[derive(Debug, Clone, Serialize)]
pub struct FleetRow {
    pub variant: String,
    pub paced_by: Option<Pacing>,
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

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    let n = xs.len();
    if n % 2 == 1 {
        xs[n / 2]
    } else {
        (xs[n / 2 - 1] + xs[n / 2]) / 2.0
    }
}

/// Every variant of the runs, each GPU against the others of its model.
pub fn check(members: &[Member], bar: f64) -> Fleet {
    let mut ids: Vec<String> = Vec::new();
    for m in members {
        for v in m.report.iter().flat_map(|r| &r.variants) {
            if !ids.contains(&v.id()) {
                ids.push(v.id());
            }
        }
    }
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
        let mut t = Table::new().left("variant").left("paced by");
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
            "## The fleet: each GPU against the others of its model\n\n{}\nA device-paced variant more than {:.1}% off its peers' median is flagged; host-paced ones share the host's CPUs with the other runs and are shown, not judged.\n",
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

/// Run `program member_args --device N --json DIR/gpu-N.json` for every ordinal at once; print
/// each GPU's output, then the fleet table; write the whole as JSON when asked. Exit 1 when a
/// GPU's run failed or regressed, or a GPU is flagged.
pub fn run(
    program: &Path,
    argv: &[String],
    ordinals: &[usize],
    bar: f64,
    json: Option<&Path>,
    scratch: &Path,
) -> anyhow::Result<ExitCode> {
    let base = member_args(argv);
    println!(
        "compare on {} GPU(s) at once, one process each: {}",
        ordinals.len(),
        ordinals
            .iter()
            .map(|g| format!("GPU {g}"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    // One GPU's files in the scratch folder: its JSON, stdout and stderr.
    let file = |g: usize, ext: &str| scratch.join(format!("gpu-{g}.{ext}"));
    let mut children = Vec::new();
    for &g in ordinals {
        let child = Command::new(program)
            .args(&base)
            .args(["--device", &g.to_string(), "--json"])
            .arg(file(g, "json"))
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(file(g, "out"))?)
            .stderr(std::fs::File::create(file(g, "err"))?)
            .spawn()
            .map_err(|e| anyhow::anyhow!("could not start {}: {e}", program.display()))?;
        children.push((g, child));
    }
    let mut members = Vec::new();
    for (g, mut child) in children {
        let status = child.wait()?;
        let read = |ext: &str| std::fs::read_to_string(file(g, ext)).unwrap_or_default();
        let (out, err) = (read("out"), read("err"));
        println!("\n# GPU {g}\n\n{}", out.trim_end());
        for line in err.lines().filter(|l| !l.trim().is_empty()) {
            eprintln!("GPU {g}: {line}");
        }
        let (report, error) = match CompareReport::read(&file(g, "json")) {
            Ok(r) => (Some(r), None),
            Err(e) => (
                None,
                Some(
                    err.lines()
                        .rev()
                        .find(|l| !l.trim().is_empty())
                        .map_or(e, str::to_string),
                ),
            ),
        };
        members.push(Member {
            ordinal: g,
            exit: status.code(),
            report,
            error,
        });
    }
    let fleet = check(&members, bar);
    println!("\n{}", fleet.markdown());
    if let Some(path) = json {
        #[derive(Serialize)]
        struct FleetReport<'a> {
            members: &'a [Member],
            fleet: &'a Fleet,
        }
        common::files::write_json_file(
            path,
            &FleetReport {
                members: &members,
                fleet: &fleet,
            },
            "the fleet's comparison",
        )?;
        println!("wrote {}", path.display());
    }
    let mut problems = fleet.problems();
    for m in &members {
        match (&m.error, m.exit) {
            (Some(e), _) => problems.push(format!("GPU {}: no result: {e}", m.ordinal)),
            (None, Some(0)) => {}
            (None, _) => problems.push(format!(
                "GPU {}: its compare failed (see its table and errors above)",
                m.ordinal
            )),
        }
    }
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
        assert_eq!(
            member_args(&args(
                "--devices all --quick --fleet-bar 2 --filter gemm --json f.json --device=1 --cold"
            )),
            args("--quick --filter gemm --cold")
        );
        assert_eq!(
            member_args(&args("--devices=0,1 --fleet-bar=5 --timeout 60")),
            args("--timeout 60")
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
        let f = check(&members, 0.03);
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
        let f = check(&members, 0.03);
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
        let f = check(&members, 0.03);
        assert_eq!(f.rows[0].medians[2], None);
        // Two peers: each is 4.8% off their median (1.05 ms).
        assert_eq!(f.rows[0].flagged, vec![0, 1]);
    }
}

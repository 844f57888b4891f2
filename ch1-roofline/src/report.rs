//! The roofline's figures: the roofs drawn from the measured ceilings, every operation placed as
//! a point against its roof, and the sections they make in the lesson's report (ceilings, roofs
//! and points, as tables and in `data`). [RooflineReport] is the view the plot and the checks
//! read, built from that report, so `--from-json` re-draws a saved run with no GPU.

use serde::{Deserialize, Serialize};

use common::ceilings::DeviceCeilings;
use common::counters::Work;
use common::gpu::DeviceInfo;
use common::report::{LessonReport, Section, Status, VariantReport};
use common::stats::Summary;
use common::table::{cell, format_ms, percent, Table};
use common::verify::{Precision, Verification};

use crate::model::{self, Bound};

/// The lesson's name in its report.
pub const LESSON: &str = "ch1-roofline";
pub const CEILINGS_TITLE: &str = "Ceilings (measured)";
pub const ROOFS_TITLE: &str = "Roofs";
pub const OPERATIONS_TITLE: &str = "Operations";

pub use plotting::roofline::{ComputeRoof, Roofs};

/// The roof an operation computing in `precision` is held to: FP32 on CUDA cores, TF32 and BF16
/// (fp16 too) on tensor cores.
pub fn roof_for(roofs: &Roofs, precision: Precision) -> Option<&ComputeRoof> {
    roofs.compute_roof(match precision {
        Precision::Fp32 => "fp32",
        Precision::Tf32 => "tf32",
        Precision::Bf16 | Precision::Fp16 => "bf16",
    })
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Point {
    /// "vector add", "SGEMM fp32", ...: one colour and legend entry per family.
    pub family: String,
    /// Short label drawn beside the point: "add 64M", "sgemm 4096".
    pub label: String,
    pub precision: Precision,
    /// Key of the compute roof this operation is held to.
    pub roof: String,
    pub work: Work,
    /// Milliseconds per run.
    pub time_ms: Summary,
    pub intensity: f64,
    pub gflops: f64,
    pub gbps: f64,
    pub attainable_gflops: f64,
    pub fraction_of_roof: f64,
    pub bound: Bound,
    pub above_roof: bool,
    /// The check that decides: the first that failed, else the one with the largest error.
    pub verification: Option<Verification>,
    /// "measured (cold)" or the result file it was read from.
    pub source: String,
}

impl Point {
    /// Place a timed operation against its roof.
    #[allow(clippy::too_many_arguments)]
    pub fn place(
        family: &str,
        label: &str,
        precision: Precision,
        roof: &ComputeRoof,
        memory_gbps: f64,
        work: Work,
        time_ms: Summary,
        verification: Option<Verification>,
        source: &str,
    ) -> Point {
        let t = work.throughput(time_ms.median / 1e3);
        let attainable = model::attainable(t.intensity, roof.gflops, memory_gbps);
        // A point that moves no FLOPs is judged by bandwidth alone.
        let (achieved, limit) = if work.flops == 0 {
            (t.gb_per_s, memory_gbps)
        } else {
            (t.gflop_per_s, attainable)
        };
        Point {
            family: family.to_string(),
            label: label.to_string(),
            precision,
            roof: roof.key.clone(),
            work,
            intensity: t.intensity,
            gflops: t.gflop_per_s,
            gbps: t.gb_per_s,
            attainable_gflops: attainable,
            fraction_of_roof: achieved / limit,
            bound: model::bound(t.intensity, roof.gflops, memory_gbps),
            above_roof: model::above_roof(achieved, limit, time_ms.rel_stddev),
            time_ms,
            verification,
            source: source.to_string(),
        }
    }

    /// A verified, timed variant as a point under the roof of its precision; `family` and
    /// `label` name it on the plot. None when it has no time or no roof to be held to.
    pub fn of_variant(
        v: &VariantReport,
        family: &str,
        label: &str,
        roofs: &Roofs,
        source: &str,
    ) -> Option<Point> {
        if v.status != Status::Ok {
            return None;
        }
        let time_ms = v.time_ms.clone()?;
        let roof = roof_for(roofs, v.precision)?;
        Some(Point::place(
            family,
            label,
            v.precision,
            roof,
            roofs.memory_gbps,
            v.work,
            time_ms,
            deciding_check(&v.checks),
            source,
        ))
    }

    pub fn verified(&self) -> bool {
        self.verification.as_ref().is_none_or(|v| v.passed)
    }
}

/// The check that decides a variant: the first that failed, else the one with the largest error.
fn deciding_check(checks: &[Verification]) -> Option<Verification> {
    checks
        .iter()
        .find(|c| !c.passed)
        .or_else(|| {
            checks
                .iter()
                .max_by(|a, b| a.rel_l2_error.total_cmp(&b.rel_l2_error))
        })
        .cloned()
}

/// The roofline lesson's own operations as points: each variant's group is the operation
/// ("add 64M"), its name the family ("vector add").
pub fn place_operations(variants: &[VariantReport], roofs: &Roofs, source: &str) -> Vec<Point> {
    variants
        .iter()
        .filter_map(|v| Point::of_variant(v, &v.name, &v.group, roofs, source))
        .collect()
}

/// The ceilings, the roofs and the points as the lesson's sections: tables for the reader, the
/// same figures in `data` for [RooflineReport::from_report].
pub fn sections(
    ceilings: &DeviceCeilings,
    roofs: &Roofs,
    points: &[Point],
    notes: &[String],
) -> Vec<Section> {
    let mut c = Section::new(CEILINGS_TITLE);
    let mut table = Table::new()
        .left("ceiling")
        .right("measured")
        .right("datasheet-style")
        .left("how");
    for (name, ceiling) in ceilings.named() {
        table.row(vec![
            name.to_string(),
            format!("{:.0} {}", ceiling.value, ceiling.unit),
            cell(ceiling.theoretical.as_ref(), |t| {
                format!("{:.0} {} ({})", t.value, ceiling.unit, t.basis)
            }),
            ceiling.method.clone(),
        ]);
    }
    c.table = Some(table);
    c.data = serde_json::to_value(ceilings).expect("ceilings serialize");

    let mut r = Section::new(ROOFS_TITLE);
    let mut table = Table::new()
        .left("compute roof")
        .right("GFLOP/s")
        .right("ridge point (FLOP/byte)");
    for roof in &roofs.compute {
        table.row(vec![
            roof.name.clone(),
            format!("{:.0}", roof.gflops),
            format!("{:.2}", roof.ridge_flop_per_byte),
        ]);
    }
    r.table = Some(table);
    r.lines.push(format!(
        "memory roof: {} = {:.0} GB/s",
        roofs.memory_name, roofs.memory_gbps
    ));
    r.data = serde_json::to_value(roofs).expect("roofs serialize");

    let mut o = Section::new(OPERATIONS_TITLE);
    let mut table = Table::new()
        .left("op")
        .left("precision")
        .right("FLOP/byte")
        .right("median")
        .right("GFLOP/s")
        .right("GB/s")
        .left("bound")
        .right("% of roof")
        .left("verified")
        .left("source");
    for p in points {
        let verified = match &p.verification {
            Some(v) if v.passed => format!("ok ({:.0e})", v.rel_l2_error),
            Some(_) => "FAILED".to_string(),
            None => "in source".to_string(),
        };
        table.row(vec![
            p.label.clone(),
            p.precision.label().to_string(),
            format!("{:.3}", p.intensity),
            format_ms(p.time_ms.median),
            format!("{:.1}", p.gflops),
            format!("{:.0}", p.gbps),
            format!("{:?}", p.bound),
            format!(
                "{}{}",
                percent(p.fraction_of_roof),
                if p.above_roof { " ABOVE ROOF" } else { "" }
            ),
            verified,
            p.source.clone(),
        ]);
    }
    o.table = Some(table);
    o.lines = notes.iter().map(|n| format!("note: {n}")).collect();
    o.data = serde_json::json!({ "points": points, "notes": notes });
    vec![c, r, o]
}

/// What the plot and the checks read: the device, the ceilings and roofs, every placed point,
/// the notes, and the variants that failed their checks.
#[derive(Debug, Clone, PartialEq)]
pub struct RooflineReport {
    pub device: DeviceInfo,
    pub ceilings: DeviceCeilings,
    pub roofs: Roofs,
    pub points: Vec<Point>,
    /// What was left out and why (e.g. no ch1-intensity results for this GPU).
    pub notes: Vec<String>,
    /// Ids of the variants whose output did not verify.
    pub failed: Vec<String>,
}

#[derive(Deserialize)]
struct OperationsData {
    points: Vec<Point>,
    #[serde(default)]
    notes: Vec<String>,
}

impl RooflineReport {
    /// The view of a roofline lesson's report; the error says why it is not one.
    pub fn from_report(report: &LessonReport) -> Result<RooflineReport, String> {
        if report.lesson != LESSON {
            return Err(format!(
                "not a roofline result (it is a {} report)",
                report.lesson
            ));
        }
        fn data<T: serde::de::DeserializeOwned>(
            report: &LessonReport,
            title: &str,
        ) -> Result<T, String> {
            let s = report
                .sections
                .iter()
                .find(|s| s.title == title)
                .ok_or_else(|| format!("not a roofline result: no '{title}' section"))?;
            serde_json::from_value(s.data.clone())
                .map_err(|e| format!("not a roofline result: the '{title}' section: {e}"))
        }
        let operations: OperationsData = data(report, OPERATIONS_TITLE)?;
        Ok(RooflineReport {
            device: report.device.clone(),
            ceilings: data(report, CEILINGS_TITLE)?,
            roofs: data(report, ROOFS_TITLE)?,
            points: operations.points,
            notes: operations.notes,
            failed: report
                .variants
                .iter()
                .filter(|v| v.status == Status::Failed)
                .map(VariantReport::id)
                .collect(),
        })
    }

    /// Points over their roof (counting errors) and anything that failed verification.
    pub fn problems(&self) -> Vec<String> {
        let mut out = Vec::new();
        for p in &self.points {
            if p.above_roof {
                out.push(format!(
                    "{}: {:.1}% of its roof, above it by more than the noise allows: a counting error",
                    p.label,
                    100.0 * p.fraction_of_roof
                ));
            }
            if !p.verified() {
                out.push(format!("{}: FAILED verification", p.label));
            }
        }
        for id in &self.failed {
            out.push(format!("{id}: FAILED verification"));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use common::verify::check;

    fn roofs() -> Roofs {
        let roof = |key: &str, gflops: f64| ComputeRoof {
            key: key.into(),
            name: key.into(),
            gflops,
            ridge_flop_per_byte: gflops / 3000.0,
        };
        Roofs {
            memory_name: "DRAM copy bandwidth".into(),
            memory_gbps: 3000.0,
            compute: vec![roof("fp32", 60_000.0), roof("bf16", 600_000.0)],
        }
    }

    fn variant(ms: f64, checks: Vec<Verification>, precision: Precision) -> VariantReport {
        let mut v = VariantReport::checked(
            "vector add",
            "c = a + b",
            precision,
            checks,
            Work::elementwise_f32(1 << 20, 2, 1, 1),
        );
        v.group = "add 1M".into();
        if v.status == Status::Ok {
            v.time_ms = Summary::of(&[ms, ms]);
        }
        v
    }

    #[test]
    fn variants_are_placed_under_the_roof_of_their_precision() {
        let ok = check(&[1.0f32], &[1.0], 1e-5, "ref");
        // 12 MiB in 5 us: 2517 GB/s, 84% of the 3000 GB/s slope.
        let v = variant(0.005, vec![ok.clone()], Precision::Fp32);
        let p = &place_operations(&[v], &roofs(), "measured")[0];
        assert_eq!(
            (p.family.as_str(), p.label.as_str()),
            ("vector add", "add 1M")
        );
        assert_eq!(p.roof, "fp32");
        assert!((p.gbps - 2516.6).abs() < 0.1, "{}", p.gbps);
        assert!((p.fraction_of_roof - p.gbps / 3000.0).abs() < 1e-9);
        assert_eq!(p.bound, Bound::Memory);
        assert!(!p.above_roof && p.verified());
        let bf16 = variant(0.005, vec![ok.clone()], Precision::Bf16);
        assert_eq!(place_operations(&[bf16], &roofs(), "m")[0].roof, "bf16");
        // A roof that was not measured, or a variant that failed, places nothing.
        let tf32 = variant(0.005, vec![ok], Precision::Tf32);
        let failed = variant(
            0.005,
            vec![check(&[2.0f32], &[1.0], 1e-5, "ref")],
            Precision::Fp32,
        );
        assert!(place_operations(&[tf32, failed], &roofs(), "m").is_empty());
    }

    #[test]
    fn the_deciding_check_is_the_failure_or_the_worst() {
        let good = check(&[1.0f32], &[1.0], 1e-5, "a");
        let worse = check(&[1.000001f32], &[1.0], 1e-5, "b");
        let bad = check(&[f32::NAN], &[1.0], 1e-5, "c").named("last product");
        assert_eq!(
            deciding_check(&[good.clone(), worse.clone()]),
            Some(worse.clone())
        );
        assert_eq!(deciding_check(&[good, bad.clone(), worse]), Some(bad));
        assert_eq!(deciding_check(&[]), None);
    }
}

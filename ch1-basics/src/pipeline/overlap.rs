//! What the stages timed alone say about the two modes: the slowest stage, how much of the
//! time that could be hidden the overlapped run hid, what the plan's model predicts, and the
//! copies as a share of the pinned copy ceilings.

use serde::Serialize;

use common::ceilings::{Ceiling, CeilingRef};
use common::report::Section;
use common::stats::Summary;
use common::table::{format_ms, percent, Table};

use super::engine::{simulate, Chunk};

/// Every figure of the overlap section, as it goes into the JSON.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct OverlapFigures {
    pub copy_in_alone_ms: Summary,
    pub compute_alone_ms: Summary,
    pub copy_out_alone_ms: Summary,
    pub serial_ms: Summary,
    pub overlapped_ms: Summary,
    pub slowest_stage: &'static str,
    pub slowest_stage_ms: f64,
    pub sum_of_stages_ms: f64,
    /// Overlapped total / slowest stage alone (1.0 = perfect overlap).
    pub overlapped_over_slowest: f64,
    /// (sum of stages - overlapped) / (sum of stages - slowest): 1.0 = all the time that
    /// could be hidden was hidden.
    pub overlap_achieved: f64,
    /// The plan's model with each engine doing one thing at a time and the stage times
    /// measured alone: what the overlapped run should approach.
    pub model_overlapped_ms: f64,
    /// The pinned copy ceilings: the median of 256 MiB pinned copies.
    pub pinned_ceilings: Vec<CeilingRef>,
    pub pinned_htod_ceiling_gb_per_s: f64,
    pub pinned_dtoh_ceiling_gb_per_s: f64,
    /// Copy-in stage alone, GB/s, and its fraction of the pinned host-to-device ceiling.
    pub copy_in_gb_per_s: f64,
    pub copy_in_fraction_of_ceiling: f64,
    pub copy_out_gb_per_s: f64,
    pub copy_out_fraction_of_ceiling: f64,
    /// Whether the overlapped output matched the serial one exactly (when both were compared).
    pub serial_and_overlapped_bitwise_equal: Option<bool>,
}

/// What was measured: each stage alone (copy in, compute, copy out) and the two modes.
pub struct Measured {
    pub stages: [Summary; 3],
    pub serial: Summary,
    pub overlapped: Summary,
}

impl OverlapFigures {
    /// From the measured times, the plan, the bytes each copy stage moves, the pinned ceilings
    /// (host-to-device, device-to-host) and the comparison of the two outputs.
    pub fn new(
        measured: Measured,
        plan: &[Chunk],
        bytes: u64,
        (htod, dtoh): (&Ceiling, &Ceiling),
        bitwise: Option<bool>,
    ) -> OverlapFigures {
        let [copy_in, compute, copy_out] = measured.stages;
        let named = [
            ("copy in", copy_in.median),
            ("compute", compute.median),
            ("copy out", copy_out.median),
        ];
        let (slowest_stage, slowest) =
            named
                .into_iter()
                .fold(("", 0.0), |a, s| if s.1 > a.1 { s } else { a });
        let sum: f64 = named.iter().map(|s| s.1).sum();
        // Stage times of one full chunk: the plan's first chunk is full.
        let elements: usize = plan.iter().map(|c| c.len).sum();
        let per_chunk = |total: f64| total * plan[0].len as f64 / elements as f64;
        let model = simulate(
            plan,
            (
                per_chunk(copy_in.median),
                per_chunk(compute.median),
                per_chunk(copy_out.median),
            ),
            true,
        );
        let gbps = |ms: f64| bytes as f64 / (ms / 1e3) / 1e9;
        let (in_rate, out_rate) = (gbps(copy_in.median), gbps(copy_out.median));
        let overlapped = measured.overlapped.median;
        OverlapFigures {
            slowest_stage,
            slowest_stage_ms: slowest,
            sum_of_stages_ms: sum,
            overlapped_over_slowest: overlapped / slowest,
            overlap_achieved: (sum - overlapped) / (sum - slowest),
            model_overlapped_ms: model,
            pinned_ceilings: vec![
                htod.as_ref_named("host-to-device, pinned"),
                dtoh.as_ref_named("device-to-host, pinned"),
            ],
            pinned_htod_ceiling_gb_per_s: htod.value,
            pinned_dtoh_ceiling_gb_per_s: dtoh.value,
            copy_in_gb_per_s: in_rate,
            copy_in_fraction_of_ceiling: in_rate / htod.value,
            copy_out_gb_per_s: out_rate,
            copy_out_fraction_of_ceiling: out_rate / dtoh.value,
            serial_and_overlapped_bitwise_equal: bitwise,
            copy_in_alone_ms: copy_in,
            compute_alone_ms: compute,
            copy_out_alone_ms: copy_out,
            serial_ms: measured.serial,
            overlapped_ms: measured.overlapped,
        }
    }

    /// The section: a table of the stages and modes, the derived figures as lines, every
    /// figure in the JSON. `headline` says what went through the GPU.
    pub fn section(&self, headline: String) -> common::Result<Section> {
        let mut table = Table::new().left("what").right("median").right("p10..p90");
        for (what, s) in [
            ("copy in alone", &self.copy_in_alone_ms),
            ("compute alone", &self.compute_alone_ms),
            ("copy out alone", &self.copy_out_alone_ms),
            ("serial, one stream", &self.serial_ms),
            ("overlapped, three streams", &self.overlapped_ms),
        ] {
            table.row(vec![
                what.to_string(),
                format_ms(s.median),
                format!("{}..{}", format_ms(s.p10), format_ms(s.p90)),
            ]);
        }
        let mut lines = vec![
            headline,
            format!(
                "slowest stage: {} ({}); the stages add up to {}",
                self.slowest_stage,
                format_ms(self.slowest_stage_ms),
                format_ms(self.sum_of_stages_ms),
            ),
            format!(
                "overlapped / slowest stage: {:.3}x; overlap achieved: {} of the hideable time, (sum of stages - overlapped) / (sum - slowest)",
                self.overlapped_over_slowest,
                percent(self.overlap_achieved)
            ),
            format!(
                "the plan's model (each engine one thing at a time, stage times as measured alone) predicts {} for the overlapped run",
                format_ms(self.model_overlapped_ms)
            ),
            format!(
                "pinned ceilings (median of 256 MiB pinned copies, as the harness measures them): host-to-device {:.1} GB/s, device-to-host {:.1} GB/s",
                self.pinned_htod_ceiling_gb_per_s, self.pinned_dtoh_ceiling_gb_per_s
            ),
            format!(
                "copy-in stage {:.1} GB/s = {} of the ceiling; copy-out stage {:.1} GB/s = {}",
                self.copy_in_gb_per_s,
                percent(self.copy_in_fraction_of_ceiling),
                self.copy_out_gb_per_s,
                percent(self.copy_out_fraction_of_ceiling)
            ),
        ];
        if let Some(equal) = self.serial_and_overlapped_bitwise_equal {
            lines.push(format!(
                "serial and overlapped outputs equal bit for bit: {}",
                if equal { "yes" } else { "NO" }
            ));
        }
        let data = serde_json::to_value(self).map_err(|e| {
            common::Error::invalid(format!("could not write the overlap figures as JSON: {e}"))
        })?;
        Ok(Section {
            table: Some(table),
            lines,
            data,
            ..Section::new("double buffering: each stage alone and the overlap")
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pipeline::engine::plan;

    fn summary(ms: f64) -> Summary {
        Summary::of(&[ms]).unwrap()
    }

    fn ceiling(value: f64) -> Ceiling {
        Ceiling {
            value,
            unit: "GB/s".into(),
            method: "test".into(),
            time_s: summary(1.0),
            candidates: Vec::new(),
            theoretical: None,
            sm_clock_mhz: None,
            verification_error: None,
        }
    }

    #[test]
    fn figures_from_the_stages_alone() {
        // 1 GB copied each way: 20 ms is 50 GB/s. 10 chunks of 100 in 3 buffers.
        let f = OverlapFigures::new(
            Measured {
                stages: [summary(20.0), summary(25.0), summary(20.0)],
                serial: summary(65.0),
                overlapped: summary(27.0),
            },
            &plan(1000, 100, 3),
            1_000_000_000,
            (&ceiling(50.0), &ceiling(40.0)),
            Some(true),
        );
        assert_eq!(f.slowest_stage, "compute");
        assert_eq!(f.slowest_stage_ms, 25.0);
        assert_eq!(f.sum_of_stages_ms, 65.0);
        assert!((f.overlapped_over_slowest - 27.0 / 25.0).abs() < 1e-12);
        // 38 of the 40 ms that could be hidden were.
        assert!((f.overlap_achieved - 38.0 / 40.0).abs() < 1e-12);
        // The slowest stage plus one chunk of the other two (2 + 2 ms).
        assert!(
            (f.model_overlapped_ms - 29.0).abs() < 1e-9,
            "{}",
            f.model_overlapped_ms
        );
        assert!((f.copy_in_gb_per_s - 50.0).abs() < 1e-9);
        assert!((f.copy_in_fraction_of_ceiling - 1.0).abs() < 1e-9);
        assert!((f.copy_out_fraction_of_ceiling - 1.25).abs() < 1e-9);
        let s = f.section("1000 fp32".into()).unwrap();
        assert_eq!(s.table.as_ref().unwrap().rows.len(), 5);
        assert!(s.lines.iter().any(|l| l.ends_with("bit for bit: yes")));
        assert_eq!(s.data["serial_and_overlapped_bitwise_equal"], true);
        assert_eq!(s.data["pinned_ceilings"][0]["value"], 50.0);
    }
}

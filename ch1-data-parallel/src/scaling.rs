//! The lesson's own figures beside the pair: samples per second against one GPU training the
//! whole global batch, the share of each side's run that communication leaves exposed (its
//! time over one rank's compute alone), the all-reduce of the whole gradient timed alone, and
//! how far the reference's end moves when only the order of its sums changes.

use serde_json::json;

use common::report::{Section, VariantReport};
use common::table::{three_figures, Table};
use plotting::format::human_bytes;

use crate::busbw::busbw;
use crate::checks::{end_tolerances, Distance, FIRST_GRADIENT_TOLERANCE};

/// The share of a run of `side_ms` that is not the rank's own compute (`compute_ms`).
pub fn exposed(side_ms: f64, compute_ms: f64) -> f64 {
    (1.0 - compute_ms / side_ms).max(0.0)
}

/// The speedup over one GPU that `n` ranks can reach when each step adds `comm_ms` of
/// communication that nothing hides to `compute_ms` of compute, against one GPU that needs
/// `one_gpu_ms` for the whole global batch.
pub fn bound_without_overlap(one_gpu_ms: f64, compute_ms: f64, comm_ms: f64) -> f64 {
    one_gpu_ms / (compute_ms + comm_ms)
}

/// What the section is made of: the run's shape, and the one-GPU runs and the all-reduce
/// timed beside the pair (medians, ms).
#[derive(Debug, Clone)]
pub struct Figures {
    pub ranks: usize,
    pub per_rank: usize,
    pub steps: usize,
    pub buckets: usize,
    pub bucket_bytes: usize,
    pub learning_rate: f32,
    pub gradient_bytes: u64,
    /// The global batch on one GPU (two ranks or more).
    pub one_gpu_ms: Option<f64>,
    /// One rank's share on its GPU alone, no communication.
    pub compute_ms: f64,
    /// One all-reduce of the whole gradient (two ranks or more).
    pub all_reduce_ms: Option<f64>,
    pub spread: Option<Distance>,
    pub whole_batch: Option<Distance>,
}

impl Figures {
    /// Samples per second of a run that took `ms`.
    fn rate(&self, ms: f64) -> f64 {
        (self.steps * self.per_rank * self.ranks) as f64 / (ms / 1e3)
    }
}

/// The section "Throughput and scaling".
pub fn section(f: &Figures, variants: &[VariantReport]) -> Section {
    let n = f.ranks;
    let mut section = Section::new("Throughput and scaling");
    let (one_gpu, compute, all_reduce) = (f.one_gpu_ms, f.compute_ms, f.all_reduce_ms);
    let mut table = Table::new()
        .left("run")
        .right("GPUs")
        .right("samples/s")
        .right("verified")
        .right("vs one GPU")
        .right("communication exposed");
    let vs_one = |ms: f64| match one_gpu {
        Some(one) => format!("{:.2}x", one / ms),
        None => "-".into(),
    };
    if let Some(one) = one_gpu {
        table.row(vec![
            "one GPU, the global batch".into(),
            "1".into(),
            three_figures(f.rate(one)),
            "reference".into(),
            "1.00x".into(),
            "-".into(),
        ]);
    }
    table.row(vec![
        "each rank's compute alone (no communication)".into(),
        n.to_string(),
        three_figures(f.rate(compute)),
        "-".into(),
        vs_one(compute),
        "0%".into(),
    ]);
    let mut sides = Vec::new();
    for v in variants {
        let ms = v.time_ms.as_ref().map(|t| t.median);
        table.row(vec![
            v.name.clone(),
            n.to_string(),
            ms.map(|m| three_figures(f.rate(m)))
                .unwrap_or_else(|| "-".into()),
            format!("{:?}", v.status),
            ms.map(vs_one).unwrap_or_else(|| "-".into()),
            ms.map(|m| format!("{:.1}%", 100.0 * exposed(m, compute)))
                .unwrap_or_else(|| "-".into()),
        ]);
        sides.push(json!({
            "side": v.name,
            "median_ms": ms,
            "samples_per_s": ms.map(|m| f.rate(m)),
            "vs_one_gpu": ms.zip(one_gpu).map(|(m, one)| one / m),
            "exposed": ms.map(|m| exposed(m, compute)),
        }));
    }
    section.table = Some(table);
    section.lines.push(format!(
        "{} rank(s), global batch {} ({} per rank), {} steps per run, {} bucket(s) of at most {} MiB, SGD at learning rate {}.",
        n,
        f.per_rank * n,
        f.per_rank,
        f.steps,
        f.buckets,
        f.bucket_bytes >> 20,
        f.learning_rate,
    ));
    let bytes = f.gradient_bytes;
    if let (Some(ar), Some(one)) = (all_reduce, one_gpu) {
        let per_step = ar;
        let compute_step = compute / f.steps as f64;
        section.lines.push(format!(
            "One all-reduce of the whole gradient ({}) takes {} ms alone ({} GB/s bus bandwidth); one rank computes a step in {} ms. Communication is {:.0}% of compute: with nothing hidden the pair can reach {:.2}x one GPU, with everything hidden {:.2}x.",
            human_bytes(bytes),
            three_figures(per_step),
            busbw(bytes, per_step / 1e3, n).map_or("-".into(), |b| three_figures(b / 1e9)),
            three_figures(compute_step),
            100.0 * per_step / compute_step,
            bound_without_overlap(one, compute, per_step * f.steps as f64),
            one / compute,
        ));
    } else {
        section.lines.push(
            "One rank: the all-reduce moves nothing between GPUs, so both sides pay only its launch (and the baseline its host wait); scaling needs two or more GPUs.".into(),
        );
    }
    let tol = end_tolerances(f.spread);
    section.lines.push(match f.spread {
        Some(s) => format!(
            "Checks: the first step's all-reduced gradient within {:.0e} of the reference's; the end of a run within {:.1e} (weight change) and {:.1e} (loss curve), four times the reference's own spread: with its shares added in another order it ends {:.1e} and {:.1e} away.",
            FIRST_GRADIENT_TOLERANCE, tol.weight_change, tol.loss_curve, s.weight_change, s.loss_curve
        ),
        None => format!(
            "Checks: the first step's all-reduced gradient within {:.0e} of the reference's; the end of a run within {:.0e} (weight change) and {:.0e} (loss curve). With {} rank(s) no order of the shares changes a sum.",
            FIRST_GRADIENT_TOLERANCE, tol.weight_change, tol.loss_curve, n
        ),
    });
    if let Some(w) = f.whole_batch {
        section.lines.push(format!(
            "One backward over the whole global batch, instead of the shares added up, computes the same gradient with its sums in another order; over {} steps the run ends {:.1e} from the reference in weight change and {:.1e} in loss curve: SGD through ReLUs carries a last-bit difference forward and grows it.",
            f.steps, w.weight_change, w.loss_curve
        ));
    }
    section.data = json!({
        "one_gpu_ms": one_gpu,
        "one_gpu_samples_per_s": one_gpu.map(|m| f.rate(m)),
        "compute_alone_ms": compute,
        "gradient_bytes": bytes,
        "all_reduce_ms": all_reduce,
        "all_reduce_busbw_bytes_per_s": all_reduce.and_then(|m| busbw(bytes, m / 1e3, n)),
        "sides": sides,
        "reference_spread": f.spread,
        "whole_batch_vs_reference": f.whole_batch,
    });
    section
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exposure_is_the_share_beyond_compute() {
        assert_eq!(exposed(10.0, 10.0), 0.0);
        assert!((exposed(12.5, 10.0) - 0.2).abs() < 1e-12);
        // Faster than compute alone (noise): nothing exposed, never negative.
        assert_eq!(exposed(9.0, 10.0), 0.0);
    }

    #[test]
    fn the_bound_without_overlap() {
        // One GPU needs 20 ms for the global batch; each of two ranks computes 10 ms and
        // waits 2.5 ms on communication: 1.6x at most.
        assert!((bound_without_overlap(20.0, 10.0, 2.5) - 1.6).abs() < 1e-12);
        assert_eq!(bound_without_overlap(20.0, 10.0, 0.0), 2.0);
    }
}

//! What the stages timed alone say about the two modes: the slowest stage, how much of the
//! hideable time the overlapped run hid, what the plan's model predicts, and the copies as a
//! share of the pinned copy ceilings.

use serde_json::json;

use common::ceilings::Ceiling;
use common::report::Section;
use common::stats::Summary;
use common::table::{format_ms, percent, Table};
use plotting::format::human_bytes;

use super::engine::{simulate, PipelineConfig};

pub struct Measured {
    /// Copy in, compute, copy out, each alone.
    pub stages: [Summary; 3],
    pub serial: Summary,
    pub overlapped: Summary,
    /// Whether the overlapped output matched the serial one bit for bit, when compared.
    pub bitwise: Option<bool>,
}

/// The section of a run of `cfg` against the pinned ceilings (host-to-device, device-to-host).
pub fn section(
    measured: Measured,
    cfg: &PipelineConfig,
    (htod, dtoh): (&Ceiling, &Ceiling),
) -> Section {
    let (plan, bytes) = (cfg.plan(), 4 * cfg.elements as u64);
    let [copy_in, compute, copy_out] = &measured.stages;
    let named = [
        ("copy in", copy_in.median),
        ("compute", compute.median),
        ("copy out", copy_out.median),
    ];
    let (slowest_stage, slowest) = named
        .into_iter()
        .fold(("", 0.0), |a, s| if s.1 > a.1 { s } else { a });
    let sum: f64 = named.iter().map(|s| s.1).sum();
    // The plan's model with the stage times of one full chunk (the plan's first is full).
    let t = named.map(|s| s.1 * plan[0].len as f64 / cfg.elements as f64);
    let model = simulate(&plan, (t[0], t[1], t[2]));
    let gbps = |ms: f64| bytes as f64 / (ms / 1e3) / 1e9;
    let (in_rate, out_rate) = (gbps(copy_in.median), gbps(copy_out.median));
    let overlapped = measured.overlapped.median;
    // 1.0: perfect overlap; and the share of the time that could be hidden that was.
    let over_slowest = overlapped / slowest;
    let achieved = (sum - overlapped) / (sum - slowest);

    let mut table = Table::new().left("what").right("median").right("p10..p90");
    for (what, s) in [
        ("copy in alone", copy_in),
        ("compute alone", compute),
        ("copy out alone", copy_out),
        ("serial, one stream", &measured.serial),
        ("overlapped, three streams", &measured.overlapped),
    ] {
        table.row(vec![
            what.to_string(),
            format_ms(s.median),
            format!("{}..{}", format_ms(s.p10), format_ms(s.p90)),
        ]);
    }
    let mut lines = vec![
        format!(
            "{} fp32 ({}) in {} chunks of {} ({} buffers), {} FMAs per element",
            cfg.elements,
            human_bytes(bytes),
            plan.len(),
            cfg.chunk,
            cfg.buffers,
            cfg.iterations
        ),
        format!(
            "slowest stage: {slowest_stage} ({}); the stages add up to {}",
            format_ms(slowest),
            format_ms(sum),
        ),
        format!(
            "overlapped / slowest stage: {over_slowest:.3}x; overlap achieved: {} of the hideable time, (sum of stages - overlapped) / (sum - slowest)",
            percent(achieved)
        ),
        format!(
            "the plan's model (each engine one thing at a time, stage times as measured alone) predicts {} for the overlapped run",
            format_ms(model)
        ),
        format!(
            "pinned ceilings (median of 256 MiB pinned copies, as the harness measures them): host-to-device {:.1} GB/s, device-to-host {:.1} GB/s",
            htod.value, dtoh.value
        ),
        format!(
            "copy-in stage {in_rate:.1} GB/s = {} of the ceiling; copy-out stage {out_rate:.1} GB/s = {}",
            percent(in_rate / htod.value),
            percent(out_rate / dtoh.value)
        ),
    ];
    if let Some(equal) = measured.bitwise {
        lines.push(format!(
            "serial and overlapped outputs equal bit for bit: {}",
            if equal { "yes" } else { "NO" }
        ));
    }
    Section {
        table: Some(table),
        lines,
        data: json!({
            "copy_in_alone_ms": copy_in,
            "compute_alone_ms": compute,
            "copy_out_alone_ms": copy_out,
            "serial_ms": measured.serial,
            "overlapped_ms": measured.overlapped,
            "slowest_stage": slowest_stage,
            "slowest_stage_ms": slowest,
            "sum_of_stages_ms": sum,
            "overlapped_over_slowest": over_slowest,
            "overlap_achieved": achieved,
            "model_overlapped_ms": model,
            "pinned_ceilings": [
                htod.as_ref_named("host-to-device, pinned"),
                dtoh.as_ref_named("device-to-host, pinned"),
            ],
            "pinned_htod_ceiling_gb_per_s": htod.value,
            "pinned_dtoh_ceiling_gb_per_s": dtoh.value,
            "copy_in_gb_per_s": in_rate,
            "copy_in_fraction_of_ceiling": in_rate / htod.value,
            "copy_out_gb_per_s": out_rate,
            "copy_out_fraction_of_ceiling": out_rate / dtoh.value,
            "serial_and_overlapped_bitwise_equal": measured.bitwise,
        }),
        ..Section::new("double buffering: each stage alone and the overlap")
    }
}

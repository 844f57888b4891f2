//! The double-buffering pair on the CPU: the chunk plan, the overlap model, the map's closed
//! form, and the figures the stages timed alone give.

use ch1_basics::pipeline::engine::{A, B};
use ch1_basics::pipeline::overlap::{section, Measured};
use ch1_basics::pipeline::{copy_rates, plan, reference_value, simulate, PipelineConfig};
use common::ceilings::Ceiling;
use common::stats::Summary;

#[test]
fn sizes_that_make_no_plan_say_what_to_change() {
    let ok = PipelineConfig {
        elements: 1 << 20,
        chunk: 1 << 16,
        buffers: 3,
        iterations: 8,
        seed: 1,
    };
    assert!(ok.validate().is_ok());
    let err = PipelineConfig {
        chunk: 2 << 20,
        ..ok
    }
    .validate();
    assert!(err.unwrap_err().contains("larger than --pipeline-elements"));
    assert!(PipelineConfig { buffers: 0, ..ok }.validate().is_err());
}

#[test]
fn chunks_cover_the_array_once_and_reuse_a_buffer_only_after_its_last_copy_out() {
    let p = plan(10, 4, 2);
    assert_eq!(
        p.iter().map(|c| (c.start, c.len)).collect::<Vec<_>>(),
        vec![(0, 4), (4, 4), (8, 2)]
    );
    assert_eq!(p.iter().map(|c| c.len).sum::<usize>(), 10);
    assert_eq!(plan(8, 4, 3).len(), 2);
    let one = plan(1, 4, 2).into_iter();
    let one: Vec<_> = one
        .map(|c| (c.index, c.start, c.len, c.buffer, c.reuses_after))
        .collect();
    assert_eq!(one, [(0, 0, 1, 0, None)]);
    for buffers in 1..4 {
        let p = plan(100, 7, buffers);
        for c in &p {
            assert_eq!(c.buffer, c.index % buffers);
            match c.reuses_after {
                None => assert!(c.index < buffers),
                Some(prev) => {
                    assert_eq!(p[prev].buffer, c.buffer);
                    // No chunk in between uses the same buffer.
                    assert!(p[prev + 1..c.index].iter().all(|m| m.buffer != c.buffer));
                }
            }
        }
    }
}

#[test]
fn overlap_approaches_the_slowest_stage() {
    let p = plan(32 * 100, 100, 3);
    let t = (1.0, 0.8, 0.9);
    let overlapped = simulate(&p, t);
    // Slowest stage alone is 32; the pipeline adds one chunk of the other two stages.
    assert!(
        (overlapped - (32.0 + 0.8 + 0.9)).abs() < 1e-9,
        "{overlapped}"
    );
    // One buffer cannot overlap anything: the serial sum.
    let single = simulate(&plan(32 * 100, 100, 1), t);
    assert!((single - 32.0 * 2.7).abs() < 1e-9, "{single}");
    // A short last chunk takes its share of each stage.
    let tail = simulate(&plan(150, 100, 1), t);
    assert!((tail - 1.5 * 2.7).abs() < 1e-9, "{tail}");
}

#[test]
fn the_closed_form_matches_iterating() {
    let mut x = 0.37f32 as f64;
    for _ in 0..1000 {
        x = A as f64 * x + B as f64;
    }
    assert!((reference_value(0.37, 1000) - x).abs() < 1e-12);
}

#[test]
fn the_copy_rate_sizes_are_sorted_and_distinct() {
    assert_eq!(
        copy_rates::sizes(4 << 20),
        vec![32 * 1024, 256 * 1024, 4 << 20, 256 << 20]
    );
    assert_eq!(copy_rates::sizes(32 << 20)[3], 32 << 20);
}

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
    // 1 GB copied each way: 20 ms is 50 GB/s. 10 chunks in 3 buffers.
    let measured = Measured {
        stages: [summary(20.0), summary(25.0), summary(20.0)],
        serial: summary(65.0),
        overlapped: summary(27.0),
        bitwise: Some(true),
    };
    let cfg = PipelineConfig {
        elements: 250_000_000,
        chunk: 25_000_000,
        buffers: 3,
        iterations: 8,
        seed: 1,
    };
    let s = section(measured, &cfg, (&ceiling(50.0), &ceiling(40.0)));
    let figure = |name: &str| s.data[name].as_f64().unwrap();
    assert_eq!(s.data["slowest_stage"], "compute");
    assert_eq!(figure("slowest_stage_ms"), 25.0);
    assert_eq!(figure("sum_of_stages_ms"), 65.0);
    assert!((figure("overlapped_over_slowest") - 27.0 / 25.0).abs() < 1e-12);
    // 38 of the 40 ms that could be hidden were.
    assert!((figure("overlap_achieved") - 38.0 / 40.0).abs() < 1e-12);
    // The slowest stage plus one chunk of the other two (2 + 2 ms).
    let model = figure("model_overlapped_ms");
    assert!((model - 29.0).abs() < 1e-9, "{model}");
    assert!((figure("copy_in_gb_per_s") - 50.0).abs() < 1e-9);
    assert!((figure("copy_in_fraction_of_ceiling") - 1.0).abs() < 1e-9);
    assert!((figure("copy_out_fraction_of_ceiling") - 1.25).abs() < 1e-9);
    assert_eq!(s.table.as_ref().unwrap().rows.len(), 5);
    let headline = "250000000 fp32 (953.67 MiB) in 10 chunks of 25000000 (3 buffers), 8 FMAs";
    assert!(s.lines[0].starts_with(headline), "{}", s.lines[0]);
    assert!(s.lines.iter().any(|l| l.ends_with("bit for bit: yes")));
    assert_eq!(s.data["serial_and_overlapped_bitwise_equal"], true);
    assert_eq!(s.data["pinned_ceilings"][0]["value"], 50.0);
    assert_eq!(s.data["compute_alone_ms"]["median"], 25.0);
}

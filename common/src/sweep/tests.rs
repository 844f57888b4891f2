use super::*;
use crate::counters::Work;
use crate::verify::{check, Precision};

fn side(ms: f64) -> Side {
    Side {
        median_ms: ms,
        noise: 0.01,
        samples: 20,
        passed: true,
    }
}

fn point(series: &str, x: u64, baseline_ms: f64, changed_ms: f64) -> Point {
    Point {
        series: series.into(),
        x,
        baseline: Some(side(baseline_ms)),
        changed: Some(side(changed_ms)),
        skipped: None,
        figures: Vec::new(),
    }
}

fn judged(points: &[Point], series: &str, bar: f64) -> Crossover {
    let pays = points
        .iter()
        .filter(|p| p.series == series)
        .filter_map(|p| p.pays(bar).map(|pays| (p.x, pays)))
        .collect();
    crossover(series, pays)
}

const BYTES: fn(u64) -> String = |x| Unit::Bytes.label(x);
const COUNT: fn(u64) -> String = |x| Unit::Count.label(x);

#[test]
fn axes_read_as_their_unit_sorted_and_each_once() {
    let sizes = Axis::bytes("bytes", &[64 << 20, 32 << 10, 32 << 10]);
    assert_eq!(sizes.values, vec![32 << 10, 64 << 20]);
    assert_eq!(sizes.labels, ["32 KiB", "64 MiB"]);
    assert_eq!(
        sizes.label(1536),
        "1.5 KiB",
        "a value off the axis reads by its unit"
    );
    let modes = Axis::names("mode", &["eager", "overlapped"]);
    assert_eq!(
        (modes.values.clone(), modes.label(1)),
        (vec![0, 1], "overlapped".into())
    );
    let counts = Axis::counts("buffers", &[16, 1]).labelled(|n| format!("{n} per use"));
    assert_eq!(counts.labels, ["1 per use", "16 per use"]);
}

#[test]
fn points_are_the_product_first_axis_outermost_or_a_list() {
    let plan = Plan::product(
        vec![
            Axis::names("mode", &["eager", "overlapped"]),
            Axis::bytes("bytes", &[1 << 20, 32 << 10]),
        ],
        "bytes",
        ["pageable", "pinned"],
        1.1,
    );
    assert_eq!(
        plan.points,
        vec![
            vec![0, 32 << 10],
            vec![0, 1 << 20],
            vec![1, 32 << 10],
            vec![1, 1 << 20]
        ]
    );
    assert_eq!((plan.x(3), plan.series(3)), (1 << 20, "overlapped".into()));
    assert_eq!(plan.value(2, "mode"), 1);
    assert_eq!(plan.values_of("bytes"), vec![32 << 10, 1 << 20]);
    assert_eq!(Plan::locate(5), (2, true));
    assert_eq!(plan.parameters()["axes"]["bytes"][1], "1 MiB");
    let listed = Plan::list(
        vec![Axis::counts("n", &[1, 2]), Axis::counts("m", &[3, 4])],
        vec![vec![1, 3], vec![2, 4]],
        "n",
        ["a", "b"],
        1.0,
    );
    assert_eq!(listed.points.len(), 2);
    assert_eq!((listed.x(1), listed.series(1)), (2, "4".into()));
}

#[test]
fn the_change_pays_only_where_its_interval_clears_the_bar() {
    assert_eq!(point("a", 1, 2.0, 1.0).pays(1.1), Some(true));
    assert_eq!(point("a", 1, 1.05, 1.0).pays(1.1), Some(false));
    assert_eq!(point("a", 1, 1.05, 1.0).pays(1.0), Some(true));
    // 1.2x raw, over a bar of 1.1, but with 30% noise on 5 samples the interval reaches below
    // it (and below 1.0): it does not pay.
    let mut noisy = point("a", 1, 1.2, 1.0);
    noisy.baseline.as_mut().unwrap().noise = 0.3;
    noisy.baseline.as_mut().unwrap().samples = 5;
    let r = noisy.speedup().unwrap();
    assert!(r.value > 1.1 && r.interval95().0 < 1.0, "{r:?}");
    assert_eq!(noisy.pays(1.1), Some(false));
    assert_eq!(noisy.pays(1.0), Some(false));
    // 1.12x with 3% noise on 20 samples: clear of 1.0, not of 1.1.
    let mut near = point("a", 1, 1.12, 1.0);
    for s in [&mut near.baseline, &mut near.changed] {
        s.as_mut().unwrap().noise = 0.03;
    }
    let (lo, _) = near.speedup().unwrap().interval95();
    assert!(lo > 1.0 && lo < 1.1, "{lo}");
    assert_eq!((near.pays(1.0), near.pays(1.1)), (Some(true), Some(false)));
    // A failed or skipped side: nothing to judge.
    let mut failed = point("a", 1, 2.0, 1.0);
    failed.changed.as_mut().unwrap().passed = false;
    assert!(failed.failed());
    assert_eq!(failed.pays(1.0), None);
    let mut skipped = point("a", 1, 2.0, 1.0);
    skipped.baseline = None;
    assert_eq!(skipped.speedup(), None);
}

#[test]
fn the_crossover_is_where_every_larger_size_pays() {
    let pts = vec![
        point("eager", 32 << 10, 1.0, 1.0),
        point("eager", 256 << 10, 1.05, 1.0),
        point("eager", 1 << 20, 1.5, 1.0),
        point("eager", 64 << 20, 6.0, 1.0),
        point("other", 32 << 10, 9.0, 1.0),
    ];
    let c = judged(&pts, "eager", 1.1);
    assert_eq!((c.pays_from, c.pays_up_to), (Some(1 << 20), None));
    assert_eq!(c.paying, vec![(1 << 20, 64 << 20)]);
    assert_eq!(c.measured, Some((32 << 10, 64 << 20)));
    assert_eq!(c.stops_from, None);
    assert_eq!(
        c.sentence(BYTES),
        "pays from 1 MiB on (up to 64 MiB, the largest measured)"
    );
    let mut shuffled = pts.clone();
    shuffled.reverse();
    assert_eq!(
        judged(&shuffled, "eager", 1.1),
        c,
        "any order in, one answer"
    );
}

#[test]
fn a_gain_that_fades_pays_up_to_a_size_and_gaps_are_said() {
    let batch = vec![
        point("b", 8, 40.0, 1.0),
        point("b", 64, 5.0, 1.0),
        point("b", 512, 1.3, 1.0),
        point("b", 4096, 1.0, 1.0),
    ];
    let c = judged(&batch, "b", 1.1);
    assert_eq!(
        (c.pays_from, c.pays_up_to, c.stops_from),
        (None, Some(512), Some(4096))
    );
    assert_eq!(
        c.sentence(COUNT),
        "pays up to 512, not beyond (measured up to 4096)"
    );
    let all = vec![point("a", 1, 2.0, 1.0), point("a", 2, 2.0, 1.0)];
    let c = judged(&all, "a", 1.1);
    assert_eq!((c.pays_from, c.pays_up_to), (Some(1), Some(2)));
    assert_eq!(c.sentence(COUNT), "pays at every size measured (1..2)");
    let none = vec![point("a", 1, 1.0, 1.0), point("a", 2, 1.0, 1.0)];
    let c = judged(&none, "a", 1.1);
    assert_eq!(
        (c.pays_from, c.pays_up_to, c.stops_from),
        (None, None, Some(1))
    );
    assert_eq!(c.sentence(COUNT), "pays at no size measured (1..2)");
    let gaps: Vec<Point> = [(1, 2.0), (2, 1.0), (4, 2.0), (8, 2.0), (16, 1.0)]
        .iter()
        .map(|&(x, b)| point("a", x, b, 1.0))
        .collect();
    let c = judged(&gaps, "a", 1.1);
    assert_eq!(c.paying, vec![(1, 1), (4, 8)]);
    assert_eq!(
        (c.pays_from, c.pays_up_to, c.stops_from),
        (None, Some(1), Some(16))
    );
    assert_eq!(c.sentence(COUNT), "pays at 1 and 4..8");
    assert_eq!(
        crossover("a", vec![]).sentence(BYTES),
        "nothing measured to judge"
    );
    assert_eq!(crossover("a", vec![]).stops_from, None);
    let late = judged(&gaps[..3], "a", 1.1);
    assert_eq!((late.pays_from, late.pays_up_to), (Some(4), Some(1)));
}

fn across(name: &str, unit: Unit) -> AcrossAxis {
    AcrossAxis {
        name: name.into(),
        unit,
    }
}

#[test]
fn across_lines_a_size_pays_when_any_line_pays_there() {
    // Batching at counts 8 and 64: it stops paying from size 512 on, whatever the count.
    let pts = vec![
        point("8", 16, 0.02, 0.002),
        point("64", 16, 0.16, 0.003),
        point("8", 256, 0.05, 0.05),
        point("64", 256, 0.4, 0.12),
        point("8", 512, 0.1, 0.095),
        point("64", 512, 0.8, 0.75),
        point("8", 1024, 0.4, 0.39),
    ];
    let s = Summary::new(across("size", Unit::Count), ["loop", "strided"], pts, 1.1);
    let c = s.across_lines();
    assert_eq!((c.pays_up_to, c.stops_from), (Some(256), Some(512)));
    assert_eq!(s.crossovers.len(), 2);
    assert_eq!(
        s.crossovers[0].pays_up_to,
        Some(16),
        "count 8 pays at 16 only"
    );
}

#[test]
fn the_section_lays_out_every_point_and_keeps_the_summary() {
    let mut pts = vec![
        point("eager", 32 << 10, 1.0, 1.0),
        point("eager", 1 << 20, 3.0, 1.0),
        point("overlapped", 32 << 10, 1.0, 1.0),
    ];
    pts[1].figures.push(("GB/s".into(), 52.3));
    let mut failed = point("overlapped", 1 << 20, 3.0, 1.0);
    failed.changed.as_mut().unwrap().passed = false;
    pts.push(failed);
    let summary = Summary::new(
        across("bytes", Unit::Bytes),
        ["pageable", "pinned"],
        pts,
        1.1,
    );
    let s = summary.section("pinned copies", vec!["a note".into()]);
    let md = crate::table::unpadded(&s.markdown());
    for row in [
        "| line | bytes | pageable | pinned | speedup | 95% interval | pays | GB/s |",
        "| eager | 1 MiB | 3.000 ms | 1.000 ms | 3.00x | 2.98..3.02 | yes | 52.3 |",
        "| overlapped | 1 MiB | 3.000 ms | FAILED | - | - | - | - |",
        "eager: pinned pays only at the largest size measured, 1 MiB",
        "overlapped: pinned pays at no size measured (32 KiB..32 KiB)",
        "lies above 1.1x",
        "a note",
    ] {
        assert!(md.contains(row), "{row}\n{md}");
    }
    assert_eq!(Summary::from_section(&s), Some(summary));
}

/// A sweep of two sizes that runs nothing: enough to see its variants and its summary.
struct Copies(Plan);

impl Sweep for Copies {
    fn name(&self) -> &str {
        "copies"
    }
    fn plan(&self) -> &Plan {
        &self.0
    }
    fn group(&self, point: usize) -> String {
        format!(
            "{} {}",
            self.0.series(point),
            Unit::Bytes.label(self.0.x(point))
        )
    }
    fn parameters(&self) -> serde_json::Value {
        serde_json::json!({ "seed": 1 })
    }
    fn spec(&self, point: usize, _changed: bool) -> VariantSpec {
        let work = Work {
            bytes_read: self.0.x(point),
            ..Work::default()
        };
        VariantSpec::new("", "a copy", Precision::Fp32, work)
    }
    fn poison(&mut self, _gpu: &Gpu, _point: usize) -> Result<()> {
        Ok(())
    }
    fn run(&mut self, _gpu: &Gpu, _point: usize, _changed: bool) -> Result<()> {
        Ok(())
    }
    fn output(&mut self, _gpu: &Gpu, _point: usize, _changed: bool) -> Result<Output> {
        Ok(Output::default())
    }
    fn bench_config(&self, _point: usize, _changed: bool, cfg: BenchConfig) -> BenchConfig {
        cfg
    }
    fn figures(&self, _: usize, p: &Point, changed: Option<&VariantReport>) -> Vec<(String, f64)> {
        let ms = changed.and_then(|v| v.time_ms.as_ref()).map(|t| t.median);
        ms.map(|ms| ("GB/s".into(), p.x as f64 / ms / 1e6))
            .into_iter()
            .collect()
    }
    fn sections(&mut self, summary: Summary, _bench: BenchConfig) -> Vec<Section> {
        vec![summary.section("copies", Vec::new())]
    }
}

#[test]
fn a_sweep_is_a_lesson_of_two_variants_per_point_and_its_reports_make_points() {
    let plan = Plan::product(
        vec![
            Axis::names("mode", &["eager"]),
            Axis::bytes("bytes", &[1 << 20, 2 << 20]),
        ],
        "bytes",
        ["pageable", "pinned"],
        1.0,
    );
    let lesson = SweepLesson(Copies(plan));
    let specs = lesson.variants();
    let ids: Vec<String> = specs.iter().map(VariantSpec::id).collect();
    assert_eq!(
        ids,
        [
            "eager 1 MiB:pageable",
            "eager 1 MiB:pinned",
            "eager 2 MiB:pageable",
            "eager 2 MiB:pinned"
        ]
    );
    assert_eq!(crate::runner::baseline_of(&specs, 3), 2);
    assert_eq!(specs[3].work.bytes_read, 2 << 20);
    let params = lesson.parameters();
    assert_eq!(
        (params["seed"].clone(), params["bar"].clone()),
        (1.into(), 1.0.into())
    );

    let report = |i: usize, ms: Option<f64>, status: Status| {
        let mut v = VariantReport::checked(
            &specs[i].name,
            "",
            Precision::Fp32,
            vec![check(&[1.0f32], &[1.0], 0.0, "ref")],
            Work::default(),
        );
        v.group = specs[i].group.clone();
        v.status = status;
        v.time_ms = ms.and_then(|m| crate::stats::Summary::of(&[m, m]));
        if status == Status::Skipped {
            v.note = Some("time cap".into());
        }
        v
    };
    let variants = vec![
        report(0, Some(2.0), Status::Ok),
        report(1, Some(1.0), Status::Ok),
        report(2, None, Status::Skipped),
        report(3, None, Status::Skipped),
    ];
    let s = summarize(&lesson.0, &variants);
    assert_eq!(s.points[0].speedup().unwrap().value, 2.0);
    assert_eq!(s.points[0].figure("GB/s"), Some(1.048576));
    assert_eq!(s.points[1].baseline, None);
    assert_eq!(s.points[1].skipped.as_deref(), Some("time cap"));
    assert_eq!(s.axis.unit, Unit::Bytes);
    // A failed side is kept, with no median; its JSON reads back (null for infinity).
    let failed = Point {
        changed: Some(Side::of(&report(1, None, Status::Failed)).unwrap()),
        ..s.points[0].clone()
    };
    assert_eq!(failed.changed.as_ref().unwrap().median_ms, f64::INFINITY);
    let json = serde_json::to_string(&failed).unwrap();
    assert_eq!(serde_json::from_str::<Point>(&json).unwrap(), failed);
}

#[test]
fn sizes_sit_by_their_logarithm_and_ticks_name_them() {
    use plot::{across, across_range, tick};
    assert_eq!(across(1 << 20), 20.0);
    assert_eq!(across(0), 0.0);
    let pts = vec![point("a", 1 << 15, 1.0, 1.0), point("a", 1 << 26, 1.0, 1.0)];
    assert_eq!(across_range(&pts), (14.5, 26.5));
    assert_eq!(across_range(&[]), (0.0, 1.0));
    assert_eq!(tick(Unit::Bytes, 15.0), "32 KiB");
    assert_eq!(tick(Unit::Bytes, 15.5), "");
    assert_eq!(tick(Unit::Count, 3.0), "8");
}

#[test]
fn the_plot_renders_png_and_svg() {
    let dir = std::env::temp_dir().join(format!("common-sweep-plot-{}", std::process::id()));
    let mut failed = point("overlapped", 1 << 20, 3.0, 1.0);
    failed.changed.as_mut().unwrap().passed = false;
    let pts = vec![
        point("eager", 32 << 10, 0.02, 0.019),
        point("eager", 1 << 20, 0.3, 0.03),
        point("eager", 64 << 20, 10.0, 1.3),
        point("overlapped", 32 << 10, 0.05, 0.05),
        failed,
        point("overlapped", 64 << 20, 12.0, 1.6),
    ];
    let summary = Summary::new(
        across("bytes", Unit::Bytes),
        ["pageable", "pinned"],
        pts,
        1.1,
    );
    let (svg, png) = plot::render(&summary, "pinned (test)", &dir.join("pinned")).unwrap();
    let bytes = std::fs::read(&png).unwrap();
    assert_eq!(&bytes[1..4], b"PNG");
    let text = std::fs::read_to_string(&svg).unwrap();
    assert!(text.contains("<svg") && text.contains("32 KiB") && text.contains("64 MiB"));
    assert!(text.contains("speedup, pinned over pageable"));
    assert!(text.contains("pays: 95% interval above 1.1x"));
    // A sweep with nothing measured still draws (empty axes), rather than failing.
    let empty = Summary::new(
        across("steps", Unit::Count),
        ["eager", "graph"],
        Vec::new(),
        1.0,
    );
    plot::render(&empty, "empty", &dir.join("empty")).unwrap();
    let _ = std::fs::remove_dir_all(dir);
}

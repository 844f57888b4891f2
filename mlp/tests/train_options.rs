//! mlp-train's flags, parsed in process: defaults, the model size, precision and optimizer
//! choices, and bad values refused by clap. (The PERF_LESSONS_* variables are read in
//! train_env.rs, a process of its own, since the environment is shared by every test here.)

use clap::Parser;
use mlp::train::Args;
use mlp::Optimizer;

fn parse(flags: &[&str]) -> Result<Args, clap::Error> {
    Args::try_parse_from(std::iter::once("mlp-train").chain(flags.iter().copied()))
}

#[test]
fn the_defaults_train_the_small_preset_in_fp32() {
    let o = parse(&[]).unwrap().options().unwrap();
    assert_eq!(o.preset, Some("small"));
    assert_eq!(
        (o.arch.depth, o.arch.hidden, o.arch.input, o.arch.classes),
        (3, 16, 256, 10)
    );
    assert_eq!((o.batch, o.accumulation, o.workers), (1024, 1, 4));
    assert_eq!((o.steps, o.warmup, o.total_steps()), (30, 5, 35));
    assert!(!o.amp && o.pinned);
    assert_eq!(o.optimizer, Optimizer::PLAIN_SGD);
    assert_eq!((o.lr, o.device, o.seed, o.samples), (0.05, 0, 1, 32768));
    assert_eq!(o.cpu_cost_per_sample, std::time::Duration::ZERO);
}

#[test]
fn every_flag_is_taken() {
    let o = parse(&[
        "--batch-size",
        "96",
        "--workers",
        "0",
        "--amp",
        "bf16",
        "--accumulation",
        "3",
        "--steps",
        "7",
        "--warmup",
        "0",
        "--pin",
        "off",
        "--preset",
        "large",
        "--optimizer",
        "adamw",
        "--lr",
        "0.002",
        "--device",
        "1",
        "--seed",
        "9",
        "--samples",
        "500",
        "--cpu-cost-us",
        "2.5",
        "--log-every",
        "10",
    ])
    .unwrap()
    .options()
    .unwrap();
    assert_eq!(
        (o.batch, o.workers, o.accumulation, o.samples_per_step()),
        (96, 0, 3, 288)
    );
    assert_eq!(
        (o.steps, o.warmup, o.device, o.seed, o.samples),
        (7, 0, 1, 9, 500)
    );
    assert!(o.amp && !o.pinned);
    assert_eq!(o.preset, Some("large"));
    assert_eq!((o.arch.depth, o.arch.hidden), (12, 128));
    assert!(matches!(o.optimizer, Optimizer::AdamW { .. }));
    assert_eq!(o.lr, 0.002);
    assert_eq!(o.cpu_cost_per_sample, std::time::Duration::from_nanos(2500));
    assert_eq!(o.log_every, 10);
    assert_eq!(
        o.describe(),
        "large (12 x 128), batch 96 x 3, bf16, adamw, 0 workers, pageable"
    );
}

#[test]
fn amp_on_is_bf16_and_each_optimizer_has_its_learning_rate() {
    for (amp, bf16) in [("on", true), ("bf16", true), ("off", false)] {
        assert_eq!(parse(&["--amp", amp]).unwrap().options().unwrap().amp, bf16);
    }
    let lr = |name: &str| parse(&["--optimizer", name]).unwrap().options().unwrap().lr;
    assert_eq!((lr("sgd"), lr("momentum"), lr("adamw")), (0.05, 0.05, 1e-3));
    let m = parse(&["--optimizer", "momentum"])
        .unwrap()
        .options()
        .unwrap();
    assert_eq!(m.optimizer.state_copies(), 1);
}

#[test]
fn a_size_flag_changes_the_preset_into_a_model_of_its_own() {
    let o = parse(&["--preset", "medium", "--depth", "2"])
        .unwrap()
        .options()
        .unwrap();
    assert_eq!((o.preset, o.arch.depth, o.arch.hidden), (None, 2, 64));
    let o = parse(&["--hidden", "512"]).unwrap().options().unwrap();
    assert_eq!((o.preset, o.arch.depth, o.arch.hidden), (None, 3, 512));
    assert!(o.describe().starts_with("3 x 512, "));
    // The same size as the preset is the preset.
    let o = parse(&["--preset", "medium", "--hidden", "64"])
        .unwrap()
        .options()
        .unwrap();
    assert_eq!(o.preset, Some("medium"));
}

#[test]
fn bad_values_are_refused_by_name() {
    for (flags, name) in [
        (&["--batch-size", "0"][..], "--batch-size"),
        (&["--batch-size", "many"], "--batch-size"),
        (&["--batch-size", "2147483648"], "--batch-size"),
        (&["--workers", "300"], "--workers"),
        (&["--amp", "maybe"], "--amp"),
        (&["--accumulation", "0"], "--accumulation"),
        (&["--steps", "0"], "--steps"),
        (&["--warmup=-1"], "--warmup"),
        (&["--pin", "yes"], "--pin"),
        (&["--preset", "huge"], "--preset"),
        (&["--hidden", "0"], "--hidden"),
        (&["--depth", "2000"], "--depth"),
        (&["--optimizer", "lion"], "--optimizer"),
        (&["--lr", "0"], "--lr"),
        (&["--lr", "nan"], "--lr"),
        (&["--samples", "0"], "--samples"),
        (&["--cpu-cost-us=-3"], "--cpu-cost-us"),
        (&["--no-such-flag"], "--no-such-flag"),
    ] {
        let err = parse(flags)
            .err()
            .unwrap_or_else(|| panic!("{flags:?} accepted"));
        assert_eq!(err.exit_code(), 2, "{flags:?}");
        assert!(err.to_string().contains(name), "{flags:?}: {err}");
    }
}

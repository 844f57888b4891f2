//! The batch finder over the user's command, against the fake training program: its answer is
//! the largest size that held in a confirmation run, a step that needs more memory late makes
//! it step down, a group that hangs between its steps is a size that does not fit, and a hang
//! before the steps or a failure stops it with the reason.

mod fake;

use fake::{confirmed, every_trial, finder_options, run_options, Scratch};
use std::time::Duration;
use tuner::autobatch::{autobatch, render, AutobatchReport, Options};
use tuner::classify::Status;
use tuner::config::Overrides;
use tuner::granularity::Granularity;
use tuner::run::{Run, RunOptions};
use tuner::trial::Limits;

fn find(
    dir: &Scratch,
    vars: &[(&str, &str)],
    o: &Options,
    time_limit_s: f64,
) -> common::Result<AutobatchReport> {
    find_on(dir, vars, o, (time_limit_s, 60.0), 1)
}

/// [find] with each trial a group of `ranks` processes on as many stand-in GPUs, under a time
/// limit and a stall limit.
fn find_on(
    dir: &Scratch,
    vars: &[(&str, &str)],
    o: &Options,
    (time_limit_s, stall_limit_s): (f64, f64),
    ranks: usize,
) -> common::Result<AutobatchReport> {
    let options = RunOptions {
        limits: Limits {
            stall_limit: Duration::from_secs_f64(stall_limit_s),
            ..Limits::new(Duration::from_secs_f64(time_limit_s))
        },
        ranks,
        ..run_options(dir, vars, ranks)
    };
    let run = Run::new(options, "autobatch")?;
    let settings = Overrides {
        workers: Some(vec![0]),
        ..Overrides::default()
    }
    .resolve()
    .unwrap();
    autobatch(&run, settings, o)
}

#[test]
fn a_data_parallel_answer_is_the_batch_every_rank_holds_confirmed_by_the_group() {
    let dir = Scratch::new("find-ranks");
    // Rank 0 holds 100 a GPU, rank 1 only 72: the group's answer is 72, per GPU.
    let vars = [("FAKE_OOM_ABOVE", "100,72")];
    let limits = (60.0, 60.0);
    let r = find_on(
        &dir,
        &vars,
        &finder_options(Granularity::Multiple(8)),
        limits,
        2,
    )
    .unwrap();
    assert_eq!((r.maximum, r.next_failing), (72, Some(80)));
    for t in every_trial(&r) {
        assert_eq!((t.ranks, t.cuda_visible.as_str()), (2, "0,1"));
    }
    let last = r.confirmations.last().unwrap();
    assert!(last.held && last.trial.reached_steps, "{last:?}");
    assert_eq!(last.steps, 20);
}

#[test]
fn the_answer_is_the_fake_s_limit_at_the_granularity_confirmed() {
    for (granularity, expected, next) in [
        (Granularity::Multiple(8), 96, 104),
        (Granularity::Multiple(4), 100, 104),
        (Granularity::Pow2, 64, 128),
    ] {
        let dir = Scratch::new("find");
        let r = find(
            &dir,
            &[("FAKE_OOM_ABOVE", "100")],
            &finder_options(granularity),
            60.0,
        )
        .unwrap();
        assert_eq!(
            (r.maximum, r.next_failing),
            (expected, Some(next)),
            "{granularity:?}"
        );
        // Every search trial's verdict is the fake's truth; fitting ones stopped when steady.
        for (t, &(batch, fitted)) in r.search.iter().zip(&r.found.trials) {
            assert_eq!(t.params.batch_size, batch);
            assert_eq!(fitted, batch <= 100);
            if fitted {
                assert_eq!(t.steady_at, Some(3), "batch {batch}: {:?}", t.step_peaks);
            }
        }
        // One confirmation, of the answer, for every step.
        assert_eq!(r.confirmations.len(), 1);
        let c = &r.confirmations[0];
        assert_eq!((c.batch_size, c.steps, c.held), (expected, 20, true));
        assert_eq!(c.trial.measured.reported_steps, 20);
        assert!(
            r.launch.contains("spawned"),
            "an `env` command is not forked: {}",
            r.launch
        );
        // Every trial is in the results file, the confirmation included.
        let lines = std::fs::read_to_string(dir.path("autobatch.trials.jsonl")).unwrap();
        assert_eq!(lines.lines().count(), r.search.len() + 1);
    }
}

#[test]
fn a_step_that_needs_more_memory_late_makes_the_answer_step_down() {
    // Batches above 100 run out at once; above 80, only at the fifth step: the search (steady
    // at the third) sees 96 fit, the 20-step confirmation does not.
    let dir = Scratch::new("late");
    let vars = [("FAKE_OOM_ABOVE", "100"), ("FAKE_LATE_OOM", "80,5")];
    let r = find(&dir, &vars, &finder_options(Granularity::Multiple(8)), 60.0).unwrap();
    assert_eq!(r.found.maximum, 96, "the search alone would answer 96");
    assert_eq!((r.maximum, r.next_failing), (80, Some(88)));
    let tried = confirmed(&r);
    // Down one size, then two; then pinned between the size that held and the one that failed.
    assert_eq!(tried, [(96, false), (88, false), (72, true), (80, true)]);
    assert!(
        r.tiers.recommended <= 80 && r.tiers.safe < r.tiers.recommended,
        "{:?}",
        r.tiers
    );
}

#[test]
fn a_group_that_hangs_in_its_confirmation_is_a_size_that_does_not_fit() {
    // Batches above 80 run three steps and then wait forever on both ranks: the search (steady
    // at the third step) sees 96 fit, the 20-step confirmation hangs, and each hang ends at
    // the stall limit, not the time limit.
    let dir = Scratch::new("stall");
    let vars = [("FAKE_OOM_ABOVE", "100"), ("FAKE_STALL_ABOVE", "80")];
    let started = std::time::Instant::now();
    let r = find_on(
        &dir,
        &vars,
        &finder_options(Granularity::Multiple(8)),
        (60.0, 1.0),
        2,
    )
    .unwrap();
    let took = started.elapsed().as_secs_f64();
    assert_eq!(r.found.maximum, 96, "the search alone would answer 96");
    assert_eq!((r.maximum, r.next_failing), (80, Some(88)));
    let tried = confirmed(&r);
    assert_eq!(tried, [(96, false), (88, false), (72, true), (80, true)]);
    for c in r.confirmations.iter().filter(|c| !c.held) {
        assert_eq!(c.trial.status, Status::Hang, "{:?}", c.trial);
        assert!(
            c.trial.reason.contains("after step 3"),
            "{}",
            c.trial.reason
        );
        assert!(c.trial.wall_s < 10.0, "{} s", c.trial.wall_s);
    }
    assert!(took < 40.0, "the finder took {took:.1} s");
    let text = render(&r);
    assert!(
        text.contains("confirmation: batch 96 for 20 steps in a group of its own (2 processes, batch per GPU): HANG: rank "),
        "{text}"
    );
    assert!(
        text.contains("**maximum 80**: held for 20 steps; 88 hung (counted as not fitting)"),
        "{text}"
    );
}

/// The finder over a group of 2 whose batches above 80 hold in their first 20-step run and run
/// out of memory in every later one, on rank 0: a size at the edge that holds once and not
/// again. The answer must hold in `runs` runs.
fn find_flaky(name: &str, runs: usize) -> AutobatchReport {
    let dir = Scratch::new(name);
    std::fs::create_dir_all(dir.path("flaky")).unwrap();
    let flaky = format!("80,{}", dir.str("flaky"));
    let vars = [
        ("FAKE_OOM_ABOVE", "100"),
        ("FAKE_FLAKY_ABOVE", flaky.as_str()),
    ];
    let o = Options {
        confirm_runs: runs,
        ..finder_options(Granularity::Multiple(8))
    };
    find_on(&dir, &vars, &o, (60.0, 60.0), 2).unwrap()
}

#[test]
fn an_answer_confirmed_twice_steps_down_from_a_size_that_holds_once() {
    let r = find_flaky("confirm-runs", 2);
    assert_eq!(r.found.maximum, 96, "the search alone would answer 96");
    assert_eq!(
        (r.maximum, r.next_failing, r.confirm_runs),
        (80, Some(88), 2)
    );
    // 96 held once and then ran out of memory, and so did 88, one size below; two sizes
    // further down, 72 held twice, and 80, between it and 88, held twice: the answer.
    assert_eq!(
        confirmed(&r),
        [
            (96, true),
            (96, false),
            (88, true),
            (88, false),
            (72, true),
            (72, true),
            (80, true),
            (80, true)
        ]
    );
    let text = render(&r);
    assert!(
        text.contains("**maximum 80**: held for 20 steps in each of 2 runs; 88 ran out of memory"),
        "{text}"
    );
    // Asked for one run, the same program's answer is the size that held once.
    let r = find_flaky("confirm-once", 1);
    assert_eq!((r.maximum, confirmed(&r)), (96, vec![(96, true)]));
}

#[test]
fn a_program_that_ignores_its_steps_is_stopped_when_steady() {
    let dir = Scratch::new("ignores");
    let vars = [("FAKE_OOM_ABOVE", "50"), ("FAKE_MODE", "hang_after_steps")];
    // Were its trials waited for, each would run into the time limit.
    let r = find(&dir, &vars, &finder_options(Granularity::Multiple(8)), 30.0).unwrap();
    assert_eq!(r.maximum, 48);
    let confirmation = &r.confirmations[0].trial;
    assert!(
        confirmation.reached_steps && confirmation.wall_s < 20.0,
        "stopped after its steps"
    );
    assert!(
        r.search.iter().all(|t| t.wall_s < 20.0),
        "stopped when steady"
    );
}

#[test]
fn a_failure_or_a_hang_stops_the_search_with_the_reason() {
    let dir = Scratch::new("fail");
    let e = find(
        &dir,
        &[("FAKE_MODE", "fail")],
        &finder_options(Granularity::Multiple(8)),
        60.0,
    )
    .unwrap_err();
    let message = e.to_string();
    assert!(
        message.contains("batch 8 FAILED: exit status 1"),
        "{message}"
    );
    assert!(
        message.contains("ValueError: the dataset has no split"),
        "{message}"
    );
    assert!(message.contains("says nothing about memory"), "{message}");

    let dir = Scratch::new("hang");
    let pids = dir.str("pids");
    let e = find(
        &dir,
        &[("FAKE_MODE", "hang"), ("FAKE_PID_FILE", &pids)],
        &finder_options(Granularity::Multiple(8)),
        2.0,
    )
    .unwrap_err();
    assert!(
        e.to_string()
            .contains("batch 8 HANG: ran past the time limit of 2 s"),
        "{e}"
    );

    let dir = Scratch::new("short");
    let e = find(
        &dir,
        &[("FAKE_MODE", "short")],
        &finder_options(Granularity::Multiple(8)),
        60.0,
    )
    .unwrap_err();
    assert!(e.to_string().contains("INCOMPLETE"), "{e}");

    // Exit 0 with no step line: fitting by the exit alone, every size would, up to the
    // largest there is, and none could be confirmed.
    let dir = Scratch::new("silent");
    let e = find(
        &dir,
        &[("FAKE_MODE", "silent")],
        &finder_options(Granularity::Multiple(8)),
        60.0,
    )
    .unwrap_err();
    assert!(
        e.to_string()
            .starts_with("batch 8 exited 0 without a step line, and the finder needs them"),
        "{e}"
    );
}

//! The batch finder over the user's command, against the fake training program: its answer is
//! the fake's limit at the granularity, and a hang or a failure stops it with the reason.

mod fake;

use std::time::Duration;

use fake::{params, program, Scratch};
use tuner::external::{find_batch, Bounds, Device, Limits, ResultsFile, Status, Stopped};
use tuner::search::Granularity;

fn bounds(granularity: Granularity) -> Bounds {
    Bounds {
        start: 8,
        granularity,
        cap: 1 << 20,
    }
}

#[test]
fn the_answer_is_the_fake_s_limit_at_the_granularity() {
    for (granularity, expected) in [
        (Granularity::Multiple(8), 96),
        (Granularity::Multiple(4), 100),
        (Granularity::Pow2, 64),
    ] {
        let dir = Scratch::new("find");
        let prog = program(&[("FAKE_OOM_ABOVE", "100")]);
        let device = Device::stand_in("GPU 0", "0");
        let limits = Limits::new(Duration::from_secs(60));
        let mut results = ResultsFile::create(&dir.path("results.jsonl")).unwrap();
        let mut shown = 0;
        let search = find_batch(
            &prog,
            &params(8),
            &device,
            &dir.0,
            &limits,
            bounds(granularity),
            &mut results,
            |_| shown += 1,
        )
        .unwrap();
        let found = search.found.unwrap();
        assert_eq!(found.maximum, expected, "{granularity:?}");
        assert!(found.next_failed);
        // Every trial's verdict is the fake's truth, and each is in the results file.
        assert_eq!(found.trials.len(), search.trials.len());
        for (r, &(batch, fitted)) in search.trials.iter().zip(&found.trials) {
            assert_eq!(r.params.batch_size, batch);
            assert_eq!(fitted, batch <= 100);
            let status = if batch <= 100 {
                Status::Ok
            } else {
                Status::Oom
            };
            assert_eq!(r.status, status, "batch {batch}: {:?}", r.stderr_tail);
        }
        assert_eq!(shown, search.trials.len());
        let (written, bad) = ResultsFile::read(&dir.path("results.jsonl")).unwrap();
        assert_eq!((written.len(), bad), (search.trials.len(), 0));
    }
}

#[test]
fn a_program_that_ignores_its_steps_is_stopped_after_them() {
    let dir = Scratch::new("ignores");
    let prog = program(&[("FAKE_OOM_ABOVE", "50"), ("FAKE_MODE", "hang_after_steps")]);
    let mut results = ResultsFile::create(&dir.path("results.jsonl")).unwrap();
    let search = find_batch(
        &prog,
        &params(8),
        &Device::stand_in("GPU 0", "0"),
        &dir.0,
        // Were the trials waited for, every fitting batch would be a hang.
        &Limits::new(Duration::from_secs(30)),
        bounds(Granularity::Multiple(8)),
        &mut results,
        |_| {},
    )
    .unwrap();
    assert_eq!(search.found.unwrap().maximum, 48);
    assert!(search
        .trials
        .iter()
        .all(|r| r.wall_s < 25.0 && matches!(r.status, Status::Ok | Status::Oom)));
}

#[test]
fn a_crash_after_every_step_still_fits() {
    let dir = Scratch::new("crash");
    let prog = program(&[("FAKE_OOM_ABOVE", "40"), ("FAKE_MODE", "crash_at_exit")]);
    let mut results = ResultsFile::create(&dir.path("results.jsonl")).unwrap();
    let search = find_batch(
        &prog,
        &params(8),
        &Device::stand_in("GPU 0", "0"),
        &dir.0,
        &Limits::new(Duration::from_secs(60)),
        bounds(Granularity::Multiple(8)),
        &mut results,
        |_| {},
    )
    .unwrap();
    assert_eq!(search.found.unwrap().maximum, 40);
    assert!(search
        .trials
        .iter()
        .any(|r| r.status == Status::Failed && r.reached_steps));
}

#[test]
fn a_failure_or_a_hang_stops_the_search_with_the_reason() {
    let dir = Scratch::new("stop");
    let mut results = ResultsFile::create(&dir.path("results.jsonl")).unwrap();
    let device = Device::stand_in("GPU 0", "0");

    let fail = program(&[("FAKE_MODE", "fail")]);
    let e = find_batch(
        &fail,
        &params(8),
        &device,
        &dir.path("fail"),
        &Limits::new(Duration::from_secs(60)),
        bounds(Granularity::Multiple(8)),
        &mut results,
        |_| {},
    )
    .unwrap_err();
    let Stopped::Trial(r) = &e else { panic!("{e}") };
    assert_eq!((r.status, r.params.batch_size), (Status::Failed, 8));
    let message = e.to_string();
    assert!(
        message.contains("batch 8 failed (exit status 1)"),
        "{message}"
    );
    assert!(
        message.contains("ValueError: the dataset has no split"),
        "{message}"
    );
    assert!(message.contains("says nothing about memory"), "{message}");

    let pids = dir.str("pids");
    let hang = program(&[("FAKE_MODE", "hang"), ("FAKE_PID_FILE", &pids)]);
    let e = find_batch(
        &hang,
        &params(8),
        &device,
        &dir.path("hang"),
        &Limits::new(Duration::from_secs(2)),
        bounds(Granularity::Multiple(8)),
        &mut results,
        |_| {},
    )
    .unwrap_err();
    assert!(
        e.to_string()
            .contains("batch 8 hung (ran past the time limit of 2 s)"),
        "{e}"
    );
    assert_eq!(ResultsFile::read(results.path()).unwrap().0.len(), 2);
}

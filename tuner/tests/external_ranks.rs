//! A trial of a data-parallel program: a group of processes, one per GPU, started as torchrun
//! would, each reporting on its own. Driven against the fake training program in a group of
//! two: the variables each rank finds, a group that fits, and the three ways one rank can end
//! the group (out of memory, a hang, an early exit), each ended quickly, told apart, and with no
//! process left behind.

mod fake;

use std::time::{Duration, Instant};

use fake::{group_trial, log_entries, none_left, params, program, Scratch};
use tuner::classify::Status;
use tuner::gpu::Device;
use tuner::program::Params;
use tuner::trial::{Limits, Stop, TrialResult};

fn pair() -> [Device; 2] {
    [
        Device::stand_in("GPU 2", "2"),
        Device::stand_in("GPU 3", "3"),
    ]
}

fn limits(seconds: u64) -> Limits {
    Limits::new(Duration::from_secs(seconds))
}

/// A trial of the fake on two ranks, with `vars`, timed.
fn two_ranks(dir: &Scratch, vars: &[(&str, &str)], p: &Params, limit: u64) -> (TrialResult, f64) {
    let pids = dir.str("pids");
    let vars = [vars, &[("FAKE_PIDS", pids.as_str())]].concat();
    let start = Instant::now();
    let r = group_trial(
        &program(&vars),
        p,
        0,
        &pair(),
        &dir.path("trial"),
        &limits(limit),
    );
    (r, start.elapsed().as_secs_f64())
}

#[test]
fn every_rank_finds_torchrun_s_variables_and_reports_on_its_own() {
    let dir = Scratch::new("ranks-ok");
    let log = dir.str("log.jsonl");
    let (r, _) = two_ranks(&dir, &[("FAKE_LOG", &log)], &params(16), 60);
    assert_eq!(r.status, Status::Ok, "{r:?}");
    assert!(r.reached_steps);
    assert_eq!((r.ranks, r.device.as_str()), (2, "GPU 2 + GPU 3"));
    assert_eq!(r.cuda_visible, "2,3");
    let mut entries = log_entries(&dir.path("log.jsonl"));
    entries.sort_by_key(|e| e["torchrun"]["RANK"].as_str().unwrap().to_string());
    assert_eq!(entries.len(), 2);
    let port = &entries[0]["torchrun"]["MASTER_PORT"];
    assert!(port.as_str().unwrap().parse::<u16>().unwrap() > 0);
    for (rank, e) in entries.iter().enumerate() {
        let t = &e["torchrun"];
        assert_eq!(t["RANK"], rank.to_string());
        assert_eq!(t["LOCAL_RANK"], rank.to_string());
        assert_eq!(
            (&t["WORLD_SIZE"], &t["LOCAL_WORLD_SIZE"]),
            (&"2".into(), &"2".into())
        );
        assert_eq!(
            (&t["MASTER_ADDR"], &t["MASTER_PORT"]),
            (&"127.0.0.1".into(), port)
        );
        // Every rank sees the group's GPUs and picks its own by LOCAL_RANK, as under torchrun.
        assert_eq!(e["cuda_visible_devices"], "2,3");
        assert_eq!(e["nccl_nvls_enable"], "0");
        // Its own report file, each line with its rank.
        let report = dir.path("trial").join(format!("report.rank{rank}.jsonl"));
        let text = std::fs::read_to_string(&report).unwrap();
        assert!(text.lines().count() >= 3, "{text}");
        for line in text.lines() {
            let v: serde_json::Value = serde_json::from_str(line).unwrap();
            assert_eq!(v["rank"], rank, "{line}");
        }
    }
    none_left(&dir.path("pids"), 2);
}

#[test]
fn one_rank_out_of_memory_ends_the_group_at_once() {
    let dir = Scratch::new("ranks-oom");
    // Rank 1 runs out of memory; rank 0 waits for it in a collective forever.
    let vars = [("FAKE_RANK_MODE", "1:oom"), ("FAKE_OTHERS", "wait")];
    let (r, took) = two_ranks(&dir, &vars, &params(16), 60);
    assert_eq!(r.status, Status::Oom, "{r:?}");
    assert_eq!(r.fits(), Some(false));
    assert!(r.reason.starts_with("rank 1 of 2:"), "{}", r.reason);
    assert!(took < 10.0, "the group took {took:.1} s to end");
    none_left(&dir.path("pids"), 2);

    // The same with the message printed and the rank lingering: the message alone ends it.
    let dir = Scratch::new("ranks-oom-linger");
    let vars = [
        ("FAKE_RANK_MODE", "0:oom_then_linger"),
        ("FAKE_OTHERS", "wait"),
    ];
    let (r, took) = two_ranks(&dir, &vars, &params(16), 60);
    assert_eq!(r.status, Status::Oom, "{r:?}");
    assert!(r.reason.starts_with("rank 0 of 2:"), "{}", r.reason);
    assert!(took < 10.0, "the group took {took:.1} s to end");
    none_left(&dir.path("pids"), 2);
}

#[test]
fn a_hanging_rank_is_a_hang_of_the_group_and_every_process_goes() {
    let dir = Scratch::new("ranks-hang");
    let (r, took) = two_ranks(&dir, &[("FAKE_RANK_MODE", "1:hang")], &params(16), 3);
    assert_eq!(r.status, Status::Hang, "{r:?}");
    assert!(r.reason.contains("time limit of 3 s"), "{}", r.reason);
    assert!((3.0..8.0).contains(&took), "{took:.1} s");
    assert_eq!(r.fits(), None);
    // Rank 1, its child, and rank 0 (which finished and exited by itself).
    none_left(&dir.path("pids"), 3);
}

#[test]
fn a_rank_silent_after_its_third_step_ends_the_group_as_hung_at_the_stall_limit() {
    let dir = Scratch::new("ranks-stall");
    let pids = dir.str("pids");
    // Rank 1 (and a worker of its own) stops after three steps; rank 0 runs on to its end.
    let vars = [("FAKE_RANK_MODE", "1:stall"), ("FAKE_PIDS", pids.as_str())];
    let p = Params {
        steps: 10,
        ..params(16)
    };
    let stall = Limits {
        stall_limit: Duration::from_secs(1),
        ..limits(60)
    };
    let start = Instant::now();
    let r = group_trial(&program(&vars), &p, 0, &pair(), &dir.path("trial"), &stall);
    let took = start.elapsed().as_secs_f64();
    assert_eq!(r.status, Status::Hang, "{r:?}");
    assert!(
        r.reason
            .starts_with("rank 1 of 2: no report or output for 1 s after step 3 ("),
        "{}",
        r.reason
    );
    assert!(r.reason.ends_with("ended as hung"), "{}", r.reason);
    assert!(
        (1.0..8.0).contains(&took),
        "the group took {took:.1} s to end"
    );
    assert_eq!(r.fits(), Some(false));
    // Both ranks and rank 1's worker.
    none_left(&dir.path("pids"), 3);
}

#[test]
fn a_rank_that_exits_early_ends_the_group_as_incomplete() {
    let dir = Scratch::new("ranks-short");
    let vars = [("FAKE_RANK_MODE", "1:short"), ("FAKE_OTHERS", "wait")];
    let p = Params {
        steps: 4,
        ..params(16)
    };
    let (r, took) = two_ranks(&dir, &vars, &p, 60);
    assert_eq!(r.status, Status::Incomplete, "{r:?}");
    assert!(r.reason.starts_with("rank 1 of 2:"), "{}", r.reason);
    assert!(took < 10.0, "the group took {took:.1} s to end");
    none_left(&dir.path("pids"), 2);
}

/// A program that reports on rank 0 alone: rank 1 runs every step and exits 0 with none
/// reported, which the tuner cannot tell from a rank that ended early, and says so.
#[test]
fn a_rank_that_reports_nothing_beside_one_that_does_fails_the_group_saying_so() {
    let dir = Scratch::new("ranks-unreported");
    let (r, _) = two_ranks(&dir, &[("FAKE_RANK_MODE", "1:silent")], &params(16), 60);
    assert_eq!(r.status, Status::Failed, "{r:?}");
    assert!(
        r.reason
            .starts_with("rank 1 of 2: reported no step, where another rank reported"),
        "{}",
        r.reason
    );
    assert_eq!(r.fits(), None);
    none_left(&dir.path("pids"), 2);
}

#[test]
fn a_finder_s_group_stops_once_every_rank_is_steady() {
    let dir = Scratch::new("ranks-steady");
    let p = Params {
        steps: 200,
        warmup_steps: 0,
        ..params(16)
    };
    let pids = dir.str("pids");
    let r = group_trial(
        &program(&[("FAKE_STEP_S", "0.02"), ("FAKE_PIDS", &pids)]),
        &p,
        0,
        &pair(),
        &dir.path("trial"),
        &Limits {
            stop: Stop::WhenSteady,
            ..limits(60)
        },
    );
    assert_eq!(r.status, Status::Ok, "{r:?}");
    assert!(r.steady_at.is_some_and(|s| s < 20), "{:?}", r.steady_at);
    assert_eq!(r.fits(), Some(true));
    none_left(&dir.path("pids"), 2);
}

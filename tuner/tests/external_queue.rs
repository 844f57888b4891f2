//! The queue of trials over several (stand-in) GPUs, against the fake training program: one
//! trial per device at a time, trials on different devices at once, none lost, every result in
//! the results file as soon as it is known.

mod fake;

use std::collections::HashMap;
use std::time::Duration;

use fake::{log_entries, params, program, results_in, run_options, trial, trial_of, Scratch};
use tuner::classify::Status;
use tuner::gpu::Device;
use tuner::program::Params;
use tuner::run::{run_queue, ResultsFile, Standing as Progress};
use tuner::trial::larger_batch_after_oom;
use tuner::trial::{Limits, TrialResult};

/// `jobs` of `prog` from one queue over `devices`, quietly, the results file in `dir`.
fn queue(
    dir: &Scratch,
    prog: &tuner::program::Program,
    jobs: &[Params],
    devices: &[Device],
    skip: impl Fn(&Params, &[TrialResult]) -> Option<String> + Sync,
) -> Vec<TrialResult> {
    let limits = Limits::new(Duration::from_secs(60));
    let mut results = ResultsFile::create(&dir.path("results.jsonl")).unwrap();
    run_queue(
        jobs,
        devices,
        |i, p, d| trial(prog, p, i, d, &dir.path(&format!("trial-{i}")), &limits),
        skip,
        &mut results,
        |_: &Progress| {},
    )
    .unwrap()
}

#[test]
fn three_devices_run_trials_in_parallel_one_each_and_lose_none() {
    let dir = Scratch::new("queue");
    let log = dir.str("log.jsonl");
    let prog = program(&[("FAKE_LOG", &log), ("FAKE_STEP_S", "0.1")]);
    let jobs: Vec<Params> = (1..=9)
        .map(|i| Params {
            steps: 3,
            warmup_steps: 0,
            ..params(8 * i)
        })
        .collect();
    let devices: Vec<Device> = (0..3)
        .map(|i| Device::stand_in(&format!("GPU {i}"), &(10 + i).to_string()))
        .collect();
    let limits = Limits::new(Duration::from_secs(60));
    let mut results = ResultsFile::create(&dir.path("results.jsonl")).unwrap();
    let results_path = dir.path("results.jsonl");
    let mut seen = Vec::new();
    let done = run_queue(
        &jobs,
        &devices,
        |i, p, d| trial(&prog, p, i, d, &dir.path(&format!("trial-{i}")), &limits),
        |_: &Params, _: &[TrialResult]| None,
        &mut results,
        |pr: &Progress| {
            // Written as it comes: the file already holds every finished trial.
            let (written, bad) = results_in(&results_path);
            assert_eq!((written.len(), bad), (pr.done, 0));
            assert_eq!(pr.done + pr.running + pr.left, pr.total);
            seen.push(pr.line());
        },
    )
    .unwrap();

    assert_eq!(done.len(), 9);
    assert_eq!(
        done.iter().map(|r| r.index).collect::<Vec<_>>(),
        (0..9).collect::<Vec<_>>()
    );
    assert!(
        done.iter().all(|r| r.status == Status::Ok),
        "{:?}",
        done.iter().map(|r| &r.stderr_tail).collect::<Vec<_>>()
    );
    assert_eq!(seen.len(), 9);
    assert!(seen.last().unwrap().contains("[9/9]"), "{seen:?}");

    // Each trial ran where its result says, with that GPU alone visible.
    let entries = log_entries(&dir.path("log.jsonl"));
    assert_eq!(entries.len(), 9);
    let mut by_device: HashMap<String, Vec<(f64, f64)>> = HashMap::new();
    for e in &entries {
        let index = trial_of(e);
        let r = &done[index];
        assert_eq!(e["cuda_visible_devices"], r.cuda_visible.as_str());
        assert_eq!(e["args"]["batch_size"], r.params.batch_size);
        by_device
            .entry(r.device.clone())
            .or_default()
            .push((e["start"].as_f64().unwrap(), e["end"].as_f64().unwrap()));
    }
    assert_eq!(by_device.len(), 3, "every device took trials");
    // Never two at once on one device...
    for (device, spans) in &mut by_device {
        spans.sort_by(|a, b| a.0.partial_cmp(&b.0).unwrap());
        for w in spans.windows(2) {
            assert!(w[0].1 <= w[1].0, "{device}: {w:?} overlap");
        }
    }
    // ...and some at once on different devices.
    let all: Vec<(&String, (f64, f64))> = by_device
        .iter()
        .flat_map(|(d, s)| s.iter().map(move |x| (d, *x)))
        .collect();
    let overlapping = all
        .iter()
        .any(|(d1, a)| all.iter().any(|(d2, b)| d1 != d2 && a.0 < b.1 && b.0 < a.1));
    assert!(
        overlapping,
        "no two trials ran at the same time: {by_device:?}"
    );

    let (back, bad) = results_in(&dir.path("results.jsonl"));
    assert_eq!(bad, 0);
    let mut indices: Vec<usize> = back.iter().map(|r| r.index).collect();
    indices.sort_unstable();
    assert_eq!(indices, (0..9).collect::<Vec<_>>());
}

/// Trials side by side on two GPUs each run on their GPU's share of the tuner's cores: the
/// shares are disjoint and together the cores the tuner may use.
#[test]
fn trials_side_by_side_each_run_on_their_share_of_the_cores() {
    let Some(allowed) = common::affinity::thread_cpus() else {
        panic!("this process's CPU affinity cannot be read");
    };
    let dir = Scratch::new("affinity");
    let log = dir.str("log.jsonl");
    let prog = program(&[("FAKE_LOG", &log), ("FAKE_STEP_S", "0.05")]);
    let jobs: Vec<Params> = (1..=4).map(|i| params(8 * i)).collect();
    let mut devices = vec![
        Device::stand_in("GPU 0", "0"),
        Device::stand_in("GPU 1", "1"),
    ];
    tuner::gpu::share_cpus(&mut devices, &allowed);
    let done = queue(&dir, &prog, &jobs, &devices, |_, _| None);
    assert!(done.iter().all(|r| r.status == Status::Ok), "{done:?}");
    let mut by_device: HashMap<String, Vec<usize>> = HashMap::new();
    for e in log_entries(&dir.path("log.jsonl")) {
        let r = &done[trial_of(&e)];
        let cpus: Vec<usize> = serde_json::from_value(e["cpus"].clone()).unwrap();
        // What the program saw is what its result says and what its device was given.
        assert_eq!(Some(&cpus), r.cpus.as_ref(), "{}", r.device);
        let device = devices.iter().find(|d| d.label == r.device).unwrap();
        assert_eq!(Some(&cpus), device.cpus.as_ref());
        let seen = by_device.entry(r.device.clone()).or_insert(cpus.clone());
        assert_eq!(*seen, cpus, "one share per device");
    }
    let shares: Vec<&Vec<usize>> = by_device.values().collect();
    if allowed.len() >= 2 {
        assert_eq!(shares.len(), 2, "both devices took trials");
        assert!(
            shares[0].iter().all(|c| !shares[1].contains(c)),
            "{shares:?}"
        );
        let mut all: Vec<usize> = shares.iter().flat_map(|s| s.iter().copied()).collect();
        all.sort_unstable();
        assert_eq!(all, allowed, "the shares cover the tuner's cores");
    }
    // One device: no pinning, the trial has every core the tuner has.
    let mut one = vec![Device::stand_in("GPU 0", "0")];
    tuner::gpu::share_cpus(&mut one, &allowed);
    let r = trial(
        &prog,
        &params(8),
        9,
        &one[0],
        &dir.path("one"),
        &Limits::new(Duration::from_secs(60)),
    );
    assert_eq!(r.cpus, None);
    let e = log_entries(&dir.path("log.jsonl")).pop().unwrap();
    let cpus: Vec<usize> = serde_json::from_value(e["cpus"].clone()).unwrap();
    assert_eq!(cpus, allowed);
}

#[test]
fn a_sweep_skips_larger_batches_of_a_setting_that_ran_out_of_memory() {
    let dir = Scratch::new("skip");
    let prog = program(&[("FAKE_OOM_ABOVE", "20")]);
    let jobs: Vec<Params> = [8, 16, 32, 64].map(params).to_vec();
    let devices = [Device::stand_in("GPU 0", "0")];
    let done = queue(&dir, &prog, &jobs, &devices, larger_batch_after_oom);
    let statuses: Vec<Status> = done.iter().map(|r| r.status).collect();
    assert_eq!(
        statuses,
        [Status::Ok, Status::Ok, Status::Oom, Status::Skipped]
    );
    assert!(done[3].reason.contains("batch 32"), "{}", done[3].reason);
    assert_eq!(results_in(&dir.path("results.jsonl")).0.len(), 4);
}

/// What a search that asks about several sizes at a time runs them with: `Run::several`, one
/// trial per group of GPUs at once, each as a finder's trial stops, numbered from `first`.
#[test]
fn several_trials_at_once_take_one_group_of_gpus_each() {
    use tuner::run::{Run, RunOptions};
    use tuner::trial::Stop;
    for (gpus, ranks) in [(2, 1), (4, 2)] {
        let dir = Scratch::new("several");
        let log = dir.str("log.jsonl");
        let vars = [("FAKE_LOG", log.as_str()), ("FAKE_STEP_S", "0.3")];
        let options = RunOptions {
            json: None,
            fork: false,
            ranks,
            ..run_options(&dir, &vars, gpus)
        };
        let run = Run::new(options, "autobatch").unwrap();
        let mut results = ResultsFile::create(&dir.path("results.jsonl")).unwrap();
        let jobs = [params(8), params(16)];
        let done = run.several(&jobs, 5, Stop::AtExit, &mut results).unwrap();
        let indices: Vec<usize> = done.iter().map(|r| r.index).collect();
        assert_eq!(indices, [5, 6]);
        assert!(done
            .iter()
            .all(|r| r.status == Status::Ok && r.ranks == ranks));
        // Two groups, one trial each: side by side, on GPUs of their own.
        let visible: Vec<&str> = done.iter().map(|r| r.cuda_visible.as_str()).collect();
        let expected: [&str; 2] = if ranks == 1 {
            ["0", "1"]
        } else {
            ["0,1", "2,3"]
        };
        let mut sorted = visible.clone();
        sorted.sort();
        assert_eq!(sorted, expected);
        let entries = log_entries(&dir.path("log.jsonl"));
        assert_eq!(entries.len(), gpus);
        let starts: Vec<f64> = entries
            .iter()
            .map(|e| e["start"].as_f64().unwrap())
            .collect();
        let ends: Vec<f64> = entries.iter().map(|e| e["end"].as_f64().unwrap()).collect();
        let first_end = ends.iter().cloned().fold(f64::INFINITY, f64::min);
        assert!(
            starts.iter().all(|s| *s < first_end),
            "every process started before any ended: {starts:?} {ends:?}"
        );
    }
}

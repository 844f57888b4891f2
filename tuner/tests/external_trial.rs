//! One trial of the user's command, driven against the fake training program: what reaches the
//! program, what comes back through the report file, and how each way of ending is told apart.

mod fake;

use std::path::Path;
use std::time::Duration;

use fake::{log_entries, none_left, params, program, trial, Scratch};
use tuner::classify::Status;
use tuner::gpu::Device;
use tuner::nvml::MemorySource;
use tuner::program::{Params, Precision, Program};
use tuner::protocol::ThroughputSource;
use tuner::trial::{Limits, Stop};

fn limits(seconds: u64) -> Limits {
    Limits::new(Duration::from_secs(seconds))
}

#[test]
fn placeholders_and_environment_reach_the_program() {
    let dir = Scratch::new("env");
    let log = dir.str("log.jsonl");
    let prog = program(&[("FAKE_LOG", &log)]);
    let p = Params {
        batch_size: 24,
        workers: 3,
        amp: Precision::Bf16,
        accumulation: 2,
        steps: 4,
        warmup_steps: 2,
        ..Params::default()
    };
    let device = Device::stand_in("GPU 5", "5");
    let r = trial(&prog, &p, 7, &device, &dir.path("trial"), &limits(60));
    assert_eq!(r.status, Status::Ok, "{:?}", r.stderr_tail);
    assert_eq!(
        (r.index, r.device.as_str(), r.cuda_visible.as_str()),
        (7, "GPU 5", "5")
    );
    assert!(r.command.contains(&"24".to_string()) && r.command.contains(&"bf16".to_string()));

    let entries = log_entries(&dir.path("log.jsonl"));
    assert_eq!(entries.len(), 1);
    let e = &entries[0];
    // The placeholders, as the program's flags saw them.
    assert_eq!(e["args"]["batch_size"], 24);
    assert_eq!(e["args"]["workers"], 3);
    assert_eq!(e["args"]["amp"], "bf16");
    assert_eq!(e["args"]["accumulation"], 2);
    assert_eq!(e["args"]["steps"], 4);
    assert_eq!(e["args"]["warmup"], 2);
    // The same values in the environment, and the trial's place.
    let env = &e["env"];
    for (k, v) in [
        ("PERF_LESSONS_BATCH_SIZE", "24"),
        ("PERF_LESSONS_WORKERS", "3"),
        ("PERF_LESSONS_AMP", "bf16"),
        ("PERF_LESSONS_ACCUMULATION", "2"),
        ("PERF_LESSONS_STEPS", "4"),
        ("PERF_LESSONS_WARMUP_STEPS", "2"),
        ("PERF_LESSONS_TRIAL", "7"),
    ] {
        assert_eq!(env[k], v, "{k}");
    }
    assert!(env["PERF_LESSONS_REPORT"]
        .as_str()
        .unwrap()
        .ends_with("report.jsonl"));
    assert_eq!(e["cuda_visible_devices"], "5");
    assert_eq!(e["nccl_nvls_enable"], "0");
    // A process group of its own (env execs python, so the program leads it).
    assert_eq!(e["pid"], e["pgid"]);
    let ours = std::fs::read_to_string("/proc/self/stat").unwrap();
    let our_group = ours
        .rsplit_once(')')
        .unwrap()
        .1
        .split_whitespace()
        .nth(2)
        .unwrap();
    assert_ne!(e["pgid"].to_string(), our_group);

    // What came back through the report: 6 steps, 2 dropped as warmup, 48 samples per 10 ms.
    let m = &r.measured;
    assert_eq!(m.source, ThroughputSource::Protocol);
    assert_eq!((m.reported_steps, m.warmup_steps), (6, 2));
    assert!((m.samples_per_s.unwrap() - 4800.0).abs() < 1e-6, "{m:?}");
    assert!((m.step_ms.as_ref().unwrap().median - 10.0).abs() < 1e-9);
    assert!((m.forward_ms.as_ref().unwrap().median - 3.0).abs() < 1e-9);
    assert!((m.backward_ms.as_ref().unwrap().median - 5.0).abs() < 1e-9);
    assert_eq!(m.framework_peak_bytes, Some(24_000_000));
    assert!(m.program_difference.unwrap().abs() < 1e-9);
    assert!(r.reached_steps);
    assert_eq!(r.report.bad_lines, 0);
    // A stand-in device has no NVML: the reading says so rather than inventing one.
    assert_eq!(r.memory.source, MemorySource::None);
    assert!(r.memory.peak_bytes.is_none());
    assert!(r.stderr_tail.is_empty());
}

/// `--amp on` reaches the program as the best precision the trial's GPU has: bf16 from compute
/// capability 8.0, fp16 before it and where the capability is not known; a precision asked by
/// name reaches it as it is.
#[test]
fn on_reaches_the_program_as_the_precision_its_gpu_has() {
    let dir = Scratch::new("precision");
    let log = dir.str("log.jsonl");
    let prog = program(&[("FAKE_LOG", &log)]);
    let cases = [
        (Precision::On, Some((9, 0)), "bf16", true),
        (Precision::On, Some((7, 0)), "fp16", true),
        (Precision::On, None, "fp16", true),
        (Precision::Fp16, Some((9, 0)), "fp16", false),
        (Precision::Bf16, Some((7, 0)), "bf16", false),
        (Precision::Off, Some((9, 0)), "off", false),
    ];
    for (i, &(asked, capability, expected, from_on)) in cases.iter().enumerate() {
        let device = Device {
            capability,
            ..Device::stand_in("GPU 0", "0")
        };
        let p = Params {
            amp: asked,
            ..params(8)
        };
        let r = trial(
            &prog,
            &p,
            i,
            &device,
            &dir.path(&format!("t{i}")),
            &limits(60),
        );
        assert_eq!(r.status, Status::Ok, "{:?}", r.stderr_tail);
        assert_eq!(
            r.params.amp.as_str(),
            expected,
            "{asked:?} on {capability:?}"
        );
        assert_eq!(r.params.amp_from_on, from_on);
        assert_eq!(r.params.as_asked(), p);
        let e = &log_entries(&dir.path("log.jsonl"))[i];
        assert_eq!(e["args"]["amp"], expected, "the flag {{amp}}");
        assert_eq!(e["env"]["PERF_LESSONS_AMP"], expected);
    }
}

/// The tuner's own clock (the report's lines as they arrived) agrees with step times that add
/// up to the loop, and catches step times that leave half of it out.
#[test]
fn the_tuner_s_clock_checks_the_reported_step_times() {
    let dir = Scratch::new("clock");
    let p = Params {
        batch_size: 10,
        steps: 10,
        warmup_steps: 1,
        ..params(10)
    };
    let device = Device::stand_in("GPU 0", "0");
    // A pause of 0.3 s between the warmup and the first measured step, in no step (the
    // allocator's cache emptied before measuring, slow while other trials share the host), is
    // no fault of the step times: counted from the warmup's line it read as 60% of 0.5 s.
    for (reported, pause, expected) in [("1", "0", 0.0), ("0.5", "0", 1.0), ("1", "0.3", 0.0)] {
        let prog = program(&[
            ("FAKE_STEP_S", "0.05"),
            ("FAKE_STEP_MEASURED", "1"),
            ("FAKE_STEP_REPORTED", reported),
            ("FAKE_PAUSE_AFTER_WARMUP", pause),
        ]);
        let folder = dir.path(&format!("{reported}-{pause}"));
        let r = trial(&prog, &p, 0, &device, &folder, &limits(60));
        assert_eq!(r.status, Status::Ok, "{:?}", r.stderr_tail);
        let m = &r.measured;
        // 9 steps of 50 ms are 0.45 s on the clock; the poll and the time a line takes to be
        // written and read are a few ms of it.
        let d = m
            .clock_difference
            .expect("a warmup line and lines over time");
        println!("reported x{reported}: {:+.2}% against the clock", 100.0 * d);
        let tolerance = if expected == 0.0 { 0.02 } else { 0.25 };
        assert!(
            (d - expected).abs() < tolerance,
            "reported x{reported}, pause {pause} s: {:+.1}% against the clock ({m:?})",
            100.0 * d
        );
        // The program's own count is made from the same step times: no help here.
        assert!(m.program_difference.unwrap().abs() < 1e-9);
    }
}

#[test]
fn the_time_limit_kills_a_hang_and_its_children() {
    let dir = Scratch::new("hang");
    let pids = dir.str("pids");
    let prog = program(&[("FAKE_MODE", "hang"), ("FAKE_PID_FILE", &pids)]);
    let device = Device::stand_in("GPU 0", "0");
    let r = trial(
        &prog,
        &params(8),
        0,
        &device,
        &dir.path("trial"),
        &limits(3),
    );
    assert_eq!(r.status, Status::Hang, "{r:?}");
    assert!(r.reason.contains("time limit of 3 s"), "{}", r.reason);
    assert!(r.wall_s >= 3.0 && r.wall_s < 20.0, "{}", r.wall_s);
    assert!(
        r.stderr_tail
            .iter()
            .any(|l| l.contains("waiting for a collective")),
        "{:?}",
        r.stderr_tail
    );
    assert_eq!(
        none_left(Path::new(&pids), 2),
        2,
        "the fake and the child it started"
    );
}

#[test]
fn out_of_memory_is_told_apart_from_a_crash() {
    let dir = Scratch::new("endings");
    let device = Device::stand_in("GPU 0", "0");

    let oom = program(&[("FAKE_OOM_ABOVE", "16")]);
    let r = trial(&oom, &params(32), 0, &device, &dir.path("oom"), &limits(60));
    assert_eq!(r.status, Status::Oom, "{r:?}");
    assert_eq!(r.oom.as_ref().unwrap().stack, "PyTorch");
    // Ended at the message, or by its exit if that came first.
    assert!(
        r.reason.starts_with("out of memory (PyTorch)"),
        "{}",
        r.reason
    );
    assert!(!r.reached_steps);
    assert!(r.stderr_tail.last().unwrap().contains("CUDA out of memory"));
    // Below the limit the same program is fine.
    let r = trial(
        &oom,
        &params(16),
        1,
        &device,
        &dir.path("fits"),
        &limits(60),
    );
    assert_eq!(r.status, Status::Ok, "{:?}", r.stderr_tail);

    let fail = program(&[("FAKE_MODE", "fail")]);
    let r = trial(
        &fail,
        &params(8),
        2,
        &device,
        &dir.path("fail"),
        &limits(60),
    );
    assert_eq!(r.status, Status::Failed);
    assert!(r.oom.is_none());
    assert_eq!(r.reason, "exit status 1");
    assert!(
        r.stderr_tail.last().unwrap().contains("ValueError"),
        "{:?}",
        r.stderr_tail
    );
    assert!(r.measured.samples_per_s.is_none());

    // A crash on the way out, after every step was reported.
    let crash = program(&[("FAKE_MODE", "crash_at_exit")]);
    let r = trial(
        &crash,
        &params(8),
        3,
        &device,
        &dir.path("crash"),
        &limits(60),
    );
    assert_eq!(r.status, Status::Failed);
    assert!(r.reason.contains("signal 6"), "{}", r.reason);
    assert!(r.reached_steps);
    assert!(r.measured.samples_per_s.is_some());

    let missing = Program::new(vec!["/nonexistent/train".into()]).unwrap();
    let r = trial(
        &missing,
        &params(8),
        4,
        &device,
        &dir.path("missing"),
        &limits(60),
    );
    assert_eq!(r.status, Status::Failed);
    assert!(r.reason.contains("could not start"), "{}", r.reason);
}

#[test]
fn a_silent_program_is_measured_by_the_wall_clock() {
    let dir = Scratch::new("silent");
    let prog = program(&[("FAKE_MODE", "silent"), ("FAKE_STEP_S", "0.05")]);
    let p = Params {
        steps: 4,
        warmup_steps: 1,
        ..params(10)
    };
    let device = Device::stand_in("GPU 0", "0");
    let r = trial(&prog, &p, 0, &device, &dir.path("trial"), &limits(60));
    assert_eq!(r.status, Status::Ok, "{:?}", r.stderr_tail);
    assert_eq!(r.report.lines, 0);
    let m = &r.measured;
    assert_eq!(m.source, ThroughputSource::WallClock);
    // 50 samples over the whole process: start-up makes it slower than 10 per 50 ms.
    let rate = m.samples_per_s.unwrap();
    assert!((rate - 50.0 / r.wall_s).abs() < 1e-9);
    assert!(rate > 0.0 && rate < 200.0, "{rate}");
    assert!(m.step_ms.is_none());
}

#[test]
fn garbage_in_the_report_is_counted_and_the_steps_kept() {
    let dir = Scratch::new("garbage");
    let prog = program(&[("FAKE_MODE", "garbage")]);
    let device = Device::stand_in("GPU 0", "0");
    let r = trial(
        &prog,
        &params(8),
        0,
        &device,
        &dir.path("trial"),
        &limits(60),
    );
    assert_eq!(r.status, Status::Ok, "{:?}", r.stderr_tail);
    assert_eq!(r.report.bad_lines, 2);
    assert!(r.report.truncated_last_line);
    assert_eq!(r.report.first_bad.len(), 2);
    assert_eq!(r.measured.reported_steps, 3);
    assert!((r.measured.samples_per_s.unwrap() - 800.0).abs() < 1e-6);
}

/// [limits] with a stall limit of `stall` seconds.
fn stall_limits(seconds: u64, stall: f64) -> Limits {
    Limits {
        stall_limit: Duration::from_secs_f64(stall),
        ..limits(seconds)
    }
}

#[test]
fn a_program_silent_after_its_third_step_is_ended_as_hung_at_the_stall_limit() {
    let dir = Scratch::new("stall");
    let pids = dir.str("pids");
    let prog = program(&[("FAKE_MODE", "stall"), ("FAKE_PIDS", &pids)]);
    let p = Params {
        steps: 10,
        ..params(8)
    };
    let device = Device::stand_in("GPU 0", "0");
    // Steps of 0.01 s: the floor of 1 s decides, long before the time limit of 60 s.
    let r = trial(
        &prog,
        &p,
        0,
        &device,
        &dir.path("trial"),
        &stall_limits(60, 1.0),
    );
    assert_eq!(r.status, Status::Hang, "{r:?}");
    assert_eq!(r.exit, Some(common::process::Exit::Stalled));
    assert!(
        r.reason
            .starts_with("no report or output for 1 s after step 3 (")
            && r.reason.ends_with("): ended as hung"),
        "{}",
        r.reason
    );
    assert!((1.0..6.0).contains(&r.wall_s), "{} s", r.wall_s);
    assert_eq!(r.measured.reported_steps, 3);
    assert_eq!(r.fits(), Some(false), "a size it cannot run");
    assert!(
        r.verdict().starts_with("HANG: no report or output"),
        "{}",
        r.verdict()
    );
    assert_eq!(
        none_left(Path::new(&pids), 2),
        2,
        "the program and the worker it started"
    );
}

#[test]
fn a_slow_start_and_slow_steady_steps_are_not_a_stall() {
    let dir = Scratch::new("slow");
    // A start-up of 1.5 s and steps of 0.5 s against a stall limit of 0.3 s: the start is the
    // time limit's alone, and each step is far inside ten times the slowest.
    let prog = program(&[("FAKE_START_S", "1.5"), ("FAKE_STEP_S", "0.5")]);
    let p = Params {
        steps: 4,
        ..params(8)
    };
    let device = Device::stand_in("GPU 0", "0");
    let r = trial(
        &prog,
        &p,
        0,
        &device,
        &dir.path("trial"),
        &stall_limits(60, 0.3),
    );
    assert_eq!(r.status, Status::Ok, "{r:?}");
    assert!(r.reached_steps);
    assert_eq!(r.measured.reported_steps, 5);
    assert!(r.wall_s >= 4.0, "{} s", r.wall_s);
}

#[test]
fn a_progress_bar_between_steps_is_not_silence() {
    let dir = Scratch::new("evaluating");
    // After its second step it redraws a progress bar for 2 s, no newline, stall limit 0.5 s.
    let prog = program(&[("FAKE_EVAL_AFTER", "2,2")]);
    let p = Params {
        steps: 4,
        ..params(8)
    };
    let device = Device::stand_in("GPU 0", "0");
    let r = trial(
        &prog,
        &p,
        0,
        &device,
        &dir.path("trial"),
        &stall_limits(60, 0.5),
    );
    assert_eq!(r.status, Status::Ok, "{r:?}");
    assert!(r.reached_steps && r.wall_s >= 2.0, "{} s", r.wall_s);
}

#[test]
fn a_program_that_goes_on_after_its_steps_can_be_stopped_there() {
    let dir = Scratch::new("after");
    let prog = program(&[("FAKE_MODE", "hang_after_steps")]);
    let device = Device::stand_in("GPU 0", "0");
    // Waited for, it is a hang, though every step was reported and measured.
    let r = trial(&prog, &params(8), 0, &device, &dir.path("wait"), &limits(2));
    assert_eq!(r.status, Status::Hang);
    assert!(r.reached_steps);
    assert!((r.measured.samples_per_s.unwrap() - 800.0).abs() < 1e-6);
    // Stopped once its steps are in, it is OK, long before the time limit.
    let stop = Limits {
        stop: Stop::WhenSteady,
        ..limits(60)
    };
    let r = trial(&prog, &params(8), 1, &device, &dir.path("stop"), &stop);
    assert_eq!(r.status, Status::Ok, "{:?}", r.stderr_tail);
    assert_eq!(r.reason, "stopped once it had shown what was asked");
    assert!(r.wall_s < 30.0, "{}", r.wall_s);
    assert_eq!(r.measured.reported_steps, 3);
}

#[test]
fn fewer_step_lines_than_told_is_incomplete_not_ok() {
    let dir = Scratch::new("short");
    let prog = program(&[("FAKE_MODE", "short")]);
    let p = Params {
        steps: 3,
        warmup_steps: 1,
        ..params(8)
    };
    let device = Device::stand_in("GPU 0", "0");
    let r = trial(&prog, &p, 0, &device, &dir.path("trial"), &limits(60));
    assert_eq!(r.status, Status::Incomplete, "{r:?}");
    assert!(r.reason.contains("1 of the 4 steps"), "{}", r.reason);
    assert_eq!(
        r.fits(),
        None,
        "an incomplete trial says nothing about memory"
    );
    assert!(r.verdict().starts_with("INCOMPLETE"));
}

#[test]
fn an_out_of_memory_message_ends_the_trial_at_once() {
    let dir = Scratch::new("linger");
    let prog = program(&[("FAKE_MODE", "oom_then_linger")]);
    let device = Device::stand_in("GPU 0", "0");
    let r = trial(
        &prog,
        &params(8),
        0,
        &device,
        &dir.path("trial"),
        &limits(60),
    );
    assert_eq!(r.status, Status::Oom, "{r:?}");
    assert!(r.reason.contains("stopped at the message"), "{}", r.reason);
    assert!(
        r.wall_s < 10.0,
        "it waited for the program to wind down: {} s",
        r.wall_s
    );
    assert_eq!(r.fits(), Some(false));
}

#[test]
fn a_finder_trial_stops_once_memory_is_steady() {
    let dir = Scratch::new("steady");
    let device = Device::stand_in("GPU 0", "0");
    let stop = Limits {
        stop: Stop::WhenSteady,
        ..limits(60)
    };
    let p = Params {
        steps: 11,
        warmup_steps: 1,
        ..params(8)
    };
    // The peak grows over the first 5 steps: steady once steps 5 and 6 agree.
    let prog = program(&[("FAKE_PEAK_GROWS", "5"), ("FAKE_STEP_S", "0.1")]);
    let r = trial(&prog, &p, 0, &device, &dir.path("grows"), &stop);
    assert_eq!(r.status, Status::Ok, "{:?}", r.stderr_tail);
    assert_eq!(r.steady_at, Some(6), "{:?}", r.step_peaks);
    assert!(!r.reached_steps);
    assert_eq!(r.fits(), Some(true));
    // A flat peak: steady at the third step, the first that can be.
    let prog = program(&[("FAKE_STEP_S", "0.1")]);
    let r = trial(&prog, &p, 1, &device, &dir.path("flat"), &stop);
    assert_eq!(r.steady_at, Some(3), "{:?}", r.step_peaks);
    assert!(
        r.measured.reported_steps <= 4,
        "{}",
        r.measured.reported_steps
    );
}

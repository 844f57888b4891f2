//! GPU checks of the tuner on a program, on a machine with an NVIDIA GPU and PyTorch
//! (torchvision for the ResNet example): `cargo test -p tuner --test external_gpu -- --ignored
//! --nocapture`, from the repository root. They print what they measured.

mod fake;

use std::path::PathBuf;
use std::time::Duration;

use fake::trial;
use tuner::classify::Status;
use tuner::gpu::{visible_devices, Device};
use tuner::granularity::Granularity;
use tuner::nvml::MemorySource;
use tuner::program::{Params, Precision, Program};
use tuner::protocol::ThroughputSource;
use tuner::trial::Limits;

const GIB: u64 = 1 << 30;

/// examples/pytorch, where this test was built or below the current folder (a copy of the
/// repository on another machine).
fn examples() -> PathBuf {
    let built = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/pytorch"));
    if built.join("train_resnet.py").exists() {
        return built;
    }
    let here = std::env::current_dir().unwrap().join("examples/pytorch");
    assert!(
        here.join("train_resnet.py").exists(),
        "run from the repository root (examples/pytorch/train_resnet.py not found)"
    );
    here
}

fn first_gpu() -> Device {
    let mut devices = visible_devices(Some("0")).expect("a visible GPU");
    devices.remove(0)
}

fn scratch(name: &str) -> PathBuf {
    let dir =
        std::env::temp_dir().join(format!("tuner-external-gpu-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

const HOLD_4_GIB: &str = "import time, torch\n\
x = torch.empty(4 << 30, dtype=torch.uint8, device='cuda')\n\
x.fill_(1)\n\
torch.cuda.synchronize()\n\
time.sleep(2.0)\n";

#[test]
#[ignore = "needs an NVIDIA GPU"]
fn nvml_reads_the_memory_a_trial_holds() {
    let device = first_gpu();
    assert!(device.probe.is_some(), "NVML did not open: {device:?}");
    let prog = Program::new(vec!["python3".into(), "-c".into(), HOLD_4_GIB.into()]).unwrap();
    let p = Params {
        batch_size: 1,
        workers: 0,
        amp: Precision::Off,
        accumulation: 1,
        steps: 1,
        warmup_steps: 0,
        ..Params::default()
    };
    let dir = scratch("nvml");
    let r = trial(
        &prog,
        &p,
        0,
        &device,
        &dir,
        &Limits::new(Duration::from_secs(120)),
    );
    assert_eq!(r.status, Status::Ok, "{:?}", r.stderr_tail);
    let m = &r.memory;
    println!(
        "{} ({}): memory source {:?}, peak {:.3} GiB, device before {:?} bytes, {} samples, note {:?}",
        device.label,
        device.cuda_visible,
        m.source,
        m.peak_bytes.unwrap_or(0) as f64 / GIB as f64,
        m.device_before_bytes,
        m.samples,
        m.note
    );
    assert_ne!(m.source, MemorySource::None, "{m:?}");
    let peak = m.peak_bytes.unwrap();
    // 4 GiB of tensor plus the CUDA context (a few hundred MB), and nothing like twice that.
    assert!((4 * GIB..6 * GIB).contains(&peak), "{peak}");
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
#[ignore = "needs an NVIDIA GPU"]
fn the_resnet_example_reports_its_steps_and_runs_out_of_memory() {
    let device = first_gpu();
    let script = examples().join("train_resnet.py");
    let mut argv = vec!["python3".to_string(), script.to_str().unwrap().to_string()];
    argv.extend(fake::PLACEHOLDER_FLAGS.map(String::from));
    let prog = Program::new(argv).unwrap();
    let limits = Limits::new(Duration::from_secs(600));
    let dir = scratch("resnet");

    let p = Params {
        batch_size: 64,
        workers: 4,
        amp: Precision::On,
        accumulation: 2,
        steps: 10,
        warmup_steps: 3,
        ..Params::default()
    };
    let r = trial(&prog, &p, 0, &device, &dir.join("fits"), &limits);
    assert_eq!(r.status, Status::Ok, "{:?}", r.stderr_tail);
    let m = &r.measured;
    println!(
        "resnet18 {}: {:.1} samples/s (the program's own {:.1}, {:+.2}%; the tuner's clock {:+.2}%), step {:.2} ms, data {:.2} ms, forward {:.2} ms, backward {:.2} ms, optimizer {:.2} ms, framework peak {:.2} GB, NVML {:?} {:.2} GB, NVML utilization {:?}%, wall {:.1} s",
        p.describe(),
        m.samples_per_s.unwrap(),
        m.program_samples_per_s.unwrap_or(f64::NAN),
        m.program_difference.unwrap_or(f64::NAN) * 100.0,
        m.clock_difference.unwrap_or(f64::NAN) * 100.0,
        m.step_ms.as_ref().unwrap().median,
        m.data_ms.as_ref().unwrap().median,
        m.forward_ms.as_ref().unwrap().median,
        m.backward_ms.as_ref().unwrap().median,
        m.optimizer_ms.as_ref().unwrap().median,
        m.framework_peak_bytes.unwrap_or(0) as f64 / 1e9,
        r.memory.source,
        r.memory.peak_bytes.unwrap_or(0) as f64 / 1e9,
        r.nvml_util_pct,
        r.wall_s,
    );
    // `on` is bf16 on every GPU from compute capability 8.0 (the H100 and H200 are 9.0).
    let capability = device
        .capability
        .expect("NVML reads the compute capability");
    assert_eq!(
        (r.params.amp, r.params.amp_from_on),
        (Precision::resolve_on(Some(capability)), true),
        "{capability:?}"
    );
    assert!(r.command.iter().any(|a| a == r.params.amp.as_str()));
    assert_eq!(m.source, ThroughputSource::Protocol);
    assert_eq!((m.reported_steps, m.warmup_steps), (13, 3));
    assert_eq!(r.report.bad_lines, 0);
    assert!(m.program_difference.unwrap().abs() < 0.03);
    // The step times add up to the loop, on the tuner's own clock.
    assert!(m.clock_difference.unwrap().abs() < 0.03, "{m:?}");
    let framework = m.framework_peak_bytes.expect("the script reports its peak");
    assert!(framework > 0);
    // From outside, the process holds at least what its allocator handed out.
    assert!(r.memory.peak_bytes.unwrap() >= framework, "{:?}", r.memory);
    // NVML's utilization, sampled over the measured steps.
    let util = r
        .nvml_util_pct
        .expect("NVML utilization over the measured steps");
    assert!((0.0..=100.0).contains(&util), "{util}");

    // Far past any GPU's memory (ResNet-18 needs tens of MB per 224-pixel sample in fp32).
    // One worker: a batch this size is about 10 GB of host memory.
    let huge = Params {
        batch_size: 16384,
        workers: 1,
        amp: Precision::Off,
        accumulation: 1,
        steps: 1,
        warmup_steps: 0,
        ..Params::default()
    };
    let r = trial(&prog, &huge, 1, &device, &dir.join("oom"), &limits);
    println!("batch 16384: {} after {:.1} s", r.verdict(), r.wall_s);
    assert_eq!(r.status, Status::Oom, "{:?}", r.stderr_tail);
    assert_eq!(r.oom.as_ref().unwrap().stack, "PyTorch");
    let _ = std::fs::remove_dir_all(dir);
}

/// The search runs on an 8 GiB share of the GPU: at the full memory of an H100 every trial near
/// the limit moves tens of GB of images through the loader, and the search takes many minutes.
/// The program runs cuDNN's deterministic algorithms (`--deterministic`): under its autotuner the
/// sizes at the edge fit in one run and not in the next (the size above a search's maximum ran
/// out of memory in the search and fit in a fresh process), so no pass or fail could be read
/// from them.
const PROGRAM_FLAGS: [&str; 3] = ["--memory-limit", "8", "--deterministic"];

/// `tuner autobatch` on the ResNet example, fp32, through the binary, its trials forked from a
/// parent that imported PyTorch once: the maximum held for 20 steps in a run of its own and the
/// next multiple of 8 was seen to fail; check_fit.py (which does not trust the tuner's reading
/// of a trial) finds, in fresh processes of 20 steps, that the size the config gets holds 3 times
/// of 3 and that the size above the maximum runs out of memory; and the search stayed within the
/// bound of doubling and bisecting.
#[test]
#[ignore = "needs an NVIDIA GPU"]
fn the_finder_s_answer_on_the_resnet_example_holds() {
    let dir = scratch("finder");
    std::fs::create_dir_all(&dir).unwrap();
    let json = dir.join("autobatch.json");
    let script = examples().join("train_resnet.py");
    // On a GPU machine the binary travels apart from the build tree: TUNER_BIN says where.
    let tuner = std::env::var("TUNER_BIN").unwrap_or(env!("CARGO_BIN_EXE_tuner").into());
    let out = std::process::Command::new(tuner)
        .args([
            "autobatch",
            "--devices",
            "0",
            "--workers",
            "4",
            "--amp",
            "off",
        ])
        .arg("--json")
        .arg(&json)
        .args(["--", "python3"])
        .arg(&script)
        .args(fake::PLACEHOLDER_FLAGS)
        .args(PROGRAM_FLAGS)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    println!("{stdout}");
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let maximum = r["maximum"].as_u64().unwrap() as usize;
    assert_eq!(
        r["next_failing"].as_u64(),
        Some(maximum as u64 + 8),
        "{}",
        r["confirmations"]
    );
    let last = r["confirmations"]
        .as_array()
        .unwrap()
        .iter()
        .rev()
        .find(|c| c["held"] == true);
    let last = last.expect("a confirmation that held");
    assert_eq!(
        (last["batch_size"].as_u64(), last["steps"].as_u64()),
        (Some(maximum as u64), Some(20))
    );
    assert!(
        r["launch"].as_str().unwrap().contains("forked"),
        "a Python program's trials are forked: {}",
        r["launch"]
    );
    assert!(
        r["memory"]["peaks"].as_u64().unwrap() >= 2,
        "the script reports its peaks: {}",
        r["memory"]
    );
    let found = r["found"]["maximum"].as_u64().unwrap() as usize;
    let trials = r["search"].as_array().unwrap().len();
    let plain = tuner::search::find(8, Granularity::Multiple(8), 1 << 26, |b| {
        Ok::<_, ()>((b <= found).into())
    })
    .unwrap()
    .unwrap();
    println!(
        "maximum {maximum} (the search's {found}): {trials} search trials in {:.1} s, {} confirmation(s) in {:.1} s, {:.1} s in all; doubling and bisecting: {} trials; {}",
        r["search_wall_s"].as_f64().unwrap(),
        r["confirmations"].as_array().unwrap().len(),
        r["confirm_wall_s"].as_f64().unwrap(),
        r["total_wall_s"].as_f64().unwrap(),
        plain.tried.len(),
        r["launch"]
    );
    assert!(
        trials <= tuner::search::trial_bound(found, 8, 8),
        "{trials} trials"
    );

    let config = r["batch_size"].as_u64().unwrap() as usize;
    assert!(
        config <= maximum,
        "the config's {config} above the maximum {maximum}"
    );
    let check = std::process::Command::new("python3")
        .arg(examples().join("check_fit.py"))
        .arg(config.to_string())
        .args(["--step", &(maximum + 8 - config).to_string()])
        .args([
            "--repeat",
            "3",
            "--amp",
            "off",
            "--workers",
            "4",
            "--steps",
            "20",
            "--warmup",
            "0",
            "--",
        ])
        .args(PROGRAM_FLAGS)
        .env(
            "CUDA_VISIBLE_DEVICES",
            r["device"]["cuda_visible"].as_str().unwrap(),
        )
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&check.stdout);
    println!("{text}");
    assert_eq!(check.status.code(), Some(0), "{text}");
    let c: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(
        (c["fits_runs"].as_u64(), c["runs_at_batch"].as_u64()),
        (Some(3), Some(3)),
        "{text}"
    );
    let _ = std::fs::remove_dir_all(dir);
}

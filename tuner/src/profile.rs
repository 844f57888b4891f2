//! `tuner profile`: one trial of the answer (the team file's batch for this GPU and model, or a
//! given one) under a profiler, the measured steps only.
//!
//! Where nsys is at hand (`--nsys`, the PATH or `NSYS`), the trial's command runs under
//! `nsys profile --capture-range=cudaProfilerApi --capture-range-end=stop`, and the trial's
//! `PERF_LESSONS_PROFILE=cuda-api` has the program's perf_lessons call cudaProfilerStart once the
//! warmup steps are reported and cudaProfilerStop after the last measured one: nsys records
//! those steps and nothing else, and the program runs on to its own end (`stop`, not the
//! default `stop-shutdown`, which would end it there). Otherwise `PERF_LESSONS_PROFILE=torch`
//! has perf_lessons record the same steps with PyTorch's profiler into the Chrome trace
//! `PERF_LESSONS_PROFILE_OUT` names. Either way the trial is an ordinary one of the tuner's: the
//! same runner, time limit, out-of-memory recognition and report.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use serde::Serialize;

use common::report::Provenance;
use common::{Error, Result};
use profiling::discover::{self, Places, NSYS};
use profiling::nsys::{self, Capture, NsysOptions};
use profiling::target::{compact_utc, reports_with, sanitize};

use crate::classify::Status;
use crate::config::Choice;
use crate::program::{Params, Precision, Program};
use crate::run::{DeviceSummary, Run};
use crate::trial::{Stop, TrialResult};
use crate::writeback::TeamEntry;

pub const PROFILE_ENV: &str = "PERF_LESSONS_PROFILE";
pub const PROFILE_OUT_ENV: &str = "PERF_LESSONS_PROFILE_OUT";
pub const SCHEMA: &str = "tuner-profile/1";

/// The profiler a trial runs under.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Profiler {
    /// Nsight Systems at this path, around the program.
    Nsys(PathBuf),
    /// PyTorch's profiler inside the program.
    Torch,
}

/// The profiler for `choice`, with a line saying which and why. `places` are where nsys is
/// looked for (the install folders are searched only when nsys is asked for by name; in `auto`
/// one found there is named in the line, since Nsight Compute bundles an nsys that records but
/// cannot write a report).
pub fn choose(choice: Choice, places: Places) -> std::result::Result<(Profiler, String), String> {
    if choice == Choice::Torch {
        return Ok((
            Profiler::Torch,
            "PyTorch's profiler records the measured steps (--profiler torch)".into(),
        ));
    }
    let mut near = places.clone();
    if choice != Choice::Nsys {
        near.folders.clear();
    }
    match discover::find(&NSYS, &near) {
        Ok(path) => {
            let line = format!(
                "nsys ({}) records the measured steps: perf_lessons brackets them with cudaProfilerStart/Stop",
                path.display()
            );
            Ok((Profiler::Nsys(path), line))
        }
        Err(profiling::Error::ToolNotFound { .. }) if choice == Choice::Auto => {
            let found = (places.folders.iter())
                .find_map(|f| discover::newest_first(f).into_iter().next())
                .map_or(String::new(), |p| {
                    format!(" (there is one at {0}: --nsys {0} uses it)", p.display())
                });
            Ok((
                Profiler::Torch,
                format!(
                    "nsys is not on the PATH{found}: PyTorch's profiler records the measured steps"
                ),
            ))
        }
        Err(e) => Err(e.to_string()),
    }
}

/// Where the answer profiled comes from.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Answer {
    pub batch_size: usize,
    /// Micro-batches per step and precision, where the team file gives them.
    pub accumulation: Option<usize>,
    pub amp: Option<Precision>,
    /// In words: `--batch-size`, the config, or the team file's entry.
    pub from: String,
}

impl Answer {
    /// A batch given on the command line or in the config.
    pub fn given(batch_size: usize, from: &str) -> Answer {
        Answer {
            batch_size,
            accumulation: None,
            amp: None,
            from: from.into(),
        }
    }
}

/// The team file's entry for `model` on the GPU named `gpu` (NVML's name; None where NVML
/// does not name it, and the model's only entry is taken).
pub fn team_answer(
    entries: &[TeamEntry],
    gpu: Option<&str>,
    model: &str,
    file: &Path,
) -> std::result::Result<Answer, String> {
    let file = file.display();
    let of_model: Vec<&TeamEntry> = entries.iter().filter(|e| e.model == model).collect();
    let names = |list: Vec<&str>| {
        let mut list: Vec<String> = list.into_iter().map(|s| format!("'{s}'")).collect();
        list.dedup();
        list.join(", ")
    };
    if of_model.is_empty() {
        return Err(format!(
            "{file} has no entry for the model '{model}' (it has {}): --model-name NAME chooses one, or give --batch-size N",
            names(entries.iter().map(|e| e.model.as_str()).collect())
        ));
    }
    let gpus = || names(of_model.iter().map(|e| e.gpu.as_str()).collect());
    let entry = match gpu {
        Some(g) => of_model.iter().find(|e| e.gpu == g).ok_or_else(|| {
            format!(
                "{file} has no entry for '{model}' on {g} (only on {}): run `tuner autobatch --team {file}` on this GPU, or give --batch-size N",
                gpus()
            )
        })?,
        None if of_model.len() == 1 => &of_model[0],
        None => {
            return Err(format!(
                "NVML does not name this GPU, and {file} has '{model}' on {}: give --batch-size N",
                gpus()
            ))
        }
    };
    Ok(Answer {
        batch_size: entry.batch_size,
        accumulation: Some(entry.accumulation_steps),
        amp: match entry.precision.as_str() {
            "-" => None,
            "fp32" => Some(Precision::Off),
            // `amp`, as entries were written before the precisions had names: the GPU's best.
            p => Some(Precision::parse(p).unwrap_or(Precision::On)),
        },
        from: format!("{file}: {} on {}", entry.model, entry.gpu),
    })
}

/// The profile's files: `<out-dir>/<model>-b<batch>-<UTC time>` and the tool's extension.
pub fn base(out_dir: &Path, model: &str, batch: usize, time: SystemTime) -> PathBuf {
    out_dir.join(format!(
        "{}-b{batch}-{}",
        sanitize(model),
        compact_utc(time)
    ))
}

/// The Chrome trace PyTorch's profiler writes for `base`.
pub fn trace_path(base: &Path) -> PathBuf {
    let mut name = base.as_os_str().to_owned();
    name.push(".pt.trace.json");
    name.into()
}

/// The command a trial runs: the user's, under nsys where nsys profiles.
pub fn command(profiler: &Profiler, user: &[String], base: &Path) -> Vec<String> {
    let Profiler::Nsys(path) = profiler else {
        return user.to_vec();
    };
    let opts = NsysOptions {
        capture: Capture::FirstRegion,
        ..NsysOptions::default()
    };
    let c = nsys::command(path, &opts, base, Path::new(&user[0]), &user[1..]);
    std::iter::once(c.program.display().to_string())
        .chain(c.args)
        .collect()
}

/// What perf_lessons in the program is told.
pub fn environment(profiler: &Profiler, base: &Path) -> Vec<(String, OsString)> {
    match profiler {
        Profiler::Nsys(_) => vec![(PROFILE_ENV.into(), "cuda-api".into())],
        Profiler::Torch => vec![
            (PROFILE_ENV.into(), "torch".into()),
            (PROFILE_OUT_ENV.into(), trace_path(base).into_os_string()),
        ],
    }
}

/// `tuner profile`'s result.
#[derive(Debug, Serialize)]
pub struct ProfileReport {
    pub schema: &'static str,
    pub command: Vec<String>,
    pub device: DeviceSummary,
    pub provenance: Provenance,
    pub answer: Answer,
    pub profiler: Profiler,
    /// Which profiler and why, in words.
    pub choice: String,
    pub trial: TrialResult,
    /// The nsys report(s) or the Chrome trace.
    pub files: Vec<PathBuf>,
}

/// Run the trial and find what the profiler wrote; an error (one line) where the trial failed
/// or nothing was written, its folder then kept and named.
pub fn profile(
    run: &Run,
    params: &Params,
    answer: Answer,
    (profiler, choice): (Profiler, String),
    base: &Path,
) -> Result<ProfileReport> {
    let mut results = run.begin("profile", Some(1))?;
    run.progress.line(&format!("profile: {choice}"));
    let trial = run.one(&run.groups(1)[0], params, 0, Stop::AtExit, &mut results);
    let files = match &profiler {
        Profiler::Nsys(_) => reports_with(base, ".nsys-rep"),
        Profiler::Torch => Vec::from_iter(Some(trace_path(base)).filter(|t| t.is_file())),
    };
    if let Some(why) = failure(&trial, &profiler, base, files.is_empty()) {
        return Err(Error::invalid(why));
    }
    run.finish(std::slice::from_ref(&trial));
    Ok(ProfileReport {
        schema: SCHEMA,
        command: run.program.argv.clone(),
        device: DeviceSummary::of(&run.devices[0]),
        provenance: Provenance::now(),
        answer,
        profiler,
        choice,
        trial,
        files,
    })
}

/// Why the profile failed, in one line: the trial did not end OK, or nothing was written.
fn failure(trial: &TrialResult, profiler: &Profiler, base: &Path, none: bool) -> Option<String> {
    let dir = trial.folder.as_deref();
    let folder = dir.map_or(String::new(), |f| format!(" (its output: {})", f.display()));
    let stderr = dir.map(|f| common::process::tail_lines(&f.join("stderr.log"), 200));
    let stderr = stderr.unwrap_or_default();
    if trial.status != Status::Ok {
        let last = stderr.last().map_or("(nothing)", String::as_str);
        let what = match profiler {
            Profiler::Nsys(_) => "the trial under nsys",
            Profiler::Torch => "the trial",
        };
        return Some(format!(
            "{what} {}; stderr ended with: {last}{folder}",
            trial.verdict()
        ));
    }
    if !none {
        return None;
    }
    // What perf_lessons said about the profiler, where it said something.
    let said = stderr
        .iter()
        .rev()
        .find(|l| l.starts_with("perf_lessons: "))
        .map_or(String::new(), |l| format!("; {l}"));
    Some(match profiler {
        Profiler::Nsys(path) => format!(
            "nsys wrote no report at {}.nsys-rep: {}{said}{folder}",
            base.display(),
            nsys::why_no_report(
                path,
                base,
                "it records only from the cudaProfilerStart perf_lessons calls once the warmup steps are reported (a program that reports through perf_lessons, with PyTorch on the GPU); see nsys's messages"
            )
        ),
        Profiler::Torch => format!(
            "no trace written at {}: the program's measured steps did not reach PyTorch's profiler (it records through perf_lessons, in a program that imports PyTorch){said}{folder}",
            trace_path(base).display()
        ),
    })
}

/// The report: the trial, and where the profile is and how to open it.
pub fn render(r: &ProfileReport) -> String {
    let p = &r.trial.params;
    let mut o = format!(
        "## tuner profile: `{}`\n\n\
         {} ({}), on {}: steps {} to {} measured\n\
         trial: {} in {:.1} s (under the profiler: not a figure to tune by)\n\
         profiler: {}\n",
        Program::display(&r.trial.command),
        p.describe(),
        r.answer.from,
        r.trial.device,
        p.warmup_steps + 1,
        p.total_steps(),
        r.trial.verdict(),
        r.trial.wall_s,
        r.choice
    );
    for f in &r.files {
        let f = f.display();
        o.push_str(&match r.profiler {
            Profiler::Nsys(_) => format!(
                "report: {f}\nopen it in Nsight Systems (`nsys-ui {f}`), or summarize it here: `nsys stats {f}`\n"
            ),
            Profiler::Torch => format!(
                "trace: {f}\nopen it at https://ui.perfetto.dev (Open trace file), or in chrome://tracing\n"
            ),
        });
    }
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(gpu: &str, model: &str, batch_size: usize, precision: &str) -> TeamEntry {
        TeamEntry {
            gpu: gpu.into(),
            model: model.into(),
            batch_size,
            accumulation_steps: 2,
            precision: precision.into(),
        }
    }

    #[test]
    fn the_team_file_s_entry_for_this_gpu_and_model() {
        let file = Path::new("team.toml");
        let entries = [
            entry("NVIDIA H100", "resnet", 256, "amp"),
            entry("NVIDIA H200", "resnet", 512, "fp32"),
            entry("NVIDIA H100", "mlp", 4096, "amp"),
            entry("NVIDIA H100", "vit", 160, "bf16"),
        ];
        let a = team_answer(&entries, Some("NVIDIA H200"), "resnet", file).unwrap();
        assert_eq!(
            (a.batch_size, a.accumulation, a.amp),
            (512, Some(2), Some(Precision::Off))
        );
        assert_eq!(a.from, "team.toml: resnet on NVIDIA H200");
        let e = team_answer(&entries, Some("NVIDIA A100"), "resnet", file).unwrap_err();
        assert!(
            e.contains(
                "no entry for 'resnet' on NVIDIA A100 (only on 'NVIDIA H100', 'NVIDIA H200')"
            ),
            "{e}"
        );
        let e = team_answer(&entries, None, "resnet", file).unwrap_err();
        assert!(e.contains("NVML does not name this GPU"), "{e}");
        let a = team_answer(&entries, None, "mlp", file).unwrap();
        assert_eq!((a.batch_size, a.amp), (4096, Some(Precision::On)));
        let a = team_answer(&entries, None, "vit", file).unwrap();
        assert_eq!(a.amp, Some(Precision::Bf16));
        let e = team_answer(&entries, None, "gpt", file).unwrap_err();
        assert!(
            e.contains("no entry for the model 'gpt' (it has 'resnet', 'mlp', 'vit')"),
            "{e}"
        );
        assert!(!e.contains('\n'));
    }

    #[test]
    fn nsys_wraps_the_command_and_perf_lessons_is_told_which_profiler() {
        let nsys = Profiler::Nsys("/opt/nsys/bin/nsys".into());
        let user: Vec<String> = ["python3", "train.py", "--batch-size", "{batch_size}"]
            .map(String::from)
            .into();
        let base = Path::new("profiles/train-b64-20260101T000000Z");
        let argv = command(&nsys, &user, base);
        assert_eq!(argv[..2], ["/opt/nsys/bin/nsys", "profile"]);
        assert!(argv.contains(&"--capture-range=cudaProfilerApi".to_string()));
        assert!(argv.contains(&"--capture-range-end=stop".to_string()));
        assert!(argv.contains(&format!("--output={}", base.display())));
        assert_eq!(argv[argv.len() - 4..], user[..]);
        assert_eq!(command(&Profiler::Torch, &user, base), user);
        assert_eq!(
            environment(&nsys, base),
            [(PROFILE_ENV.to_string(), OsString::from("cuda-api"))]
        );
        let torch = environment(&Profiler::Torch, base);
        assert_eq!(torch[0].1, "torch");
        assert_eq!(
            torch[1].1,
            "profiles/train-b64-20260101T000000Z.pt.trace.json"
        );
    }

    #[test]
    fn nsys_on_the_path_else_pytorch_s_profiler() {
        let dir = std::env::temp_dir().join(format!("tuner-profile-choose-{}", std::process::id()));
        let bin = dir.join("bin");
        let bundled = dir.join("opt/nsight-compute/2025.3.1/host/nsys");
        for p in [&bin.join("nsys"), &bundled] {
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, "#!/bin/sh\n").unwrap();
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        let folders = vec![format!("{}/opt/nsight-compute/*/host/nsys", dir.display())];
        let places = |path: &Path| Places {
            explicit: None,
            path_var: Some(path.as_os_str().to_owned()),
            env_value: None,
            folders: folders.clone(),
        };
        let (p, line) = choose(Choice::Auto, places(&bin)).unwrap();
        assert_eq!(p, Profiler::Nsys(bin.join("nsys")));
        assert!(line.contains("cudaProfilerStart/Stop"), "{line}");
        let empty = dir.join("empty");
        let (p, line) = choose(Choice::Auto, places(&empty)).unwrap();
        assert_eq!(p, Profiler::Torch);
        assert!(
            line.contains(&format!("--nsys {} uses it", bundled.display())),
            "{line}"
        );
        let (p, _) = choose(Choice::Nsys, places(&empty)).unwrap();
        assert_eq!(
            p,
            Profiler::Nsys(bundled.clone()),
            "asked for: the folders too"
        );
        let (p, _) = choose(Choice::Torch, places(&bin)).unwrap();
        assert_eq!(p, Profiler::Torch);
        let wrong = Places {
            explicit: Some(dir.join("no-nsys")),
            ..places(&bin)
        };
        let e = choose(Choice::Auto, wrong).unwrap_err();
        assert!(e.contains("no such executable file"), "{e}");
        let none = Places {
            folders: Vec::new(),
            ..places(&empty)
        };
        let e = choose(Choice::Nsys, none).unwrap_err();
        assert!(e.starts_with("nsys (Nsight Systems) not found"), "{e}");
        let _ = std::fs::remove_dir_all(dir);
    }
}

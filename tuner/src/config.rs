//! The settings of a run: a config file (TOML, read with serde) and the flags, the flags winning;
//! and the flags of a run on a Slurm cluster ([SlurmArgs]).
//!
//! The file is the team's own: its `[data]` and `[training]` sections may hold keys for the
//! program (a learning rate, a model name) next to the ones the tuner reads, and those are left
//! alone; the keys the tuner reads are checked, and so is its own `[tuner]` section, where an
//! unknown key is a mistake worth a message.
//!
//! ```toml
//! [data]
//! workers = [0, 4, 8]        # or one number
//! [training]
//! batch_sizes = [32, 64, 128, 256]
//! batch_size = 128           # the batch a run uses; `autobatch --write` writes here
//! accumulation_steps = 1
//! amp = "both"               # "off", "bf16", "fp16", "on" (the GPU's best), a list, "both" (off and on)
//! steps = 30
//! warmup_steps = 5
//! optimizer = "sgd"          # or "adamw": the learning-rate rule of the accumulation advice
//! [tuner]
//! devices = "0,1"
//! time_limit = 600
//! stall_limit = 60
//! ranks = 1
//! ```

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::program::{Axis, Params, Precision};
use crate::text::{line_of, read_text};

/// Largest batch the tool accepts (far past any GPU's memory for every model).
pub const MAX_BATCH: usize = 1 << 26;

/// `--amp` and `[training] amp`: precisions by name (`off`, `bf16`, `fp16`, `on`), a list of
/// them (`off,bf16`), or `both` (off and on); a TOML boolean is on or off. A sweep runs each.
pub fn parse_amp(s: &str) -> Result<Vec<Precision>, String> {
    let mut out: Vec<Precision> = Vec::new();
    for word in s.split(',').map(str::trim) {
        let mut these = match word {
            "both" => vec![Precision::Off, Precision::On],
            w => vec![Precision::parse(w).map_err(|_| {
                format!("'{w}' is not a precision: off, bf16, fp16, on (the best the GPU has) or both (off and on)")
            })?],
        };
        these.retain(|p| !out.contains(p));
        out.extend(these);
    }
    Ok(out)
}

/// A config's `amp`: a boolean, a name or list in one string, or an array, read as [parse_amp]
/// reads a flag's.
fn precisions<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Vec<Precision>>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Raw {
        Bool(bool),
        Text(String),
        List(Vec<String>),
    }
    // `true` and `false` are names of `on` and `off` too.
    let text = match Raw::deserialize(d)? {
        Raw::Bool(b) => b.to_string(),
        Raw::Text(t) => t,
        Raw::List(l) => l.join(","),
    };
    parse_amp(&text).map(Some).map_err(serde::de::Error::custom)
}

/// One number or a list of them.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(untagged)]
enum Counts {
    One(usize),
    Many(Vec<usize>),
}

#[derive(Debug, Default, Deserialize)]
struct DataSection {
    workers: Option<Counts>,
}

#[derive(Debug, Default, Deserialize)]
struct TrainingSection {
    batch_sizes: Option<Counts>,
    batch_size: Option<usize>,
    accumulation_steps: Option<usize>,
    #[serde(default, deserialize_with = "precisions")]
    amp: Option<Vec<Precision>>,
    steps: Option<usize>,
    warmup_steps: Option<usize>,
    optimizer: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct TunerSection {
    devices: Option<String>,
    time_limit: Option<f64>,
    stall_limit: Option<f64>,
    ranks: Option<usize>,
}

/// The file: each section may be left out.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct File {
    data: DataSection,
    training: TrainingSection,
    tuner: TunerSection,
}

/// Every setting, each optional: what one source (the file, the flags) says. The flags are
/// read into one by clap (each field's help is its flag's; the settings no flag sets are
/// skipped there).
#[derive(clap::Args, Debug, Clone, Default, PartialEq)]
pub struct Overrides {
    /// GPUs for the trials, one trial per GPU at a time: positions among the visible GPUs
    /// (0,2) or all (default).
    #[arg(long, value_name = "LIST|all")]
    pub devices: Option<String>,
    /// Processes per trial, each on a GPU of its own: a data-parallel program (DDP) started
    /// as torchrun would (RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT). Batch sizes
    /// are per GPU; a trial fits only where every rank fits (default 1).
    #[arg(long, value_name = "N", value_parser = parse_positive)]
    pub ranks: Option<usize>,
    // A list is one value of the flag: its type is spelled out, since clap reads a plain
    // `Vec` as a flag given once for each item.
    /// Data-loader workers ({workers}): one count, or a list to sweep (0,4,8).
    #[arg(long, value_name = "N[,N...]", value_parser = parse_workers)]
    pub workers: Option<::std::vec::Vec<usize>>,
    /// Precision ({amp}): off (fp32), bf16, fp16, or on (the best the trial's GPU has: bf16
    /// from compute capability 8.0, else fp16); a list to sweep (off,bf16); both is off,on.
    #[arg(long, value_name = "off|bf16|fp16|on|both", value_parser = parse_amp)]
    pub amp: Option<::std::vec::Vec<Precision>>,
    /// Micro-batches per optimizer step ({accumulation}; default 1).
    #[arg(long = "accumulation", value_name = "N", value_parser = parse_positive)]
    pub accumulation_steps: Option<usize>,
    /// Measured optimizer steps per trial ({steps}; default 30).
    #[arg(long, value_name = "N", value_parser = parse_positive)]
    pub steps: Option<usize>,
    /// Optimizer steps run before measuring ({warmup}; default 5).
    #[arg(long = "warmup", value_name = "N", value_parser = parse_count)]
    pub warmup_steps: Option<usize>,
    /// Seconds one trial may run; past it its whole process group is killed and the trial is
    /// a HANG (default 600).
    #[arg(long, value_name = "SECONDS", value_parser = parse_time_limit)]
    pub time_limit: Option<f64>,
    /// Seconds a trial may go without writing (report, stdout or stderr) between its first step
    /// and its last, or 10 times its slowest step so far where that is longer; past it the
    /// trial is a HANG, ended long before the time limit: a data-parallel group stuck in a
    /// collective (default 60). Start-up is watched by the time limit alone.
    #[arg(long, value_name = "SECONDS", value_parser = parse_stall_limit)]
    pub stall_limit: Option<f64>,
    #[arg(skip)]
    pub batch_sizes: Option<Vec<usize>>,
    #[arg(skip)]
    pub batch_size: Option<usize>,
    #[arg(skip)]
    pub adam_like: Option<bool>,
}

impl Overrides {
    pub fn resolve(self) -> Result<Settings, String> {
        let steps = self.steps.unwrap_or(30);
        if steps == 0 {
            return Err("steps must be at least 1".into());
        }
        let ascending = |list: Vec<usize>| Vec::from_iter(BTreeSet::from_iter(list));
        let time_limit_s = self.time_limit.unwrap_or(DEFAULT_TIME_LIMIT_S);
        let time_limit_s = time_limit(time_limit_s, &time_limit_s.to_string())?;
        let stall_limit_s = self.stall_limit.unwrap_or(DEFAULT_STALL_LIMIT_S);
        let stall_limit_s = stall_limit(stall_limit_s, &stall_limit_s.to_string())?;
        Ok(Settings {
            batch_sizes: ascending(
                (self.batch_sizes).unwrap_or_else(|| (0..=13).map(|p| 1usize << p).collect()),
            ),
            workers: ascending(self.workers.unwrap_or_else(|| vec![4])),
            amp: self
                .amp
                .filter(|a| !a.is_empty())
                .unwrap_or_else(|| vec![Precision::Off]),
            batch_size: self.batch_size,
            accumulation_steps: self.accumulation_steps.unwrap_or(1).max(1),
            steps,
            warmup_steps: self.warmup_steps.unwrap_or(5),
            adam_like: self.adam_like.unwrap_or(false),
            devices: self.devices,
            time_limit_s,
            stall_limit_s,
            axes: Vec::new(),
            ranks: match self.ranks {
                Some(0) => return Err("--ranks 0: a trial needs at least one rank".into()),
                r => r.unwrap_or(1),
            },
        })
    }
}

/// A time limit of `v` seconds (written `as_given`), checked: at least 1.
pub fn time_limit(v: f64, as_given: &str) -> Result<f64, String> {
    (v >= 1.0)
        .then_some(v)
        .ok_or_else(|| format!("a time limit of {as_given} s leaves no time to start: at least 1"))
}

/// A stall limit of `v` seconds (written `as_given`), checked: more than 0.
pub fn stall_limit(v: f64, as_given: &str) -> Result<f64, String> {
    (v > 0.0).then_some(v).ok_or_else(|| {
        format!("a stall limit of {as_given} s ends every trial at its first step: more than 0")
    })
}

/// Default time limit of one trial (seconds).
pub const DEFAULT_TIME_LIMIT_S: f64 = 600.0;

/// Default stall limit (seconds): the shortest silence between a trial's steps that makes it
/// hung. A training step has no business going a minute without writing anything, but a step now and
/// then does more than the others (a checkpoint, an evaluation, a data loader's stall, a
/// recompile for a new shape): a minute covers those in most programs, and a group stuck in a
/// collective costs a minute where the time limit alone lets it run for ten.
pub const DEFAULT_STALL_LIMIT_S: f64 = 60.0;

/// The resolved settings a run uses.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Settings {
    pub batch_sizes: Vec<usize>,
    pub workers: Vec<usize>,
    /// Each precision a sweep tries (`on` resolved per trial's GPU).
    pub amp: Vec<Precision>,
    pub batch_size: Option<usize>,
    pub accumulation_steps: usize,
    pub steps: usize,
    pub warmup_steps: usize,
    /// AdamW-like (square-root learning-rate rule) rather than SGD-like (linear).
    pub adam_like: bool,
    pub devices: Option<String>,
    pub time_limit_s: f64,
    /// A trial silent for longer than this between its steps (or longer than its slowest step
    /// times [crate::trial::STALL_MULTIPLE]) is hung ([crate::trial::Limits::stall_limit]).
    #[serde(default = "default_stall_limit_s")]
    pub stall_limit_s: f64,
    /// The user's own axes (`--axis`), each value a trial of every other setting.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub axes: Vec<Axis>,
    /// Processes per trial, one per GPU (a data-parallel program under torchrun's variables);
    /// batch sizes are per GPU.
    #[serde(default = "one")]
    pub ranks: usize,
}

pub(crate) fn one() -> usize {
    1
}

fn default_stall_limit_s() -> f64 {
    DEFAULT_STALL_LIMIT_S
}

/// The one value of `values` a command runs with; else `choose one {what}`.
pub fn one_of<T: Copy>(values: &[T], what: &str) -> Result<T, String> {
    match values {
        [v] => Ok(*v),
        _ => Err(format!("choose one {what}")),
    }
}

/// A count of 1 to [MAX_BATCH].
pub fn parse_positive(s: &str) -> Result<usize, String> {
    common::cli::parse_count_with_max(s, MAX_BATCH as u64).map(|v| v as usize)
}

/// `1,2,4` or a power-of-two range `1..8192`.
pub fn parse_batch_sizes(s: &str) -> Result<Vec<usize>, String> {
    if let Some((a, b)) = s.split_once("..") {
        let (a, b) = (parse_positive(a)?, parse_positive(b)?);
        if a > b {
            return Err(format!("'{s}': the range runs backwards"));
        }
        return Ok(std::iter::successors(Some(a), |v| Some(v * 2))
            .take_while(|v| *v <= b)
            .collect());
    }
    s.split(',').map(|t| parse_positive(t.trim())).collect()
}

/// A count of 0 or more.
fn parse_count(s: &str) -> Result<usize, String> {
    s.trim()
        .parse()
        .map_err(|_| format!("'{s}' is not a whole number of 0 or more"))
}

fn parse_time_limit(s: &str) -> Result<f64, String> {
    time_limit(common::cli::parse_seconds(s)?, &format!("'{s}'"))
}

fn parse_stall_limit(s: &str) -> Result<f64, String> {
    stall_limit(common::cli::parse_seconds(s)?, &format!("'{s}'"))
}

/// `0,2,4`: worker counts (0 loads on the training process).
pub fn parse_workers(s: &str) -> Result<Vec<usize>, String> {
    s.split(',')
        .map(|t| {
            let t = t.trim();
            match t.parse() {
                Ok(v) if v > 256 => Err(format!("{v} workers is too many: at most 256")),
                Ok(v) => Ok(v),
                Err(_) => Err(format!("'{t}' is not a worker count (0 or more)")),
            }
        })
        .collect()
}

/// Read a config file under `flags`, as [parse] reads its text.
pub fn load(path: &Path, flags: Overrides) -> Result<Overrides, String> {
    let text = read_text(path, "the config")?;
    parse(&text, flags).map_err(|e| format!("{}: {e}", path.display()))
}

/// Parse a config's text: its settings under `flags` (what the flags say wins over the file,
/// whose keys are checked all the same).
pub fn parse(text: &str, flags: Overrides) -> Result<Overrides, String> {
    let file: File = toml_edit::de::from_str(text).map_err(|e| match e.span() {
        Some(span) => format!("line {}: {}", line_of(text, span.start), e.message().trim()),
        None => e.message().trim().to_string(),
    })?;
    let counts =
        |what: &str, c: Option<Counts>, max: usize| -> Result<Option<Vec<usize>>, String> {
            let list = match c {
                None => return Ok(None),
                Some(Counts::One(v)) => vec![v],
                Some(Counts::Many(list)) => list,
            };
            if list.is_empty() {
                return Err(format!("'{what}' is an empty list"));
            }
            if let Some(bad) = list
                .iter()
                .find(|&&v| v > max || (v == 0 && what != "data.workers"))
            {
                return Err(format!("'{what}' holds {bad}: each must be in 1..={max}"));
            }
            Ok(Some(list))
        };
    let positive = |what: &str, v: Option<usize>| match v {
        Some(0) => Err(format!("'{what}' must be at least 1")),
        v => Ok(v),
    };
    let t = file.training;
    let adam_like = match t.optimizer.map(|o| o.to_ascii_lowercase()).as_deref() {
        None => None,
        Some("sgd" | "momentum") => Some(false),
        Some("adam" | "adamw" | "lamb" | "lion") => Some(true),
        Some(other) => return Err(format!(
            "'training.optimizer' is '{other}': use sgd or adamw (it chooses the learning-rate rule of the accumulation advice)"
        )),
    };
    let (f, accumulation) = (flags, t.accumulation_steps);
    Ok(Overrides {
        workers: (f.workers).or(counts("data.workers", file.data.workers, 256)?),
        batch_sizes: (f.batch_sizes).or(counts("training.batch_sizes", t.batch_sizes, MAX_BATCH)?),
        batch_size: (f.batch_size).or(positive("training.batch_size", t.batch_size)?),
        accumulation_steps: (f.accumulation_steps)
            .or(positive("training.accumulation_steps", accumulation)?),
        amp: f.amp.or(t.amp),
        steps: f.steps.or(positive("training.steps", t.steps)?),
        warmup_steps: f.warmup_steps.or(t.warmup_steps),
        adam_like: f.adam_like.or(adam_like),
        devices: f.devices.or(file.tuner.devices),
        time_limit: f.time_limit.or(file.tuner.time_limit),
        stall_limit: f.stall_limit.or(file.tuner.stall_limit),
        ranks: f.ranks.or(file.tuner.ranks),
    })
}

/// The sweep's trials: every AMP setting x worker count x combination of the user's axes x
/// batch size, batches ascending within each setting (so the skip rule can spare the batches
/// above an out-of-memory).
pub fn plan(s: &Settings) -> Vec<Params> {
    let combos = Axis::grid(&s.axes);
    let mut out = Vec::new();
    for &amp in &s.amp {
        for &workers in &s.workers {
            for axes in &combos {
                out.extend(s.batch_sizes.iter().map(|&batch_size| Params {
                    batch_size,
                    workers,
                    amp,
                    accumulation: s.accumulation_steps,
                    steps: s.steps,
                    warmup_steps: s.warmup_steps,
                    axes: axes.clone(),
                    ..Params::default()
                }));
            }
        }
    }
    out
}

/// Steps of the batch finder's confirmation run, by default.
pub const CONFIRM_STEPS: usize = 20;

/// Which profiler the user asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum Choice {
    /// nsys where `--nsys`, the PATH or `NSYS` names one, else PyTorch's profiler.
    #[default]
    Auto,
    /// nsys, looked for in its usual install folders too; an error where there is none.
    Nsys,
    /// PyTorch's profiler, even where nsys is installed.
    Torch,
}

/// The flags of a run on a Slurm cluster (`--slurm DIR`): a sweep's trials as an array job, one
/// task per trial; the batch finder as one job.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct SlurmArgs {
    /// Run on a Slurm cluster from a plan written into DIR (a new folder on storage every node
    /// sees): a sweep as an array job, one task per trial on a GPU of its own, the batch finder
    /// as one job on one GPU; the report is made from what the job leaves there, as
    /// `tuner gather DIR` makes it at any time.
    #[arg(long = "slurm", value_name = "DIR")]
    pub dir: Option<PathBuf>,
    /// At most N trials at once (the array's %N; a sweep's only).
    #[arg(long, value_name = "N", requires = "dir", value_parser = parse_positive)]
    pub max_parallel: Option<usize>,
    /// An option for sbatch, repeatable (--sbatch=--partition=gpu --sbatch=--time=30:00); each
    /// task asks for --gres=gpu:1 unless one of these names --gres, --gpus or -G.
    #[arg(
        long = "sbatch",
        value_name = "OPTION",
        requires = "dir",
        allow_hyphen_values = true
    )]
    pub sbatch: Vec<String>,
    /// Submit and return at once; `tuner gather DIR` makes the report later.
    #[arg(long, requires = "dir")]
    pub no_wait: bool,
    /// Write the plan and the array script (DIR/array.sh) and submit nothing.
    #[arg(long, requires = "dir", conflicts_with = "no_wait")]
    pub no_submit: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_team_s_own_keys_are_left_alone_the_tuner_s_are_checked() {
        let parse = |text: &str| parse(text, Overrides::default());
        let o = parse(
            "# the team's file\n[model]\nname = \"vit\"\n[training]\nlr = 0.1\nbatch_size = 64\noptimizer = \"AdamW\"\n[data]\nworkers = 4\nroot = \"/data\"\n",
        )
        .unwrap();
        assert_eq!(
            (o.batch_size, o.workers, o.adam_like),
            (Some(64), Some(vec![4]), Some(true))
        );
        let refused: [(&str, &[&str]); 8] = [
            (
                "[training]\nbatch_size = \"big\"\n",
                &["line 2", "invalid type"],
            ),
            ("[tuner]\ndevice = 1\n", &["unknown field", "devices"]),
            ("[training]\nbatch_sizes = []\n", &["empty"]),
            ("[training]\nbatch_sizes = [0, 8]\n", &["holds 0"]),
            ("[training]\nsteps = 0\n", &["at least 1"]),
            (
                "[training]\namp = \"maybe\"\n",
                &["not a precision", "fp16"],
            ),
            ("[training]\noptimizer = \"rmsprop\"\n", &["sgd or adamw"]),
            ("not toml [", &[]),
        ];
        for (text, says) in refused {
            let e = parse(text).unwrap_err();
            assert!(says.iter().all(|s| e.contains(s)), "{text}: {e}");
        }
        let amp = |text: &str| parse(text).unwrap().amp.unwrap();
        use Precision::*;
        assert_eq!(amp("[training]\namp = true\n"), [On]);
        assert_eq!(amp("[training]\namp = \"both\"\n"), [Off, On]);
        assert_eq!(
            amp("[training]\namp = [\"bf16\", \"fp16\"]\n"),
            [Bf16, Fp16]
        );
        assert_eq!(amp("[training]\namp = \"fp16\"\n"), [Fp16]);
    }

    #[test]
    fn the_stall_limit_is_a_minute_unless_set_and_must_be_more_than_zero() {
        let s = Overrides::default().resolve().unwrap();
        assert_eq!(s.stall_limit_s, 60.0);
        let file = parse("[tuner]\nstall_limit = 120\n", Overrides::default()).unwrap();
        assert_eq!(file.clone().resolve().unwrap().stall_limit_s, 120.0);
        for bad in [0.0, -1.0, f64::NAN] {
            let e = Overrides {
                stall_limit: Some(bad),
                ..Overrides::default()
            }
            .resolve()
            .unwrap_err();
            assert!(e.contains("more than 0") && !e.contains('\n'), "{e}");
        }
        // A plan saved without it (an older tuner's) reads as the default.
        let mut saved = serde_json::to_value(&s).unwrap();
        saved.as_object_mut().unwrap().remove("stall_limit_s");
        let read: Settings = serde_json::from_value(saved).unwrap();
        assert_eq!(read.stall_limit_s, 60.0);
    }

    #[test]
    fn precisions_by_name_in_lists_and_both() {
        use Precision::*;
        assert_eq!(parse_amp("off").unwrap(), [Off]);
        assert_eq!(parse_amp("both").unwrap(), [Off, On]);
        assert_eq!(
            parse_amp("off, bf16,fp16,on").unwrap(),
            [Off, Bf16, Fp16, On]
        );
        assert_eq!(
            parse_amp("both,off,fp16").unwrap(),
            [Off, On, Fp16],
            "repeats dropped"
        );
        assert_eq!(parse_amp("true").unwrap(), [On]);
        for bad in ["fp8", "", "on,,off", "BF16"] {
            let e = parse_amp(bad).unwrap_err();
            assert!(
                e.contains("not a precision") && !e.contains('\n'),
                "{bad}: {e}"
            );
        }
        let s = Overrides::default().resolve().unwrap();
        assert_eq!(s.amp, [Off], "fp32 unless asked");
    }

    #[test]
    fn batch_lists_and_ranges() {
        assert_eq!(parse_batch_sizes("8..64").unwrap(), [8, 16, 32, 64]);
        assert_eq!(parse_batch_sizes("3, 5").unwrap(), [3, 5]);
        assert!(parse_batch_sizes("64..8").is_err());
        assert!(parse_batch_sizes("0").is_err());
        assert_eq!(parse_workers("0,4").unwrap(), [0, 4]);
        assert!(parse_workers("x").is_err() && parse_workers("999").is_err());
    }
}

//! The command line: `tuner sweep|memory|autobatch [OPTIONS] -- COMMAND ...`. Every setting of a
//! trial is also a config key; a flag given here wins over the config file ([crate::config]).

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

use crate::analysis::PickRule;
use crate::config::{self, parse_positive, Choice, Overrides, Settings, SlurmArgs, CONFIRM_STEPS};
use crate::granularity::Granularity;
use crate::program::Axis;
use crate::writeback::{Format, KeyPath, Keys};

#[derive(Parser, Debug)]
#[command(
    name = "tuner",
    version = common::cli::VERSION,
    about = "Training tools over your training program, given after --: sweep the settings that decide throughput, see where memory goes, find the largest batch that holds in a real run."
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Run every batch size x workers x precision and pick the fastest that leaves memory to
    /// spare.
    Sweep(Box<SweepArgs>),
    /// One trial per batch size: each one's peak memory, whether it fits, and the batch sizes
    /// the rule recommends.
    Memory(Box<MemoryArgs>),
    /// Find the largest batch that fits, confirm it in a run of its own, and print (or write)
    /// the batch to use.
    Autobatch(Box<AutobatchArgs>),
    /// Run the answer (the team file's batch for this GPU and model, or --batch-size) once
    /// under a profiler, its measured steps only: nsys where it is installed, else PyTorch's
    /// profiler into a Chrome trace.
    Profile(Box<ProfileArgs>),
    /// Print a team-settings file (written by `autobatch --team`) as a table.
    Team {
        /// The team-settings TOML.
        #[arg(value_name = "FILE")]
        file: PathBuf,
    },
    /// Redraw the plot of a sweep from its JSON.
    Plot {
        /// A JSON written by `tuner sweep --json`.
        #[arg(long, value_name = "FILE")]
        from: PathBuf,
        /// Write FILE.png and FILE.svg.
        #[arg(long, value_name = "FILE")]
        out: PathBuf,
    },
    /// The report of a sweep run as a Slurm array job (`sweep --slurm DIR`), from the results
    /// in DIR so far: finished trials count, the others are shown unfinished. Of a batch finder
    /// run as a Slurm job (`autobatch --slurm DIR`), its answer once it is there.
    Gather {
        /// The folder a `sweep --slurm DIR` or an `autobatch --slurm DIR` wrote.
        #[arg(value_name = "DIR")]
        dir: PathBuf,
        /// Write the report's JSON to FILE (- for stdout; default: the sweep's --json, if given).
        #[arg(long, value_name = "FILE")]
        json: Option<PathBuf>,
        /// Draw FILE.png and FILE.svg (default: the sweep's --plot, if given).
        #[arg(long, value_name = "FILE")]
        plot: Option<PathBuf>,
    },
    /// Run one trial of a Slurm plan (what each array task runs).
    #[command(hide = true)]
    Task {
        /// The plan's folder.
        #[arg(value_name = "DIR")]
        dir: PathBuf,
        /// The trial to run (default: $SLURM_ARRAY_TASK_ID).
        #[arg(value_name = "INDEX")]
        index: Option<usize>,
    },
}

/// What every command takes: where the settings come from, where trials run, and the command.
#[derive(Args, Debug, Clone, Default)]
pub struct RunArgs {
    /// A TOML config with [data] workers and [training] batch_sizes, batch_size,
    /// accumulation_steps, amp, steps, warmup_steps, optimizer (other keys of the team's are
    /// left alone); flags win over it.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// The settings the flags give.
    #[command(flatten)]
    pub flags: Overrides,
    /// Keep each trial's report, stdout and stderr in DIR (default: a temporary folder,
    /// removed unless a trial hung or failed).
    #[arg(long, value_name = "DIR")]
    pub trials_dir: Option<PathBuf>,
    /// Write the full result as JSON to FILE (- for stdout, the text then going to stderr);
    /// each trial is also written, as it ends, to FILE with the extension .trials.jsonl.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Start every trial as the command says, even a Python program (by default its modules
    /// are imported once and each trial is forked from that parent).
    #[arg(long)]
    pub no_fork: bool,
    /// No progress on stderr.
    #[arg(long)]
    pub quiet: bool,
    /// Your training command and its arguments, after `--`. {batch_size}, {workers}, {amp},
    /// {accumulation}, {steps} and {warmup} are replaced by each trial's values, which are
    /// also in PERF_LESSONS_BATCH_SIZE and the like (and a sweep's --axis NAME in {NAME} and
    /// PERF_LESSONS_<NAME>).
    #[arg(last = true, value_name = "COMMAND", required = true)]
    pub command: Vec<String>,
}

impl RunArgs {
    /// The settings of the config file and the flags (which win over it), checked.
    pub fn settings(&self) -> Result<Settings, String> {
        match &self.config {
            Some(p) => config::load(p, self.flags.clone()),
            None => Ok(self.flags.clone()),
        }
        .and_then(Overrides::resolve)
    }
}

fn parse_margin(s: &str) -> Result<f64, String> {
    let v = common::cli::parse_percent(s)?;
    if v >= 0.9 {
        return Err(format!("a margin of '{s}' leaves nothing: at most 90%"));
    }
    Ok(v)
}

/// The sizes an answer may take.
#[derive(Args, Debug, Clone, Default)]
pub struct SizeArgs {
    /// Answer in multiples of N (default 8).
    #[arg(long, value_name = "N", value_parser = parse_positive, conflicts_with = "pow2")]
    pub multiple_of: Option<usize>,
    /// Answer in powers of two.
    #[arg(long)]
    pub pow2: bool,
    /// Share of the memory the recommended batch leaves free (default by the GPU's memory:
    /// under 16 GiB 20%, under 48 GiB 10%, else 5%).
    #[arg(long, value_name = "PERCENT", value_parser = parse_margin)]
    pub margin: Option<f64>,
}

impl SizeArgs {
    pub fn granularity(&self) -> Granularity {
        match self.pow2 {
            true => Granularity::Pow2,
            false => Granularity::Multiple(self.multiple_of.unwrap_or(8)),
        }
    }
}

#[derive(Args, Debug, Clone)]
pub struct SweepArgs {
    // A list is one value of the flag: its type is spelled out, since clap reads a plain
    // `Vec` as a flag given once for each item.
    /// Batch sizes ({batch_size}): a list (32,64,128) or a power-of-two range (8..1024).
    #[arg(long, value_name = "LIST", value_parser = config::parse_batch_sizes)]
    pub batch_sizes: Option<::std::vec::Vec<usize>>,
    /// Share of the memory the recommended configuration leaves free (default by the GPU's
    /// memory class).
    #[arg(long, value_name = "PERCENT", value_parser = parse_margin)]
    pub margin: Option<f64>,
    /// Draw FILE.png and FILE.svg: samples/s and peak memory against the batch.
    #[arg(long, value_name = "FILE")]
    pub plot: Option<PathBuf>,
    /// An axis of your own, repeatable (lr=0.1,0.01): {NAME} in the command and
    /// PERF_LESSONS_<NAME> in the environment carry each value, tried with every other setting.
    #[arg(long = "axis", value_name = "NAME=V1,V2,...", value_parser = Axis::parse)]
    pub axes: Vec<Axis>,
    /// Recommend by a metric the program reports (loss:min, accuracy:max) rather than by
    /// throughput; the memory margin still applies.
    #[arg(long, value_name = "METRIC:min|max", value_parser = PickRule::parse)]
    pub pick: Option<PickRule>,
    #[command(flatten)]
    pub slurm: SlurmArgs,
    #[command(flatten)]
    pub run: RunArgs,
}

#[derive(Args, Debug, Clone)]
pub struct MemoryArgs {
    /// Batch sizes to run ({batch_size}): a list (64,256,512) or a power-of-two range.
    #[arg(long, value_name = "LIST", value_parser = config::parse_batch_sizes)]
    pub batch_sizes: Option<::std::vec::Vec<usize>>,
    #[command(flatten)]
    pub sizes: SizeArgs,
    #[command(flatten)]
    pub run: RunArgs,
}

#[derive(Args, Debug, Clone)]
pub struct AutobatchArgs {
    /// First batch tried; from there the search doubles until the first out-of-memory, or aims
    /// at the limit by the peak memory the trials report.
    #[arg(long, default_value = "8", value_parser = parse_positive)]
    pub start: usize,
    #[command(flatten)]
    pub sizes: SizeArgs,
    /// Optimizer steps the answer must hold in a run of its own before it is given.
    #[arg(long, value_name = "N", default_value_t = CONFIRM_STEPS, value_parser = parse_positive)]
    pub confirm_steps: usize,
    /// Fresh runs, one after another, the answer must hold in (default: 1; 2 with --ranks
    /// above 1, where a group at the edge of its memory may hold once and hang the next time).
    #[arg(long, value_name = "N", value_parser = parse_positive)]
    pub confirm_runs: Option<usize>,
    /// Effective batch to keep with gradient accumulation (default: the config's batch_size x
    /// accumulation_steps).
    #[arg(long, value_name = "N", value_parser = parse_positive)]
    pub effective_batch: Option<usize>,
    /// Write the answer into FILE, a .toml, .yaml, .yml or .json of any shape (without FILE: the
    /// --config file), at --key and --accumulation-key, after a backup (FILE.bak); every other
    /// line, comment and key order kept (JSON has no comments).
    #[arg(long, value_name = "FILE", num_args = 0..=1)]
    pub write: Option<Option<PathBuf>>,
    /// Where the batch size goes, as a dotted key path (data.batch_size); required for a file
    /// other than the --config file, whose key is training.batch_size. The printed Hydra and
    /// LightningCLI overrides name the key paths given here.
    #[arg(long, value_name = "DOTTED.PATH", value_parser = KeyPath::parse)]
    pub key: Option<KeyPath>,
    /// Where the gradient accumulation steps go, as a dotted key path (default with the
    /// --config file: training.accumulation_steps); written when the answer accumulates or the
    /// key is already there.
    #[arg(long, value_name = "DOTTED.PATH", value_parser = KeyPath::parse)]
    pub accumulation_key: Option<KeyPath>,
    /// Add --key and --accumulation-key to the file where it does not have them (without this,
    /// a key path that is not in the file is refused, naming the nearest ones that are).
    #[arg(long)]
    pub new_key: bool,
    /// Add or update this GPU and model's entry in a shared team-settings TOML.
    #[arg(long, value_name = "FILE")]
    pub team: Option<PathBuf>,
    /// The model's name in the team file (default: the script's file name without its
    /// extension, the module after -m, else the program's).
    #[arg(long, value_name = "NAME")]
    pub model_name: Option<String>,
    #[command(flatten)]
    pub slurm: SlurmArgs,
    #[command(flatten)]
    pub run: RunArgs,
}

impl AutobatchArgs {
    /// The key paths of the answer: --key and --accumulation-key, else the tuner config's own.
    pub fn keys(&self) -> Keys {
        let config = Keys::tuner_config();
        Keys {
            accumulation: (self.accumulation_key.clone())
                .or(config.accumulation.filter(|_| self.key.is_none())),
            batch_size: self.key.clone().unwrap_or(config.batch_size),
            new_keys: self.key.is_none() || self.new_key,
        }
    }

    /// The file `--write` names, with the keys the answer goes to.
    pub fn write_target(&self) -> Result<Option<PathBuf>, String> {
        let config = self.run.config.as_deref();
        let path = match (&self.write, config) {
            (None, _) => return Ok(None),
            (Some(Some(file)), _) => file.clone(),
            (Some(None), Some(config)) => config.to_path_buf(),
            (Some(None), None) => {
                return Err(
                    "--write without a FILE writes into the --config file: give --config FILE, or --write FILE --key DOTTED.PATH".into(),
                )
            }
        };
        let same = |a: &std::path::Path, b: &std::path::Path| {
            a == b || matches!((a.canonicalize(), b.canonicalize()), (Ok(x), Ok(y)) if x == y)
        };
        if self.key.is_none() && !config.is_some_and(|c| same(c, &path)) {
            return Err(format!(
                "{}: give --key DOTTED.PATH, where in it the batch size goes (only the --config file has a default, training.batch_size)",
                path.display()
            ));
        }
        Format::of(&path).map(|_| Some(path))
    }
}

#[derive(Args, Debug, Clone)]
pub struct ProfileArgs {
    /// The batch to profile ({batch_size}; default: the --team file's entry, else the config's
    /// training.batch_size).
    #[arg(long, value_name = "N", value_parser = parse_positive, conflicts_with = "team")]
    pub batch_size: Option<usize>,
    /// A team-settings TOML (written by `autobatch --team`): profile its batch, accumulation
    /// and precision for this GPU and model.
    #[arg(long, value_name = "FILE")]
    pub team: Option<PathBuf>,
    /// The model's name in the team file (default: the script's file name without its
    /// extension, the module after -m, else the program's).
    #[arg(long, value_name = "NAME")]
    pub model_name: Option<String>,
    /// Which profiler: nsys where --nsys, the PATH or NSYS names one, else PyTorch's (auto);
    /// nsys (looked for in its install folders too); or PyTorch's (torch).
    #[arg(long, value_enum, default_value_t)]
    pub profiler: Choice,
    /// nsys to use.
    #[arg(long, value_name = "PATH")]
    pub nsys: Option<PathBuf>,
    /// Folder for the report or trace, named MODEL-bBATCH-TIME.
    #[arg(long, value_name = "DIR", default_value = "profiles")]
    pub out_dir: PathBuf,
    #[command(flatten)]
    pub run: RunArgs,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::program::Precision;
    use clap::CommandFactory;

    #[test]
    fn every_flag_has_help_and_one_name() {
        Cli::command().debug_assert();
        fn check(cmd: &clap::Command) {
            for arg in cmd.get_arguments() {
                let id = arg.get_id().as_str();
                if id == "help" || id == "version" {
                    continue;
                }
                assert!(
                    arg.get_help().is_some(),
                    "--{id} of `{}` has no help",
                    cmd.get_name()
                );
            }
            for sub in cmd.get_subcommands() {
                check(sub);
            }
        }
        check(&Cli::command());
    }

    #[test]
    fn a_command_is_required_and_flags_parse() {
        let parse = |line: &str| Cli::try_parse_from(line.split(' '));
        assert!(parse("tuner sweep").is_err());
        let cli = parse("tuner autobatch --workers 4 --amp on --json - -- python3 t.py").unwrap();
        let Command::Autobatch(a) = cli.command else {
            panic!()
        };
        assert_eq!(a.run.json.as_deref(), Some(std::path::Path::new("-")));
        assert_eq!(a.confirm_steps, 20);
        assert_eq!(a.sizes.granularity(), Granularity::Multiple(8));
        let s = a.run.settings().unwrap();
        assert_eq!((s.workers, s.amp), (vec![4], vec![Precision::On]));
        let autobatch = |line: &str| match parse(line).unwrap().command {
            Command::Autobatch(a) => a,
            _ => panic!(),
        };
        let e = autobatch("tuner autobatch --write -- x")
            .write_target()
            .unwrap_err();
        assert!(e.contains("give --config FILE"), "{e}");
        let a = autobatch("tuner autobatch --config run.toml --write -- x");
        let t = a.write_target().unwrap().unwrap();
        assert_eq!(
            (t.to_str(), a.keys()),
            (Some("run.toml"), Keys::tuner_config())
        );
        let e = autobatch("tuner autobatch --config run.toml --write conf.yaml -- x")
            .write_target()
            .unwrap_err();
        assert!(e.contains("conf.yaml: give --key"), "{e}");
        let a = autobatch("tuner autobatch --write conf.yaml --key data.batch_size -- x");
        let t = a.write_target().unwrap().unwrap();
        assert_eq!(
            (t.to_str(), a.keys().accumulation),
            (Some("conf.yaml"), None)
        );
        assert_eq!(a.keys().batch_size.to_string(), "data.batch_size");
        let e = autobatch("tuner autobatch --write conf.ini --key a -- x")
            .write_target()
            .unwrap_err();
        assert!(e.contains(".toml, .yaml, .yml or .json"), "{e}");
        assert!(parse("tuner autobatch --key a..b -- x").is_err());
        // A flag wins over the config file; what the flags leave out, the file says.
        let dir = std::env::temp_dir().join(format!("tuner-cli-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("run.toml");
        let text = "[training]\nbatch_sizes = [8, 16]\nsteps = 10\n[tuner]\nstall_limit = 120\n";
        std::fs::write(&file, text).unwrap();
        let line = format!("tuner sweep --config {} --steps 3 -- x", file.display());
        let Command::Sweep(a) = parse(&line).unwrap().command else {
            panic!()
        };
        let s = a.run.settings().unwrap();
        assert_eq!(
            (s.batch_sizes, s.steps, s.stall_limit_s),
            (vec![8, 16], 3, 120.0)
        );
        let line = format!(
            "tuner sweep --config {} --stall-limit 2.5 -- x",
            file.display()
        );
        let Command::Sweep(a) = parse(&line).unwrap().command else {
            panic!()
        };
        let s = a.run.settings().unwrap();
        assert_eq!((s.steps, s.stall_limit_s), (10, 2.5));
        let _ = std::fs::remove_dir_all(dir);
        assert!(parse("tuner memory --pow2 --multiple-of 4 -- x").is_err());
    }
}

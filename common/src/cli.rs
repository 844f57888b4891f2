//! The edge of every binary: the flags every lesson binary shares (clap) and the plain
//! [RunOptions] they become, the parsers that turn bad input into one clear line, the `main`
//! wrapper that maps errors to the exit codes of [crate::exit], the version every binary
//! prints, and [finish], which prints a report, writes its JSON and exits by it.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use crate::bench::BenchConfig;
use crate::exit::Exit;
use crate::gpu::Gpu;
use crate::report::{LessonReport, Startup};
use crate::runner::{run_lesson, Lesson, RunOptions};
use crate::stop::StopRule;

/// Largest element count any lesson accepts: 2^36 f32 is 256 GiB, past every GPU's memory.
pub const MAX_ELEMENTS: u64 = 1 << 36;

#[derive(clap::Args, Debug, Clone, Default)]
pub struct CommonArgs {
    /// GPU to run on (CUDA ordinal).
    #[arg(long, default_value_t = 0, value_name = "N")]
    pub device: usize,
    /// Write the full result (device, provenance, raw samples, verification) as JSON here.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Least measured GPU time per variant before the noise test may stop it.
    #[arg(long, value_name = "SECONDS", value_parser = parse_seconds)]
    pub min_time: Option<f64>,
    /// Least measured GPU time for a variant whose timed work crosses the host link (host-device
    /// copies), where it is longer than --min-time.
    #[arg(long, value_name = "SECONDS", value_parser = parse_seconds)]
    pub min_time_host_link: Option<f64>,
    /// Most wall time per variant, whatever the noise.
    #[arg(long, value_name = "SECONDS", value_parser = parse_seconds)]
    pub max_time: Option<f64>,
    /// Stop once the relative standard deviation of the samples is at or under this.
    #[arg(long, value_name = "PERCENT", value_parser = parse_percent)]
    pub max_noise: Option<f64>,
    /// Least number of samples per variant.
    #[arg(long, value_name = "N", value_parser = parse_positive_usize)]
    pub min_samples: Option<usize>,
    /// Also stop once the median is known this well: its relative standard error (1.2533 x
    /// noise / sqrt(samples)) at or under this, for runs whose noise never comes down.
    #[arg(long, value_name = "PERCENT", value_parser = parse_percent)]
    pub max_median_error: Option<f64>,
    /// Flush L2 before every sample (cold cache); the default keeps it warm (hot).
    #[arg(long)]
    pub cold: bool,
    /// A first look: fewer samples and a looser noise bound.
    #[arg(long)]
    pub quick: bool,
    /// Re-measure the device ceilings instead of using the cached ones.
    #[arg(long, alias = "refresh")]
    pub refresh_ceilings: bool,
    /// Record the timed regions' GPU activity with CUPTI and write a Chrome trace-event JSON
    /// here (opens in ui.perfetto.dev); prints a kernel summary per variant.
    #[arg(long, value_name = "FILE")]
    pub trace: Option<PathBuf>,
    /// Test only: run this variant twice per timed run, a planted regression for the compare's
    /// tests to catch. Verification is unaffected.
    #[arg(long, hide = true, value_name = "VARIANT")]
    pub plant_slowdown: Option<String>,
    /// Verify and time the variants, and skip the lesson's own figures (per-variant metrics,
    /// sections): what the compare reads of a lesson.
    #[arg(long, hide = true)]
    pub measure_only: bool,
    /// Run only these of the binary's variants (ids as its report names them): how the
    /// compare runs the variants it needs of a lesson, several in one process.
    #[arg(long, hide = true, value_name = "ID,...", value_delimiter = ',')]
    pub variants: Vec<String>,
}

impl CommonArgs {
    pub fn stop_rule(&self) -> StopRule {
        self.overlay(if self.quick {
            StopRule::quick()
        } else {
            StopRule::default()
        })
    }

    /// `rule` with the stopping-rule flags that were given put over it.
    pub fn overlay(&self, mut rule: StopRule) -> StopRule {
        if let Some(t) = self.min_time {
            rule.min_time_s = t;
        }
        if let Some(t) = self.min_time_host_link {
            rule.host_link_min_time_s = t;
        }
        if let Some(t) = self.max_time {
            rule.max_time_s = t;
        }
        if let Some(n) = self.max_noise {
            rule.max_noise = n;
        }
        if let Some(e) = self.max_median_error {
            rule.max_median_error = Some(e);
        }
        if let Some(n) = self.min_samples {
            rule.min_samples = n;
            rule.max_samples = rule.max_samples.max(n);
        }
        rule
    }

    pub fn bench_config(&self) -> BenchConfig {
        BenchConfig {
            stop: self.stop_rule(),
            cold: self.cold,
            ..BenchConfig::default()
        }
    }

    /// The runner's options these flags ask for (every variant; a binary narrows `only`, and
    /// `--variants` narrows that).
    pub fn options(&self, startup: &Startup) -> RunOptions {
        RunOptions {
            only: Vec::new(),
            variants: self.variants.clone(),
            bench: self.bench_config(),
            refresh_ceilings: self.refresh_ceilings,
            trace: self.trace.clone(),
            plant_slowdown: self.plant_slowdown.clone(),
            startup: Some(startup.clone()),
            skip_figures: self.measure_only,
        }
    }
}

/// An element count: a positive integer, optionally with a binary suffix K, M or G
/// (10M = 10 * 2^20, the chapter's "10M"), at most [MAX_ELEMENTS].
pub fn parse_elements(s: &str) -> Result<u64, String> {
    parse_count_with_max(s, MAX_ELEMENTS)
}

pub fn parse_count_with_max(s: &str, max: u64) -> Result<u64, String> {
    let t = s.trim();
    // "64Mi" means the same as "64M": every suffix is binary.
    let t = t
        .strip_suffix('i')
        .filter(|r| r.ends_with(['K', 'k', 'M', 'm', 'G', 'g']))
        .unwrap_or(t);
    let (digits, shift) = match t.char_indices().last() {
        Some((i, 'K' | 'k')) => (&t[..i], 10),
        Some((i, 'M' | 'm')) => (&t[..i], 20),
        Some((i, 'G' | 'g')) => (&t[..i], 30),
        _ => (t, 0),
    };
    if digits.starts_with('-') {
        return Err(format!("'{s}' is negative: give a positive count"));
    }
    let value: u64 = digits.parse().map_err(|_| {
        format!("'{s}' is not a count: use digits with an optional K, M or G suffix")
    })?;
    if value == 0 {
        return Err("a count of 0 has nothing to measure: give at least 1".into());
    }
    let value = value
        .checked_mul(1u64 << shift)
        .filter(|v| *v <= max)
        .ok_or_else(|| format!("'{s}' is too large: at most {max}"))?;
    Ok(value)
}

pub fn parse_positive_usize(s: &str) -> Result<usize, String> {
    parse_count_with_max(s, u32::MAX as u64).map(|v| v as usize)
}

pub fn parse_seconds(s: &str) -> Result<f64, String> {
    let v: f64 = s
        .trim()
        .parse()
        .map_err(|_| format!("'{s}' is not a number of seconds"))?;
    if !v.is_finite() || v < 0.0 {
        return Err(format!("'{s}' must be a non-negative number of seconds"));
    }
    if v > 3600.0 {
        return Err(format!("'{s}' seconds is more than an hour: at most 3600"));
    }
    Ok(v)
}

/// A percentage given as "1" or "1%", returned as a fraction (0.01).
pub fn parse_percent(s: &str) -> Result<f64, String> {
    let v: f64 = s
        .trim()
        .trim_end_matches('%')
        .parse()
        .map_err(|_| format!("'{s}' is not a percentage"))?;
    if !(v > 0.0 && v <= 100.0) {
        return Err(format!(
            "'{s}' must be a percentage above 0 and at most 100"
        ));
    }
    Ok(v / 100.0)
}

/// What every binary prints for `--version`: the workspace version and the git commit it was
/// built from. Give it to clap as `#[command(version = common::cli::VERSION)]`.
pub const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (",
    env!("PERF_LESSONS_GIT_COMMIT"),
    ")"
);

/// Exit code for a failed run ([Exit::of_error]).
pub fn exit_code_for(error: &anyhow::Error) -> u8 {
    Exit::of_error(error).code()
}

/// Each problem as an `error:` line on stderr; exit 0 when there is none, else 1.
pub fn exit_for_problems(problems: &[String]) -> ExitCode {
    for p in problems {
        eprintln!("error: {p}");
    }
    if problems.is_empty() {
        Exit::Done.into()
    } else {
        Exit::Problem.into()
    }
}

/// Run a binary's body with the process's start-up clock, and turn its error into one line
/// on stderr and an exit code.
pub fn main_with(body: impl FnOnce(Startup) -> anyhow::Result<ExitCode>) -> ExitCode {
    match body(Startup::now()) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(exit_code_for(&e))
        }
    }
}

/// The body of a lesson binary: open the GPU the flags name, build the lesson on it, run the
/// variants in `only` (all when empty) with the flags' options, print, write, exit.
pub fn run_lesson_with<L: Lesson>(
    args: &CommonArgs,
    only: &[&str],
    mut startup: Startup,
    build: impl FnOnce(&Gpu) -> crate::Result<L>,
) -> anyhow::Result<ExitCode> {
    let gpu = Gpu::open(args.device)?;
    startup.mark("GPU opened (context, stream, NVML)");
    let mut lesson = build(&gpu)?;
    startup.mark("lesson ready (kernels, inputs, reference)");
    let report = run_lesson(&gpu, &mut lesson, &args.options(&startup).only(only))?;
    Ok(finish(&report, args.json.as_deref())?)
}

/// Print the report, write its JSON when asked, and exit non-zero if any variant failed.
pub fn finish(report: &LessonReport, json: Option<&Path>) -> crate::Result<ExitCode> {
    print!("{}", report.markdown());
    if let Some(path) = json {
        report.write_json(path)?;
        println!("wrote {}", path.display());
    }
    Ok(if report.all_passed() {
        Exit::Done
    } else {
        Exit::Problem
    }
    .into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_with_suffixes() {
        assert_eq!(parse_elements("1000"), Ok(1000));
        assert_eq!(parse_elements("10M"), Ok(10 << 20));
        assert_eq!(parse_elements("64Mi"), Ok(64 << 20));
        assert_eq!(parse_elements("4k"), Ok(4096));
        assert_eq!(parse_elements(" 1G "), Ok(1 << 30));
    }

    #[test]
    fn bad_counts_say_why() {
        assert!(parse_elements("0").unwrap_err().contains("0"));
        assert!(parse_elements("-5").unwrap_err().contains("negative"));
        assert!(parse_elements("ten").unwrap_err().contains("not a count"));
        assert!(parse_elements("").unwrap_err().contains("not a count"));
        assert!(parse_elements("1.5M").unwrap_err().contains("not a count"));
        assert!(parse_elements("128G").unwrap_err().contains("too large"));
        assert!(parse_elements("99999999999999999999")
            .unwrap_err()
            .contains("not a count"));
        assert!(parse_elements("18446744073709551615G")
            .unwrap_err()
            .contains("too large"));
    }

    #[test]
    fn seconds_and_percent() {
        assert_eq!(parse_seconds("0.5"), Ok(0.5));
        assert!(parse_seconds("-1").is_err());
        assert!(parse_seconds("nan").is_err());
        assert!(parse_seconds("1e9").is_err());
        assert_eq!(parse_percent("1"), Ok(0.01));
        assert_eq!(parse_percent("0.5%"), Ok(0.005));
        assert!(parse_percent("0").is_err());
        assert!(parse_percent("150").is_err());
    }

    #[test]
    fn flags_override_the_stop_rule() {
        let args = CommonArgs {
            min_time: Some(1.0),
            max_noise: Some(0.002),
            min_samples: Some(500_000),
            ..CommonArgs::default()
        };
        let rule = args.stop_rule();
        assert_eq!(rule.min_time_s, 1.0);
        assert_eq!(rule.max_noise, 0.002);
        assert_eq!(rule.min_samples, 500_000);
        assert!(
            rule.validate().is_ok(),
            "max samples follows min samples up"
        );
        let quick = CommonArgs {
            quick: true,
            ..CommonArgs::default()
        }
        .stop_rule();
        assert!(quick.min_time_s < StopRule::default().min_time_s);
    }

    #[test]
    fn the_variants_asked_for_reach_the_runner() {
        use clap::Parser;
        #[derive(Parser)]
        struct Lesson {
            #[command(flatten)]
            common: CommonArgs,
        }
        let asked = Lesson::parse_from(["lesson", "--variants", "training:baseline,graphs"]);
        let options = asked.common.options(&Startup::now());
        assert_eq!(options.variants, ["training:baseline", "graphs"]);
        let all = Lesson::parse_from(["lesson"])
            .common
            .options(&Startup::now());
        assert!(all.variants.is_empty() && all.only.is_empty());
    }

    #[test]
    fn every_lesson_gets_trace() {
        use clap::Parser;
        #[derive(Parser)]
        struct Lesson {
            #[command(flatten)]
            common: CommonArgs,
        }
        let l = Lesson::parse_from(["lesson", "--trace", "out dir/t.json", "--quick"]);
        assert_eq!(
            l.common.trace.as_deref(),
            Some(std::path::Path::new("out dir/t.json"))
        );
        assert!(Lesson::parse_from(["lesson"]).common.trace.is_none());
        assert!(Lesson::try_parse_from(["lesson", "--trace"]).is_err());
    }

    #[test]
    fn no_gpu_errors_exit_with_3_and_bad_usage_with_2() {
        use crate::error::Error;
        assert_eq!(exit_code_for(&anyhow::Error::new(Error::NoDriver)), 3);
        assert_eq!(
            exit_code_for(&anyhow::Error::new(Error::NoDevice(String::new()))),
            3
        );
        assert_eq!(exit_code_for(&anyhow::anyhow!("anything else")), 1);
        assert_eq!(exit_code_for(&anyhow::Error::new(Error::invalid("x"))), 1);
        assert_eq!(exit_code_for(&crate::exit::usage("--min-samples 0")), 2);
    }

    #[test]
    fn the_version_names_the_commit() {
        assert!(VERSION.starts_with(env!("CARGO_PKG_VERSION")), "{VERSION}");
        assert!(VERSION.ends_with(')'), "{VERSION}");
    }
}

//! Settings: defaults, then a TOML config file (`[model]`, `[data]`, `[training]`), then flags;
//! flags win. Every setting is one optional field of [Overrides], so the file and the flags
//! merge the same way. A key the file does not know, or a value of the wrong type, is an error
//! naming the key: a typo must not silently fall back to a default.

use std::path::{Path, PathBuf};

use serde::Serialize;
use toml_edit::{DocumentMut, Item, Value};

use mlp::{Arch, Optimizer};

use crate::preset::Preset;

/// On, off, or both (a sweep axis).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Switch {
    On,
    Off,
    Both,
}

impl Switch {
    pub fn parse(s: &str) -> Result<Switch, String> {
        match s.trim().to_ascii_lowercase().as_str() {
            "on" | "true" | "yes" => Ok(Switch::On),
            "off" | "false" | "no" => Ok(Switch::Off),
            "both" => Ok(Switch::Both),
            _ => Err(format!("'{s}' is not on, off or both")),
        }
    }

    /// The values the sweep tries, off first.
    pub fn values(self) -> Vec<bool> {
        match self {
            Switch::On => vec![true],
            Switch::Off => vec![false],
            Switch::Both => vec![false, true],
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum OptimizerKind {
    Sgd,
    AdamW,
}

impl OptimizerKind {
    pub fn parse(s: &str) -> Result<OptimizerKind, String> {
        match s.trim().to_ascii_lowercase().as_str() {
            "sgd" => Ok(OptimizerKind::Sgd),
            "adamw" => Ok(OptimizerKind::AdamW),
            _ => Err(format!("'{s}' is not an optimizer: use sgd or adamw")),
        }
    }
}

/// Largest batch the tool accepts (far past any GPU's memory for every model).
pub const MAX_BATCH: u64 = 1 << 26;

/// Every setting, each optional: what one source (the file, the flags) says.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Overrides {
    pub preset: Option<Preset>,
    pub input: Option<usize>,
    pub hidden: Option<usize>,
    pub depth: Option<usize>,
    pub classes: Option<usize>,
    pub data: Option<PathBuf>,
    pub labels: Option<PathBuf>,
    pub samples: Option<usize>,
    pub seed: Option<u64>,
    pub workers: Option<Vec<usize>>,
    pub pin: Option<Switch>,
    pub cpu_cost_us: Option<f64>,
    pub optimizer: Option<OptimizerKind>,
    pub lr: Option<f64>,
    pub momentum: Option<f64>,
    pub weight_decay: Option<f64>,
    pub batch_sizes: Option<Vec<usize>>,
    pub batch_size: Option<usize>,
    pub accumulation_steps: Option<usize>,
    pub amp: Option<Switch>,
    pub steps: Option<usize>,
    pub warmup_steps: Option<usize>,
    pub device: Option<usize>,
}

macro_rules! merge_fields {
    ($low:expr, $high:expr, $($f:ident),*) => {
        Overrides { $($f: $high.$f.or($low.$f)),* }
    };
}

impl Overrides {
    /// `high` wins wherever it says something.
    pub fn merge(self, high: Overrides) -> Overrides {
        merge_fields!(
            self,
            high,
            preset,
            input,
            hidden,
            depth,
            classes,
            data,
            labels,
            samples,
            seed,
            workers,
            pin,
            cpu_cost_us,
            optimizer,
            lr,
            momentum,
            weight_decay,
            batch_sizes,
            batch_size,
            accumulation_steps,
            amp,
            steps,
            warmup_steps,
            device
        )
    }
}

/// The resolved settings a run uses.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Settings {
    pub preset: Option<Preset>,
    pub arch: Arch,
    pub optimizer: Optimizer,
    pub lr: f32,
    pub data: Option<PathBuf>,
    pub labels: Option<PathBuf>,
    /// Synthetic samples (ignored with a data file).
    pub samples: usize,
    pub seed: u64,
    pub workers: Vec<usize>,
    pub pin: Vec<bool>,
    pub cpu_cost_us: f64,
    pub batch_sizes: Vec<usize>,
    pub batch_size: Option<usize>,
    pub accumulation_steps: usize,
    pub amp: Vec<bool>,
    pub steps: usize,
    pub warmup_steps: usize,
    pub device: usize,
}

/// 1, 2, 4, ... 8192: the issue's default sweep.
pub fn default_batch_sizes() -> Vec<usize> {
    (0..=13).map(|p| 1usize << p).collect()
}

impl Overrides {
    pub fn resolve(self) -> Result<Settings, String> {
        let preset = self
            .preset
            .or(if self.hidden.is_none() && self.depth.is_none() {
                Some(Preset::Small)
            } else {
                None
            });
        let base = preset.unwrap_or(Preset::Small).arch();
        let arch = Arch {
            input: self.input.unwrap_or(base.input),
            hidden: self.hidden.unwrap_or(base.hidden),
            depth: self.depth.unwrap_or(base.depth),
            classes: self.classes.unwrap_or(base.classes),
        };
        arch.validate()?;
        // A preset that a size flag changed is no longer that preset.
        let preset = preset.filter(|p| p.arch() == arch);
        let kind = self.optimizer.unwrap_or(OptimizerKind::Sgd);
        let weight_decay = self.weight_decay.unwrap_or(match kind {
            OptimizerKind::Sgd => 0.0,
            OptimizerKind::AdamW => 0.01,
        }) as f32;
        let momentum = self.momentum.unwrap_or(0.0) as f32;
        if !(0.0..1.0).contains(&momentum) {
            return Err(format!("momentum {momentum} must be in [0, 1)"));
        }
        if !(0.0..1.0).contains(&weight_decay) {
            return Err(format!("weight decay {weight_decay} must be in [0, 1)"));
        }
        let optimizer = match kind {
            OptimizerKind::Sgd => Optimizer::Sgd {
                momentum,
                weight_decay,
            },
            OptimizerKind::AdamW => {
                if self.momentum.is_some() {
                    return Err("momentum is an SGD setting; AdamW uses its betas".into());
                }
                match Optimizer::adamw_default() {
                    Optimizer::AdamW {
                        beta1, beta2, eps, ..
                    } => Optimizer::AdamW {
                        beta1,
                        beta2,
                        eps,
                        weight_decay,
                    },
                    other => other,
                }
            }
        };
        let lr = self.lr.unwrap_or(match kind {
            OptimizerKind::Sgd => 0.05,
            OptimizerKind::AdamW => 1e-3,
        });
        if !(lr > 0.0 && lr <= 10.0) {
            return Err(format!("learning rate {lr} must be above 0 and at most 10"));
        }
        let steps = self.steps.unwrap_or(30);
        let warmup_steps = self.warmup_steps.unwrap_or(5);
        if steps == 0 {
            return Err("steps must be at least 1".into());
        }
        let cpu_cost_us = self.cpu_cost_us.unwrap_or(0.0);
        if !(0.0..=1e6).contains(&cpu_cost_us) {
            return Err(format!(
                "cpu cost {cpu_cost_us} us per sample must be in 0..1000000"
            ));
        }
        let mut batch_sizes = self.batch_sizes.unwrap_or_else(default_batch_sizes);
        batch_sizes.sort_unstable();
        batch_sizes.dedup();
        let mut workers = self.workers.unwrap_or_else(|| vec![4]);
        workers.sort_unstable();
        workers.dedup();
        if self.data.is_none() && self.labels.is_some() {
            return Err("labels given without a data file".into());
        }
        Ok(Settings {
            preset,
            arch,
            optimizer,
            lr: lr as f32,
            data: self.data,
            labels: self.labels,
            samples: self.samples.unwrap_or(32768),
            seed: self.seed.unwrap_or(1),
            workers,
            pin: self.pin.unwrap_or(Switch::On).values(),
            cpu_cost_us,
            batch_sizes,
            batch_size: self.batch_size,
            accumulation_steps: self.accumulation_steps.unwrap_or(1),
            amp: self.amp.unwrap_or(Switch::Off).values(),
            steps,
            warmup_steps,
            device: self.device.unwrap_or(0),
        })
    }
}

/// `1,2,4` or a power-of-two range `1..8192`.
pub fn parse_batch_sizes(s: &str) -> Result<Vec<usize>, String> {
    let count = |t: &str| common::cli::parse_count_with_max(t, MAX_BATCH).map(|v| v as usize);
    if let Some((a, b)) = s.split_once("..") {
        let (a, b) = (count(a)?, count(b)?);
        if a > b {
            return Err(format!("'{s}': the range runs backwards"));
        }
        let mut out = Vec::new();
        let mut v = a;
        while v <= b {
            out.push(v);
            v *= 2;
        }
        return Ok(out);
    }
    s.split(',').map(|t| count(t.trim())).collect()
}

/// `0,2,4`: worker counts (0 prepares batches on the training thread).
pub fn parse_workers(s: &str) -> Result<Vec<usize>, String> {
    s.split(',')
        .map(|t| {
            let t = t.trim();
            let v: usize = t
                .parse()
                .map_err(|_| format!("'{t}' is not a worker count (0 or more)"))?;
            if v > 256 {
                return Err(format!("{v} workers is too many: at most 256"));
            }
            Ok(v)
        })
        .collect()
}

const MODEL_KEYS: [&str; 5] = ["preset", "input", "hidden", "depth", "classes"];
const DATA_KEYS: [&str; 7] = [
    "file",
    "labels",
    "samples",
    "seed",
    "workers",
    "pin",
    "cpu_cost_us",
];
const TRAINING_KEYS: [&str; 11] = [
    "optimizer",
    "lr",
    "momentum",
    "weight_decay",
    "batch_sizes",
    "batch_size",
    "accumulation_steps",
    "amp",
    "steps",
    "warmup_steps",
    "device",
];

/// Read a config file.
pub fn load(path: &Path) -> Result<Overrides, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("{}: cannot read the config: {e}", path.display()))?;
    let base = path.parent().unwrap_or(Path::new("."));
    parse(&text, base).map_err(|e| format!("{}: {e}", path.display()))
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::String(_) => "a string",
        Value::Integer(_) => "an integer",
        Value::Float(_) => "a float",
        Value::Boolean(_) => "a boolean",
        Value::Datetime(_) => "a date",
        Value::Array(_) => "an array",
        Value::InlineTable(_) => "a table",
    }
}

struct Key<'a> {
    name: String,
    value: &'a Value,
}

impl Key<'_> {
    fn wrong(&self, wanted: &str) -> String {
        format!(
            "'{}' must be {wanted}, found {}",
            self.name,
            type_name(self.value)
        )
    }

    fn count(&self, min: i64, max: u64) -> Result<usize, String> {
        let v = self
            .value
            .as_integer()
            .ok_or_else(|| self.wrong("an integer"))?;
        if v < min || v as u64 > max {
            return Err(format!(
                "'{}' is {v}; it must be in {min}..={max}",
                self.name
            ));
        }
        Ok(v as usize)
    }

    fn number(&self) -> Result<f64, String> {
        match self.value {
            Value::Float(f) => Ok(*f.value()),
            Value::Integer(i) => Ok(*i.value() as f64),
            _ => Err(self.wrong("a number")),
        }
    }

    fn string(&self) -> Result<&str, String> {
        self.value.as_str().ok_or_else(|| self.wrong("a string"))
    }

    fn switch(&self) -> Result<Switch, String> {
        match self.value {
            Value::Boolean(b) => Ok(if *b.value() { Switch::On } else { Switch::Off }),
            Value::String(s) => {
                Switch::parse(s.value()).map_err(|e| format!("'{}': {e}", self.name))
            }
            _ => Err(self.wrong("true, false, \"on\", \"off\" or \"both\"")),
        }
    }

    fn counts(&self, min: i64, max: u64) -> Result<Vec<usize>, String> {
        match self.value {
            Value::Integer(_) => Ok(vec![self.count(min, max)?]),
            Value::Array(a) => {
                if a.is_empty() {
                    return Err(format!("'{}' is an empty list", self.name));
                }
                a.iter()
                    .enumerate()
                    .map(|(i, v)| {
                        Key {
                            name: format!("{}[{i}]", self.name),
                            value: v,
                        }
                        .count(min, max)
                    })
                    .collect()
            }
            _ => Err(self.wrong("an integer or a list of integers")),
        }
    }
}

/// Parse a config's text; relative file paths are taken from `base` (the config's folder).
pub fn parse(text: &str, base: &Path) -> Result<Overrides, String> {
    let doc: DocumentMut = text
        .parse()
        .map_err(|e: toml_edit::TomlError| format!("not valid TOML: {}", e.to_string().trim()))?;
    let mut o = Overrides::default();
    for (section, item) in doc.iter() {
        let known: &[&str] = match section {
            "model" => &MODEL_KEYS,
            "data" => &DATA_KEYS,
            "training" => &TRAINING_KEYS,
            _ => {
                return Err(format!(
                    "unknown section '{section}' (the sections are [model], [data] and [training])"
                ))
            }
        };
        let table = item
            .as_table_like()
            .ok_or_else(|| format!("'{section}' must be a table ([{section}])"))?;
        for (name, item) in table.iter() {
            let full = format!("{section}.{name}");
            if !known.contains(&name) {
                return Err(format!(
                    "unknown key '{full}' (known keys in [{section}]: {})",
                    known.join(", ")
                ));
            }
            let value = match item {
                Item::Value(v) => v,
                _ => return Err(format!("'{full}' must be a value, not a table")),
            };
            let k = Key { name: full, value };
            let width = mlp::arch::MAX_WIDTH as u64;
            match (section, name) {
                ("model", "preset") => {
                    let s = k.string()?;
                    o.preset = Some(Preset::by_name(s).ok_or_else(|| {
                        format!("'model.preset' is '{s}'; use small, medium or large")
                    })?);
                }
                ("model", "input") => o.input = Some(k.count(1, width)?),
                ("model", "hidden") => o.hidden = Some(k.count(1, width)?),
                ("model", "depth") => o.depth = Some(k.count(1, mlp::arch::MAX_DEPTH as u64)?),
                ("model", "classes") => o.classes = Some(k.count(2, width)?),
                ("data", "file") => o.data = Some(base.join(k.string()?)),
                ("data", "labels") => o.labels = Some(base.join(k.string()?)),
                ("data", "samples") => o.samples = Some(k.count(1, 1 << 30)?),
                ("data", "seed") => o.seed = Some(k.count(0, i64::MAX as u64)? as u64),
                ("data", "workers") => o.workers = Some(k.counts(0, 256)?),
                ("data", "pin") => o.pin = Some(k.switch()?),
                ("data", "cpu_cost_us") => o.cpu_cost_us = Some(k.number()?),
                ("training", "optimizer") => {
                    o.optimizer = Some(
                        OptimizerKind::parse(k.string()?)
                            .map_err(|e| format!("'{}': {e}", k.name))?,
                    )
                }
                ("training", "lr") => o.lr = Some(k.number()?),
                ("training", "momentum") => o.momentum = Some(k.number()?),
                ("training", "weight_decay") => o.weight_decay = Some(k.number()?),
                ("training", "batch_sizes") => o.batch_sizes = Some(k.counts(1, MAX_BATCH)?),
                ("training", "batch_size") => o.batch_size = Some(k.count(1, MAX_BATCH)?),
                ("training", "accumulation_steps") => {
                    o.accumulation_steps = Some(k.count(1, 1 << 20)?)
                }
                ("training", "amp") => o.amp = Some(k.switch()?),
                ("training", "steps") => o.steps = Some(k.count(1, 1_000_000)?),
                ("training", "warmup_steps") => o.warmup_steps = Some(k.count(0, 1_000_000)?),
                ("training", "device") => o.device = Some(k.count(0, 1024)?),
                _ => unreachable!("every known key is matched above"),
            }
        }
    }
    Ok(o)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(text: &str) -> Result<Overrides, String> {
        parse(text, Path::new("/cfg"))
    }

    #[test]
    fn a_full_config_parses() {
        let o = p(r#"
# a comment
[model]
preset = "medium"
classes = 20
[data]
file = "train.safetensors"
workers = [0, 4]
pin = "both"
cpu_cost_us = 2
[training]
optimizer = "adamw"
lr = 0.002
batch_sizes = [64, 128]
amp = true
steps = 10
"#)
        .unwrap();
        assert_eq!(o.preset, Some(Preset::Medium));
        assert_eq!(o.classes, Some(20));
        assert_eq!(o.data, Some(PathBuf::from("/cfg/train.safetensors")));
        assert_eq!(o.workers, Some(vec![0, 4]));
        assert_eq!(o.pin, Some(Switch::Both));
        assert_eq!(o.cpu_cost_us, Some(2.0));
        assert_eq!(o.optimizer, Some(OptimizerKind::AdamW));
        assert_eq!(o.amp, Some(Switch::On));
        let s = o.resolve().unwrap();
        assert_eq!(s.arch.hidden, 64);
        assert_eq!(s.arch.classes, 20);
        assert_eq!(
            s.preset, None,
            "classes changed, so it is no longer the preset"
        );
        assert_eq!(s.pin, vec![false, true]);
        assert_eq!(s.batch_sizes, vec![64, 128]);
        assert!(
            matches!(s.optimizer, Optimizer::AdamW { weight_decay, .. } if weight_decay == 0.01)
        );
    }

    #[test]
    fn flags_win_over_the_file_and_the_file_over_defaults() {
        let file = p("[model]\nhidden = 32\n[training]\nsteps = 7\nlr = 0.1\n").unwrap();
        let flags = Overrides {
            hidden: Some(48),
            ..Overrides::default()
        };
        let s = file.merge(flags).resolve().unwrap();
        assert_eq!(s.arch.hidden, 48, "the flag wins");
        assert_eq!(s.steps, 7, "the file beats the default");
        assert_eq!(s.lr, 0.1);
        assert_eq!(s.warmup_steps, 5, "the default where nobody says");
        assert_eq!(s.arch.depth, 3, "small's depth under a custom width");
    }

    #[test]
    fn defaults_are_the_issue_sweep() {
        let s = Overrides::default().resolve().unwrap();
        assert_eq!(s.preset, Some(Preset::Small));
        assert_eq!(s.batch_sizes.first(), Some(&1));
        assert_eq!(s.batch_sizes.last(), Some(&8192));
        assert_eq!(s.batch_sizes.len(), 14);
        assert_eq!(s.workers, vec![4]);
        assert_eq!(s.amp, vec![false]);
        assert_eq!(s.pin, vec![true]);
    }

    #[test]
    fn unknown_keys_and_sections_are_named() {
        let e = p("[model]\nhiden = 3\n").unwrap_err();
        assert!(
            e.contains("unknown key 'model.hiden'") && e.contains("hidden"),
            "{e}"
        );
        let e = p("[modle]\nhidden = 3\n").unwrap_err();
        assert!(e.contains("unknown section 'modle'"), "{e}");
        let e = p("hidden = 3\n").unwrap_err();
        assert!(e.contains("'hidden'"), "{e}");
    }

    #[test]
    fn wrong_types_and_values_name_the_key() {
        let e = p("[model]\nhidden = \"16\"\n").unwrap_err();
        assert!(
            e.contains("'model.hidden' must be an integer, found a string"),
            "{e}"
        );
        let e = p("[training]\nlr = \"fast\"\n").unwrap_err();
        assert!(e.contains("'training.lr' must be a number"), "{e}");
        let e = p("[training]\nbatch_sizes = [1, \"x\"]\n").unwrap_err();
        assert!(e.contains("'training.batch_sizes[1]'"), "{e}");
        let e = p("[model]\ndepth = 0\n").unwrap_err();
        assert!(e.contains("'model.depth' is 0"), "{e}");
        let e = p("[data]\npin = 3\n").unwrap_err();
        assert!(e.contains("'data.pin'"), "{e}");
        let e = p("[model]\npreset = \"huge\"\n").unwrap_err();
        assert!(e.contains("small, medium or large"), "{e}");
        let e = p("[model\n").unwrap_err();
        assert!(e.contains("not valid TOML"), "{e}");
        let e = p("[training]\noptimizer = \"adam\"\n").unwrap_err();
        assert!(e.contains("training.optimizer"), "{e}");
    }

    #[test]
    fn resolve_refuses_nonsense() {
        let bad = |o: Overrides| o.resolve().unwrap_err();
        assert!(bad(Overrides {
            lr: Some(0.0),
            ..Default::default()
        })
        .contains("learning rate"));
        assert!(bad(Overrides {
            momentum: Some(1.5),
            ..Default::default()
        })
        .contains("momentum"));
        assert!(bad(Overrides {
            optimizer: Some(OptimizerKind::AdamW),
            momentum: Some(0.9),
            ..Default::default()
        })
        .contains("SGD setting"));
        assert!(bad(Overrides {
            labels: Some("l.npy".into()),
            ..Default::default()
        })
        .contains("without a data file"));
    }

    #[test]
    fn batch_size_lists_and_ranges() {
        assert_eq!(parse_batch_sizes("1..8").unwrap(), vec![1, 2, 4, 8]);
        assert_eq!(parse_batch_sizes("3, 5,7").unwrap(), vec![3, 5, 7]);
        assert_eq!(parse_batch_sizes("1K").unwrap(), vec![1024]);
        assert!(parse_batch_sizes("0").is_err());
        assert!(parse_batch_sizes("8..1").unwrap_err().contains("backwards"));
        assert!(parse_batch_sizes("1G").unwrap_err().contains("too large"));
        assert_eq!(parse_workers("0,4").unwrap(), vec![0, 4]);
        assert!(parse_workers("-1").is_err());
        assert!(parse_workers("1000").unwrap_err().contains("too many"));
        assert_eq!(Switch::parse("both").unwrap().values(), vec![false, true]);
        assert!(Switch::parse("maybe").is_err());
    }

    #[test]
    fn a_missing_config_file_says_so() {
        let e = load(Path::new("/nonexistent/tuner.toml")).unwrap_err();
        assert!(
            e.contains("/nonexistent/tuner.toml") && e.contains("cannot read"),
            "{e}"
        );
    }
}

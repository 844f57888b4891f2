//! Writing the finder's answer back: into the team's own config file, a TOML, YAML or JSON of
//! any shape, at the key paths they name (`--key training.batch_size`), every other line,
//! comment and key kept, after copying the file to `FILE.bak`; as Hydra and LightningCLI
//! overrides on those key paths; and into a shared team-settings TOML with one table per GPU
//! model and training model (`[gpus."NVIDIA H100 80GB HBM3".train_resnet]`), so people on
//! different GPUs, tuning different models, share one file; `tuner team FILE` reads it back.
//!
//! Each format has its own editor ([toml] through toml_edit, [json] through serde_json with the
//! file's key order, [yaml] through yaml-edit), and one walk of a key path serves the three
//! ([keys::set]): it sets whole numbers at key paths and refuses, in one line, a path it cannot
//! set without guessing; each editor says what a key holds, adds a mapping, sets a number. A key path is read as the team's framework
//! reads the file (OmegaConf and Hydra over PyYAML, tomllib, json): a number indexes a list
//! (`trainer.callbacks.0.patience`), and a key found through a YAML merge key (`<<: *defaults`)
//! is there, and written into the mapping that merges, whose own keys win over merged ones. A key
//! path that is not in the file is refused in one line naming the nearest that are (a typo
//! would otherwise add a key the program never reads), unless new keys are asked for.

mod json;
mod keys;
mod toml;
mod yaml;

use std::path::{Path, PathBuf};

use serde::Serialize;
use toml_edit::{value, Item};

pub use self::keys::KeyPath;
use self::keys::{not_there, Absent, Edit, Kind, Node};
use self::toml::{parse as parse_doc, set_keeping_comments};
use crate::text::read_text;

/// Where the answer goes: the batch size's key path and, where the file keeps them, the
/// accumulation steps'.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Keys {
    pub batch_size: KeyPath,
    pub accumulation: Option<KeyPath>,
    /// Add a key path the file does not have (else it is refused).
    pub new_keys: bool,
}

impl Keys {
    /// The tuner config's own keys.
    pub fn tuner_config() -> Keys {
        Keys {
            batch_size: KeyPath::parse("training.batch_size").expect("a key path"),
            accumulation: Some(KeyPath::parse("training.accumulation_steps").expect("a key path")),
            new_keys: true,
        }
    }

    /// The edits that write `batch` and `accumulation`: accumulation steps go in where the
    /// answer uses them or the file already has the key.
    fn edits(&self, batch: usize, accumulation: usize) -> Vec<Edit<'_>> {
        let absent = match self.new_keys {
            true => Absent::Add,
            false => Absent::Refuse,
        };
        // Where the answer does not accumulate, only where the file has the key.
        let skip = match accumulation {
            1 => Absent::Skip,
            _ => absent,
        };
        let (key, value) = (&self.batch_size, batch);
        let steps = (self.accumulation.iter()).map(|key| Edit {
            key,
            value: accumulation,
            absent: skip,
        });
        std::iter::once(Edit { key, value, absent })
            .chain(steps)
            .collect()
    }
}

/// A file's new text and each key path set in it with its value, in order.
type Edited = (String, Vec<(String, usize)>);

/// A format's editor of one key path ([Format::edit]).
type Editor = fn(&str, &Edit) -> Result<Option<String>, String>;

/// The formats the answer can be written into, by the file's extension.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Toml,
    Yaml,
    Json,
}

impl Format {
    pub fn of(path: &Path) -> Result<Format, String> {
        let ext = path
            .extension()
            .and_then(|e| e.to_str())
            .map(str::to_ascii_lowercase);
        match ext.as_deref() {
            Some("toml") => Ok(Format::Toml),
            Some("yaml" | "yml") => Ok(Format::Yaml),
            Some("json") => Ok(Format::Json),
            _ => Err(format!(
                "{}: the answer is written into a .toml, .yaml, .yml or .json file",
                path.display()
            )),
        }
    }

    /// The text with `edits` made, and each key path set and its value, in order.
    fn edit(self, text: &str, edits: &[Edit]) -> Result<Edited, String> {
        // The file as plain values, as the framework reads it; the text with one edit made,
        // None where its key is missing and only to be set where present.
        let (tree, edit): (fn(&str) -> _, Editor) = match self {
            Format::Toml => (toml::tree, toml::edit),
            Format::Yaml => (yaml::tree, yaml::edit),
            Format::Json => (json::tree, json::edit),
        };
        let refused = || edits.iter().filter(|e| e.absent == Absent::Refuse);
        if refused().next().is_some() {
            let tree = tree(text)?;
            if let Some(e) = refused().find(|e| e.key.get(&tree).is_none()) {
                return Err(not_there(e.key, &tree));
            }
        }
        let (mut text, mut written) = (text.to_string(), Vec::new());
        for e in edits {
            if let Some(edited) = edit(&text, e)? {
                text = edited;
                written.push((e.key.to_string(), e.value));
            }
        }
        Ok((text, written))
    }
}

/// The config `path`'s text with the answer at `keys`, and what was set.
fn edited(path: &Path, keys: &Keys, text: &str, b: usize, a: usize) -> Result<Edited, String> {
    (Format::of(path)?.edit(text, &keys.edits(b, a)))
        .map_err(|e| format!("{}: {e}", path.display()))
}

/// Fail early (before any GPU time is spent) when the answer cannot be written: a file that
/// cannot be read, parsed or written, a key path that cannot be set.
pub fn check_writable(path: &Path, keys: &Keys) -> Result<(), String> {
    let text = read_text(path, "the config")?;
    if std::fs::metadata(path).is_ok_and(|m| m.permissions().readonly()) {
        return Err(format!(
            "{}: the config is read-only; make it writable or leave out --write",
            path.display()
        ));
    }
    if let Err(e) = std::fs::OpenOptions::new().append(true).open(path) {
        let path = path.display();
        return Err(format!(
            "{path}: cannot write the config ({e}); leave out --write"
        ));
    }
    // Every key the answer may set, set in a copy.
    edited(path, keys, &text, 1, 2).map(|_| ())
}

/// What `--write` did.
#[derive(Debug, Clone, Serialize)]
pub struct Written {
    /// Each key path set and its value, in order.
    pub values: Vec<(String, usize)>,
    #[serde(serialize_with = "common::files::serialize_recorded")]
    pub backup: Option<PathBuf>,
}

/// Save `FILE.bak`, then rewrite the file with the answer in it.
pub fn write_config(
    path: &Path,
    keys: &Keys,
    batch: usize,
    accumulation: usize,
) -> Result<Written, String> {
    let text = read_text(path, "the config")?;
    let (edited, values) = edited(path, keys, &text, batch, accumulation)?;
    let mut backup = path.as_os_str().to_owned();
    backup.push(".bak");
    let backup = PathBuf::from(backup);
    common::files::write_atomically(&backup, text.as_bytes())
        .map_err(|e| format!("{}: cannot save the backup: {e}", backup.display()))?;
    common::files::write_atomically(path, edited.as_bytes())
        .map_err(|e| format!("{}: cannot write the config: {e}", path.display()))?;
    Ok(Written {
        values,
        backup: Some(backup),
    })
}

/// The answer as command-line overrides on the same key paths.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Overrides {
    /// `training.batch_size=744 training.accumulation_steps=1`
    pub hydra: String,
    /// `--training.batch_size=744 --training.accumulation_steps=1`
    pub lightning: String,
}

pub fn overrides(keys: &Keys, batch: usize, accumulation: usize) -> Overrides {
    // Every key the answer names, whether or not a file would have it.
    let edits = keys.edits(batch, accumulation);
    let join = |dashes: &str| {
        edits
            .iter()
            .map(|e| format!("{dashes}{}={}", e.key, e.value))
            .collect::<Vec<_>>()
            .join(" ")
    };
    Overrides {
        hydra: join(""),
        lightning: join("--"),
    }
}

/// The model a command trains, for the team file: the script it runs (its file's stem), the
/// module after `-m`, else the program's own name.
pub fn model_name(argv: &[String]) -> String {
    let stem = |a: &str| {
        Path::new(a)
            .file_stem()
            .map_or_else(|| a.to_string(), |s| s.to_string_lossy().into_owned())
    };
    let script = argv.iter().find(|a| a.ends_with(".py")).map(|s| stem(s));
    let module = argv.iter().position(|a| a == "-m");
    let module = module.and_then(|i| argv.get(i + 1)).cloned();
    // `env VAR=VALUE ... PROGRAM`: the program.
    let program = argv.iter().find(|a| !a.contains('=') && stem(a) != "env");
    let program = program.or(argv.first()).map(|a| stem(a));
    script.or(module).or(program).unwrap_or_default()
}

/// One entry of the team file: what one model trains with on one GPU model.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct TeamEntry {
    pub gpu: String,
    /// The training model: `--model-name`, else the script's name ([model_name]); entries
    /// written before that hold the whole command.
    pub model: String,
    pub batch_size: usize,
    pub accumulation_steps: usize,
    pub precision: String,
}

/// The team file's text with the table `[gpus."GPU"."MODEL"]` added or updated; every other
/// entry and every comment kept.
pub fn update_team_text(text: &str, e: &TeamEntry) -> Result<String, String> {
    let mut doc = parse_doc(text)?;
    // A file that is only comments keeps them at the top, not after the new table.
    let mut leading = String::new();
    if doc.as_table().is_empty() {
        leading = doc.trailing().as_str().unwrap_or("").to_string();
        doc.set_trailing("");
    }
    // Each table on the way, added where missing as a key path's walk adds it (`gpus` and the
    // GPU's shown only through their own tables).
    let (mut entry, mut at) = (doc.as_item_mut(), String::new());
    for (i, seg) in ["gpus", &e.gpu, &e.model].into_iter().enumerate() {
        at = if i == 0 {
            seg.into()
        } else {
            format!("{at}.\"{seg}\"")
        };
        if !matches!(entry.look(seg, &at, false)?, None | Some(Kind::Map)) {
            return Err(format!("'{at}' is not a table"));
        }
        entry = entry.descend(seg, &at, i < 2)?;
    }
    let entry = entry.as_table_like_mut().expect("looked up as a table");
    set_keeping_comments(entry, "batch_size", e.batch_size as i64);
    set_keeping_comments(entry, "accumulation_steps", e.accumulation_steps as i64);
    entry.insert("precision", value(e.precision.clone()));
    Ok(format!("{leading}{doc}"))
}

/// Add or update an entry in the team file (created when missing).
pub fn write_team(path: &Path, e: &TeamEntry) -> Result<(), String> {
    let text = match path.try_exists() {
        Ok(false) => String::new(),
        _ => read_text(path, "the team file")?,
    };
    let updated = update_team_text(&text, e).map_err(|err| format!("{}: {err}", path.display()))?;
    common::files::write_atomically(path, updated.as_bytes())
        .map_err(|err| format!("{}: cannot write the team file: {err}", path.display()))
}

/// Every entry of a team file's text, in the file's order. An entry written before entries
/// were keyed by model (`[gpus."NAME"]` with the values directly) reads with an empty model.
pub fn read_team_text(text: &str) -> Result<Vec<TeamEntry>, String> {
    let doc = parse_doc(text)?;
    let Some(gpus) = doc.get("gpus") else {
        return Ok(Vec::new());
    };
    let gpus = gpus.as_table_like().ok_or("'gpus' is not a table")?;
    let mut out = Vec::new();
    for (gpu, item) in gpus.iter() {
        let at = format!("gpus.\"{gpu}\"");
        let table = item
            .as_table_like()
            .ok_or_else(|| format!("'{at}' is not a table"))?;
        // The older shape's values in the GPU's own table, then one table per model.
        let old = table.contains_key("batch_size").then_some(("", table));
        let models = table
            .iter()
            .filter_map(|(m, item)| Some((m, item.as_table_like()?)));
        for (model, t) in old.into_iter().chain(models) {
            let at = match model {
                "" => at.clone(),
                model => format!("{at}.\"{model}\""),
            };
            let count = |key: &str| -> Result<usize, String> {
                t.get(key)
                    .and_then(Item::as_integer)
                    .filter(|v| *v >= 1)
                    .map(|v| v as usize)
                    .ok_or_else(|| format!("'{at}.{key}' must be a whole number of 1 or more"))
            };
            out.push(TeamEntry {
                gpu: gpu.to_string(),
                model: model.to_string(),
                batch_size: count("batch_size")?,
                accumulation_steps: count("accumulation_steps")?,
                precision: t
                    .get("precision")
                    .and_then(Item::as_str)
                    .unwrap_or("-")
                    .to_string(),
            });
        }
    }
    Ok(out)
}

/// `tuner team FILE`: every entry as a table.
pub fn team_table(entries: &[TeamEntry]) -> common::table::Table {
    common::table::Columns::<TeamEntry>::new()
        .left("GPU", |e| e.gpu.clone())
        .left("model", |e| match e.model.as_str() {
            "" => "(not recorded)".into(),
            model => format!("`{model}`"),
        })
        .right("batch size", |e| e.batch_size.to_string())
        .right("accumulation", |e| e.accumulation_steps.to_string())
        .right("effective batch", |e| {
            (e.batch_size * e.accumulation_steps).to_string()
        })
        .left("precision", |e| e.precision.clone())
        .table(entries)
}

/// Every entry of a team file.
pub fn read_team(path: &Path) -> Result<Vec<TeamEntry>, String> {
    let text = read_text(path, "the team file")?;
    read_team_text(&text).map_err(|e| format!("{}: {e}", path.display()))
}

/// Read a team file and render its table.
pub fn show_team(path: &Path) -> Result<String, String> {
    let entries = read_team(path)?;
    let path = path.display();
    Ok(match entries.is_empty() {
        true => format!("{path}: no entries yet (`tuner autobatch --team {path}` adds one)\n"),
        false => format!(
            "## team settings: {path}\n\n{}",
            team_table(&entries).markdown()
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each `(key path, value)` set in `text` as `format` has it: the editors' tests.
    pub(super) fn edit_pairs(
        format: Format,
        text: &str,
        pairs: &[(&str, usize)],
    ) -> Result<String, String> {
        let keys: Vec<KeyPath> = pairs
            .iter()
            .map(|(k, _)| KeyPath::parse(k).unwrap())
            .collect();
        let edits: Vec<Edit> = keys
            .iter()
            .zip(pairs)
            .map(|(key, (_, value))| Edit {
                key,
                value: *value,
                absent: Absent::Add,
            })
            .collect();
        format.edit(text, &edits).map(|e| e.0)
    }

    const CONFIG: &str = r#"# our training run
[model]
preset = "large" # the big one

[training]
# tuned by hand last week
batch_size = 64
lr = 0.05
my_own_key = "kept"
"#;

    fn tuner_config_text(text: &str, batch: usize, accumulation: usize) -> Result<String, String> {
        Format::Toml
            .edit(text, &Keys::tuner_config().edits(batch, accumulation))
            .map(|e| e.0)
    }

    #[test]
    fn write_back_keeps_comments_and_other_keys() {
        let out = tuner_config_text(CONFIG, 4096, 2).unwrap();
        assert!(out.contains("# our training run"));
        assert!(out.contains("preset = \"large\" # the big one"));
        assert!(out.contains("# tuned by hand last week"));
        assert!(out.contains("batch_size = 4096"));
        assert!(out.contains("accumulation_steps = 2"));
        assert!(out.contains("my_own_key = \"kept\""));
        assert!(out.contains("lr = 0.05"));
        // The tool's own parser still reads the result, the team's own keys left alone.
        let o = crate::config::parse(&out, Default::default()).unwrap();
        assert_eq!(o.batch_size, Some(4096));
        assert_eq!(o.accumulation_steps, Some(2));
    }

    #[test]
    fn accumulation_goes_in_where_it_is_used_or_already_there() {
        let out = tuner_config_text("[model]\nhidden = 8\n", 128, 1).unwrap();
        assert_eq!(out, "[model]\nhidden = 8\n\n[training]\nbatch_size = 128\n");
        let out = tuner_config_text(&out, 64, 2).unwrap();
        assert!(
            out.ends_with("batch_size = 64\naccumulation_steps = 2\n"),
            "{out}"
        );
        let out = tuner_config_text(&out, 128, 1).unwrap();
        assert!(
            out.ends_with("batch_size = 128\naccumulation_steps = 1\n"),
            "{out}"
        );
        assert!(tuner_config_text("[model\n", 1, 1)
            .unwrap_err()
            .contains("not valid TOML"));
    }

    #[test]
    fn formats_by_extension_and_key_paths_by_their_text() {
        let format = |p: &str| Format::of(Path::new(p));
        assert_eq!(format("conf/train.YAML"), Ok(Format::Yaml));
        assert_eq!(format("a.yml"), Ok(Format::Yaml));
        assert_eq!(format("a.json"), Ok(Format::Json));
        assert_eq!(format("a.toml"), Ok(Format::Toml));
        for bad in ["a.ini", "config", "a.yaml.bak"] {
            assert!(format(bad)
                .unwrap_err()
                .contains(".toml, .yaml, .yml or .json"));
        }
        assert_eq!(
            KeyPath::parse("data.batch_size").unwrap().to_string(),
            "data.batch_size"
        );
        for bad in ["", "a..b", ".a", "a.", "a. b"] {
            assert!(
                KeyPath::parse(bad).unwrap_err().contains("not a key path"),
                "{bad}"
            );
        }
    }

    #[test]
    fn overrides_use_the_key_paths() {
        let o = overrides(&Keys::tuner_config(), 744, 1);
        assert_eq!(
            o.hydra,
            "training.batch_size=744 training.accumulation_steps=1"
        );
        assert_eq!(
            o.lightning,
            "--training.batch_size=744 --training.accumulation_steps=1"
        );
        let keys = Keys {
            batch_size: KeyPath::parse("data.batch_size").unwrap(),
            accumulation: None,
            new_keys: false,
        };
        assert_eq!(overrides(&keys, 32, 1).lightning, "--data.batch_size=32");
    }

    #[test]
    fn a_key_path_not_in_the_file_is_refused_unless_new_keys_are_asked_for() {
        let keys = |batch: &str, accumulation: &str, new_keys| Keys {
            batch_size: KeyPath::parse(batch).unwrap(),
            accumulation: Some(KeyPath::parse(accumulation).unwrap()),
            new_keys,
        };
        let yaml = "data:\n  loader:\n    batch_size: 64\n    workers: 8\ntrainer:\n  accumulate_grad_batches: 1\n";
        let toml =
            "[data.loader]\nbatch_size = 64\nworkers = 8\n[trainer]\naccumulate_grad_batches = 1\n";
        let json = "{\"data\": {\"loader\": {\"batch_size\": 64, \"workers\": 8}}, \"trainer\": {\"accumulate_grad_batches\": 1}}";
        for (format, text) in [
            (Format::Yaml, yaml),
            (Format::Toml, toml),
            (Format::Json, json),
        ] {
            let edit =
                |k: &Keys, accumulation| format.edit(text, &k.edits(96, accumulation)).map(|e| e.1);
            let typo = keys(
                "data.loader.batchsize",
                "trainer.accumulate_grad_batches",
                false,
            );
            let e = edit(&typo, 1).unwrap_err();
            assert_eq!(
                e,
                "'data.loader.batchsize' is not in the file (the nearest there: data.loader.batch_size, data.loader.workers, trainer.accumulate_grad_batches); --new-key adds it as a new key",
                "{format:?}"
            );
            let asked = Keys {
                new_keys: true,
                ..typo
            };
            let written = edit(&asked, 1).unwrap();
            assert_eq!(written[0], ("data.loader.batchsize".to_string(), 96));
            // An accumulation key that is not there: left out when the answer does not
            // accumulate, refused when it does.
            let right = keys("data.loader.batch_size", "trainer.accumulate", false);
            assert_eq!(edit(&right, 1).unwrap().len(), 1, "{format:?}");
            let e = edit(&right, 2).unwrap_err();
            assert!(e.starts_with("'trainer.accumulate' is not in the file (the nearest there: trainer.accumulate_grad_batches"), "{e}");
            let both = keys(
                "data.loader.batch_size",
                "trainer.accumulate_grad_batches",
                false,
            );
            assert_eq!(edit(&both, 2).unwrap().len(), 2);
        }
    }

    #[test]
    fn the_model_is_named_by_its_script() {
        let name = |line: &str| model_name(&line.split(' ').map(String::from).collect::<Vec<_>>());
        assert_eq!(
            name("python3 examples/pytorch/train_resnet.py --batch-size {batch_size}"),
            "train_resnet"
        );
        assert_eq!(name("env A=1 python3 /x/fake_trainer.py"), "fake_trainer");
        assert_eq!(name("torchrun --nproc-per-node 2 train.py"), "train");
        assert_eq!(name("python -m mypkg.train --lr 0.1"), "mypkg.train");
        assert_eq!(
            name("target/release/mlp-train --preset medium"),
            "mlp-train"
        );
        assert_eq!(name("env CUDA_LAUNCH_BLOCKING=1 ./train"), "train");
    }

    #[test]
    fn read_only_missing_and_unwritable_configs_are_refused() {
        // The backup and the rewritten config: tests/write_config.rs, through `--write`.
        let dir = std::env::temp_dir().join(format!("tuner-wb-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let cfg = dir.join("run.toml");
        std::fs::write(&cfg, CONFIG).unwrap();
        let keys = Keys::tuner_config();
        check_writable(&cfg, &keys).unwrap();
        let mut perms = std::fs::metadata(&cfg).unwrap().permissions();
        perms.set_readonly(true);
        std::fs::set_permissions(&cfg, perms).unwrap();
        let e = check_writable(&cfg, &keys).unwrap_err();
        assert!(e.contains("read-only") || e.contains("cannot write"), "{e}");
        let e = check_writable(&dir.join("missing.toml"), &keys).unwrap_err();
        assert!(e.contains("cannot read"), "{e}");
        let through = dir.join("through.toml");
        std::fs::write(&through, "training = 3\n").unwrap();
        let e = check_writable(&through, &keys).unwrap_err();
        assert!(e.contains("through.toml: 'training' is a scalar"), "{e}");
        assert_eq!(std::fs::read_to_string(&through).unwrap(), "training = 3\n");
        let _ = std::fs::remove_dir_all(dir);
    }

    fn entry(gpu: &str, model: &str, batch_size: usize) -> TeamEntry {
        TeamEntry {
            gpu: gpu.into(),
            model: model.into(),
            batch_size,
            accumulation_steps: 1,
            precision: "bf16".into(),
        }
    }

    #[test]
    fn team_file_keys_entries_by_gpu_and_model() {
        let resnet = "python3 train_resnet.py --batch-size {batch_size}";
        let mlp = "small preset, MLP 256 -> 3 x 16 -> 10, sgd";
        let h100 = "NVIDIA H100 80GB HBM3";
        let start = "# shared by the team\n";
        let one = update_team_text(start, &entry(h100, resnet, 2048)).unwrap();
        let two = update_team_text(&one, &entry("NVIDIA H200", resnet, 4096)).unwrap();
        // A second model on the same GPU type does not overwrite the first.
        let three = update_team_text(&two, &entry(h100, mlp, 8192)).unwrap();
        let resnet_3000 = TeamEntry {
            accumulation_steps: 2,
            ..entry(h100, resnet, 3000)
        };
        let updated = update_team_text(&three, &resnet_3000).unwrap();
        assert!(updated.starts_with("# shared by the team"));
        let doc: toml_edit::DocumentMut = updated.parse().unwrap();
        let h100s = &doc["gpus"][h100];
        assert_eq!(h100s[resnet]["batch_size"].as_integer(), Some(3000));
        assert_eq!(h100s[mlp]["batch_size"].as_integer(), Some(8192));
        let precision = doc["gpus"]["NVIDIA H200"][resnet]["precision"].as_str();
        assert_eq!(precision, Some("bf16"));
        assert_eq!(
            updated.matches("[gpus.\"NVIDIA H100 80GB HBM3\".").count(),
            2
        );
        let entries = read_team_text(&updated).unwrap();
        assert_eq!(entries.len(), 3);
        assert_eq!(entries[0], resnet_3000);
        let table = common::table::unpadded(&team_table(&entries).markdown());
        let row = "| NVIDIA H100 80GB HBM3 | `python3 train_resnet.py --batch-size {batch_size}` | 3000 | 2 | 6000 | bf16 |";
        assert!(table.contains(row), "{table}");
        assert!(table.contains("| NVIDIA H200 |"), "{table}");
    }

    #[test]
    fn team_files_of_the_older_shape_and_bad_ones_read_with_a_reason() {
        let old = "[gpus.\"NVIDIA H200\"]\nbatch_size = 4096\naccumulation_steps = 1\nprecision = \"bf16\"\n";
        let entries = read_team_text(old).unwrap();
        assert_eq!(entries, vec![entry("NVIDIA H200", "", 4096)]);
        assert!(team_table(&entries).markdown().contains("(not recorded)"));
        assert!(read_team_text("").unwrap().is_empty());
        let e =
            read_team_text("[gpus.\"A\".\"m\"]\nbatch_size = \"big\"\naccumulation_steps = 1\n")
                .unwrap_err();
        assert!(e.contains("'gpus.\"A\".\"m\".batch_size'"), "{e}");
        assert!(read_team_text("gpus = 3\n")
            .unwrap_err()
            .contains("not a table"));
        // A file whose tables on the way hold something else is not written over.
        let h200 = entry("NVIDIA H200", "m", 8);
        for (text, at) in [
            ("gpus = 3\n", "'gpus'"),
            ("gpus = [[1]]\n", "'gpus'"),
            ("[gpus]\n\"NVIDIA H200\" = 1\n", "'gpus.\"NVIDIA H200\"'"),
            (
                "[gpus.\"NVIDIA H200\"]\nm = [1]\n",
                "'gpus.\"NVIDIA H200\".\"m\"'",
            ),
        ] {
            let e = update_team_text(text, &h200).unwrap_err();
            assert_eq!(e, format!("{at} is not a table"), "{text}");
        }
        assert!(show_team(Path::new("/nonexistent/team.toml"))
            .unwrap_err()
            .contains("cannot read the team file"));
    }
}

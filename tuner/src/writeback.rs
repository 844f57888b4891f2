//! Writing the finder's answer back: into the TOML config (`[training] batch_size` and
//! `accumulation_steps`, every other key and comment kept, through toml_edit) after copying the
//! file to `FILE.bak`; and into a shared team-settings TOML with one table per GPU model and
//! training model (`[gpus."NVIDIA H100 80GB HBM3"."python3 train.py ..."]`), so people on
//! different GPUs, tuning different models, share one file; `tuner team FILE` reads it back.

use std::path::{Path, PathBuf};

use toml_edit::{value, DocumentMut, Item, Table};

/// The config's text with `[training] batch_size` and `accumulation_steps` set.
pub fn update_config_text(text: &str, batch: usize, accumulation: usize) -> Result<String, String> {
    let mut doc = parse_doc(text)?;
    let training = doc
        .entry("training")
        .or_insert(Item::Table(Table::new()))
        .as_table_like_mut()
        .ok_or("'training' is not a table")?;
    set_keeping_comments(training, "batch_size", batch as i64);
    set_keeping_comments(training, "accumulation_steps", accumulation as i64);
    Ok(doc.to_string())
}

/// Set `key = v`; an existing key keeps its comments (the one above it and the one after it).
fn set_keeping_comments(table: &mut dyn toml_edit::TableLike, key: &str, v: i64) {
    match table.get_mut(key).and_then(|i| i.as_value_mut()) {
        Some(old) => {
            let decor = old.decor().clone();
            *old = toml_edit::Value::from(v);
            *old.decor_mut() = decor;
        }
        None => {
            table.insert(key, value(v));
        }
    }
}

/// Fail early (before any GPU time is spent) when the config cannot be rewritten.
pub fn check_writable(path: &Path) -> Result<(), String> {
    let meta = std::fs::metadata(path)
        .map_err(|e| format!("{}: cannot read the config: {e}", path.display()))?;
    if meta.permissions().readonly() {
        return Err(format!(
            "{}: the config is read-only; make it writable or leave out --write",
            path.display()
        ));
    }
    std::fs::OpenOptions::new()
        .append(true)
        .open(path)
        .map(|_| ())
        .map_err(|e| {
            format!(
                "{}: cannot write the config ({e}); leave out --write",
                path.display()
            )
        })
}

/// Save `FILE.bak`, then rewrite the config. Returns the backup's path.
pub fn write_config(path: &Path, batch: usize, accumulation: usize) -> Result<PathBuf, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("{}: cannot read the config: {e}", path.display()))?;
    let updated = update_config_text(&text, batch, accumulation)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    let mut backup = path.as_os_str().to_owned();
    backup.push(".bak");
    let backup = PathBuf::from(backup);
    std::fs::write(&backup, &text)
        .map_err(|e| format!("{}: cannot save the backup: {e}", backup.display()))?;
    common::files::write_atomically(path, updated.as_bytes())
        .map_err(|e| format!("{}: cannot write the config: {e}", path.display()))?;
    Ok(backup)
}

/// One entry of the team file: what one model trains with on one GPU model.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct TeamEntry {
    pub gpu: String,
    /// The training model: `--model-name`, else the command (placeholders as given).
    pub model: String,
    pub batch_size: usize,
    pub accumulation_steps: usize,
    pub precision: String,
}

fn parse_doc(text: &str) -> Result<DocumentMut, String> {
    text.parse()
        .map_err(|err: toml_edit::TomlError| format!("not valid TOML: {}", err.to_string().trim()))
}

/// The table `key` of `parent`, added (implicit: shown only through its own tables) when missing;
/// None when `key` holds something else.
fn table<'a>(
    parent: &'a mut dyn toml_edit::TableLike,
    key: &str,
    implicit: bool,
) -> Option<&'a mut dyn toml_edit::TableLike> {
    let mut t = Table::new();
    t.set_implicit(implicit);
    parent
        .entry(key)
        .or_insert(Item::Table(t))
        .as_table_like_mut()
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
    let gpus = table(doc.as_table_mut(), "gpus", true).ok_or("'gpus' is not a table")?;
    let gpu =
        table(gpus, &e.gpu, true).ok_or_else(|| format!("'gpus.\"{}\"' is not a table", e.gpu))?;
    let entry = table(gpu, &e.model, false)
        .ok_or_else(|| format!("'gpus.\"{}\".\"{}\"' is not a table", e.gpu, e.model))?;
    set_keeping_comments(entry, "batch_size", e.batch_size as i64);
    set_keeping_comments(entry, "accumulation_steps", e.accumulation_steps as i64);
    entry.insert("precision", value(e.precision.clone()));
    Ok(format!("{leading}{doc}"))
}

/// Add or update an entry in the team file (created when missing).
pub fn write_team(path: &Path, e: &TeamEntry) -> Result<(), String> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(err) => {
            return Err(format!(
                "{}: cannot read the team file: {err}",
                path.display()
            ))
        }
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
        let table = item
            .as_table_like()
            .ok_or_else(|| format!("'gpus.\"{gpu}\"' is not a table"))?;
        let read = |model: &str, t: &dyn toml_edit::TableLike| -> Result<TeamEntry, String> {
            let where_ = if model.is_empty() {
                format!("gpus.\"{gpu}\"")
            } else {
                format!("gpus.\"{gpu}\".\"{model}\"")
            };
            let count = |key: &str| -> Result<usize, String> {
                t.get(key)
                    .and_then(Item::as_integer)
                    .filter(|v| *v >= 1)
                    .map(|v| v as usize)
                    .ok_or_else(|| format!("'{where_}.{key}' must be a whole number of 1 or more"))
            };
            Ok(TeamEntry {
                gpu: gpu.to_string(),
                model: model.to_string(),
                batch_size: count("batch_size")?,
                accumulation_steps: count("accumulation_steps")?,
                precision: t
                    .get("precision")
                    .and_then(Item::as_str)
                    .unwrap_or("-")
                    .to_string(),
            })
        };
        if table.contains_key("batch_size") {
            out.push(read("", table)?);
        }
        for (model, item) in table.iter() {
            if let Some(t) = item.as_table_like() {
                out.push(read(model, t)?);
            }
        }
    }
    Ok(out)
}

/// `tuner team FILE`: every entry as a table.
pub fn team_table(entries: &[TeamEntry]) -> common::table::Table {
    let mut t = common::table::Table::new()
        .left("GPU")
        .left("model")
        .right("batch size")
        .right("accumulation")
        .right("effective batch")
        .left("precision");
    for e in entries {
        t.row(vec![
            e.gpu.clone(),
            if e.model.is_empty() {
                "(not recorded)".into()
            } else {
                format!("`{}`", e.model)
            },
            e.batch_size.to_string(),
            e.accumulation_steps.to_string(),
            (e.batch_size * e.accumulation_steps).to_string(),
            e.precision.clone(),
        ]);
    }
    t
}

/// Read a team file and render its table.
pub fn show_team(path: &Path) -> Result<String, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("{}: cannot read the team file: {e}", path.display()))?;
    let entries = read_team_text(&text).map_err(|e| format!("{}: {e}", path.display()))?;
    if entries.is_empty() {
        return Ok(format!(
            "{}: no entries yet (`tuner autobatch --team {}` adds one)\n",
            path.display(),
            path.display()
        ));
    }
    Ok(format!(
        "## team settings: {}\n\n{}",
        path.display(),
        team_table(&entries).markdown()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    const CONFIG: &str = r#"# our training run
[model]
preset = "large" # the big one

[training]
# tuned by hand last week
batch_size = 64
lr = 0.05
my_own_key = "kept"
"#;

    #[test]
    fn write_back_keeps_comments_and_other_keys() {
        let out = update_config_text(CONFIG, 4096, 2).unwrap();
        assert!(out.contains("# our training run"));
        assert!(out.contains("preset = \"large\" # the big one"));
        assert!(out.contains("# tuned by hand last week"));
        assert!(out.contains("batch_size = 4096"));
        assert!(out.contains("accumulation_steps = 2"));
        assert!(out.contains("my_own_key = \"kept\""));
        assert!(out.contains("lr = 0.05"));
        // The tool's own parser still reads the result, the team's own keys left alone.
        let o = crate::config::parse(&out).unwrap();
        assert_eq!(o.batch_size, Some(4096));
        assert_eq!(o.accumulation_steps, Some(2));
    }

    #[test]
    fn write_back_adds_a_training_section_when_missing() {
        let out = update_config_text("[model]\nhidden = 8\n", 128, 1).unwrap();
        assert!(out.contains("[training]") && out.contains("batch_size = 128"));
        assert!(update_config_text("[model\n", 1, 1)
            .unwrap_err()
            .contains("not valid TOML"));
    }

    #[test]
    fn read_only_and_missing_configs_are_refused() {
        // The backup and the rewritten config: tests/program_cli.rs, through `--write`.
        let dir = std::env::temp_dir().join(format!("tuner-wb-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let cfg = dir.join("run.toml");
        std::fs::write(&cfg, CONFIG).unwrap();
        check_writable(&cfg).unwrap();
        let mut perms = std::fs::metadata(&cfg).unwrap().permissions();
        perms.set_readonly(true);
        std::fs::set_permissions(&cfg, perms).unwrap();
        let e = check_writable(&cfg).unwrap_err();
        assert!(e.contains("read-only") || e.contains("cannot write"), "{e}");
        let e = check_writable(&dir.join("missing.toml")).unwrap_err();
        assert!(e.contains("cannot read"), "{e}");
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
        let doc: DocumentMut = updated.parse().unwrap();
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
        assert!(show_team(Path::new("/nonexistent/team.toml"))
            .unwrap_err()
            .contains("cannot read the team file"));
    }
}

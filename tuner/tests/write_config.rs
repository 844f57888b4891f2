//! `tuner autobatch --write FILE --key DOTTED.PATH` on the team's own config files, end to end
//! against the fake training program: a Hydra-style YAML, a TOML with comments and nested
//! tables, a JSON; the answer as Hydra and LightningCLI overrides; the team file keyed by the
//! script's name beside entries of the older shapes; a key path that is not in the file (a typo)
//! refused naming the nearest ones, unless `--new-key`; keys in lists and through YAML merge
//! keys; and every file that cannot take the answer refused in one line before any trial, left
//! as it was.

mod fake;

use std::path::Path;

use fake::{listing, places, run, tuner, Out};
use serde_json::Value;

/// A GPU of 79 GB where a batch takes 600 MB + 40 MB per sample: the finder's maximum is 1960,
/// the batch the rule recommends 1856, and an effective batch of 4096 splits into 4 x 1024.
const MEMORY: (&str, &str) = ("FAKE_MEMORY", "600000000,40000000,79000000000");
const GPU: (&str, &str) = ("FAKE_GPU_NAME", "Fake H100");

fn autobatch(args: &[&str], work: &Path, tmp: &Path) -> Out {
    let mut all = vec!["autobatch", "--workers", "0", "--json", "out.json"];
    all.extend(args);
    let o = tuner(&all, &[MEMORY, GPU], "0", work, tmp);
    assert_eq!(o.code, 0, "{}\n{}", o.stdout, o.stderr);
    o
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn report(work: &Path) -> Value {
    serde_json::from_str(&read(&work.join("out.json"))).unwrap()
}

fn says(o: &Out, line: &str) {
    assert!(o.stdout.contains(line), "{line}\n{}", o.stdout);
}

const HYDRA: &str = "\
# @package _global_
defaults:
  - model: resnet18
  - _self_

training:
  # tuned by hand
  batch_size: 64    # per GPU
  optimizer:
    name: sgd
    lr: 0.1 # linear rule
  schedule: 'cosine'

data:
  workers: 8
";

#[test]
fn a_hydra_style_yaml_takes_the_answer_and_keeps_every_other_line() {
    let (_s, work, tmp) = places("yaml");
    std::fs::create_dir_all(work.join("conf")).unwrap();
    std::fs::write(work.join("conf/train.yaml"), HYDRA).unwrap();
    let o = autobatch(
        &[
            "--effective-batch",
            "4096",
            "--write",
            "conf/train.yaml",
            "--key",
            "training.batch_size",
            "--accumulation-key",
            "training.accumulation",
            "--new-key",
        ],
        &work,
        &tmp,
    );
    let want = HYDRA
        .replace(
            "batch_size: 64    # per GPU",
            "batch_size: 1024    # per GPU",
        )
        .replace(
            "  schedule: 'cosine'\n",
            "  schedule: 'cosine'\n  accumulation: 4\n",
        );
    assert_eq!(read(&work.join("conf/train.yaml")), want);
    assert_eq!(read(&work.join("conf/train.yaml.bak")), HYDRA);
    says(&o, "wrote training.batch_size = 1024 and training.accumulation = 4 into conf/train.yaml (backup conf/train.yaml.bak)");
    says(
        &o,
        "Hydra: training.batch_size=1024 training.accumulation=4\n",
    );
    says(
        &o,
        "LightningCLI: --training.batch_size=1024 --training.accumulation=4\n",
    );
    let r = report(&work);
    assert_eq!(r["keys"]["batch_size"], "training.batch_size");
    assert_eq!(
        r["written"]["values"],
        serde_json::json!([["training.batch_size", 1024], ["training.accumulation", 4]])
    );
    assert_eq!(
        r["overrides"]["hydra"],
        "training.batch_size=1024 training.accumulation=4"
    );
}

const TEAM_RUN: &str = r#"# the team's run
[model]
name = "resnet18" # torchvision

[trainer.data]
# set by the tuner
batch_size = 32 # per device
accumulation_steps = 2

[[trainer.callbacks]]
name = "ckpt"
"#;

/// A team file with an entry of each older shape: no model at all, and the whole command.
const OLD_TEAM: &str = "# shared by the team\n[gpus.\"NVIDIA H200\"]\nbatch_size = 4096\naccumulation_steps = 1\nprecision = \"bf16\"\n\n[gpus.\"Fake H100\".\"python3 train.py --batch-size {batch_size}\"]\nbatch_size = 512\naccumulation_steps = 2\nprecision = \"fp32\"\n";

#[test]
fn a_toml_with_nested_tables_takes_the_answer_and_the_team_file_the_script_s_name() {
    let (_s, work, tmp) = places("toml");
    std::fs::write(work.join("team-run.toml"), TEAM_RUN).unwrap();
    std::fs::write(work.join("team.toml"), OLD_TEAM).unwrap();
    let o = autobatch(
        &[
            "--write",
            "team-run.toml",
            "--key",
            "trainer.data.batch_size",
            "--accumulation-key",
            "trainer.data.accumulation_steps",
            "--team",
            "team.toml",
        ],
        &work,
        &tmp,
    );
    // No effective batch to keep: the recommended batch, one step; the key was there, so it
    // says 1.
    let want = TEAM_RUN
        .replace(
            "batch_size = 32 # per device",
            "batch_size = 1856 # per device",
        )
        .replace("accumulation_steps = 2", "accumulation_steps = 1");
    assert_eq!(read(&work.join("team-run.toml")), want);
    assert_eq!(read(&work.join("team-run.toml.bak")), TEAM_RUN);
    says(
        &o,
        "Hydra: trainer.data.batch_size=1856 trainer.data.accumulation_steps=1\n",
    );
    says(
        &o,
        "team settings updated: team.toml: [gpus.\"Fake H100\".\"fake_trainer\"]",
    );
    let team = read(&work.join("team.toml"));
    assert!(team.starts_with(OLD_TEAM), "{team}");
    assert!(
        team.contains("[gpus.\"Fake H100\".fake_trainer]\nbatch_size = 1856\n"),
        "{team}"
    );
    let mut show = std::process::Command::new(env!("CARGO_BIN_EXE_tuner"));
    show.args(["team", "team.toml"]);
    let t = run(show, "0", &work, &tmp);
    assert_eq!(t.code, 0, "{}", t.stderr);
    for row in [
        "| NVIDIA H200 | (not recorded) | 4096 | 1 | 4096 | bf16 |",
        "| Fake H100 | `python3 train.py --batch-size {batch_size}` | 512 | 2 | 1024 | fp32 |",
        "| Fake H100 | `fake_trainer` | 1856 | 1 | 1856 | fp32 |",
    ] {
        assert!(t.stdout.contains(row), "{row}\n{}", t.stdout);
    }
}

const JSON: &str = "{\n  \"model\": {\"name\": \"vit\"},\n  \"data\": {\"workers\": 4, \"batch_size\": 64},\n  \"seed\": 7\n}\n";

#[test]
fn a_json_takes_the_answer_in_its_key_order() {
    let (_s, work, tmp) = places("json");
    std::fs::write(work.join("run.json"), JSON).unwrap();
    let o = autobatch(
        &["--write", "run.json", "--key", "data.batch_size"],
        &work,
        &tmp,
    );
    let want = "{\n  \"model\": {\n    \"name\": \"vit\"\n  },\n  \"data\": {\n    \"workers\": 4,\n    \"batch_size\": 1856\n  },\n  \"seed\": 7\n}\n";
    assert_eq!(read(&work.join("run.json")), want);
    assert_eq!(read(&work.join("run.json.bak")), JSON);
    says(
        &o,
        "wrote data.batch_size = 1856 into run.json (backup run.json.bak)",
    );
    says(&o, "Hydra: data.batch_size=1856\n");
    says(&o, "LightningCLI: --data.batch_size=1856\n");
}

#[test]
fn a_file_that_cannot_take_the_answer_is_refused_in_one_line_and_left_as_it_was() {
    let (_s, work, tmp) = places("refused");
    let files = [
        ("train.yaml", HYDRA),
        ("team-run.toml", TEAM_RUN),
        ("run.json", JSON),
        ("run.ini", "batch_size = 1\n"),
        ("bad.yaml", "a:\n  b: 1\n c: 2\n"),
        ("bad.toml", "[trainer\n"),
        ("bad.json", "{\"a\": "),
    ];
    for (name, text) in files {
        std::fs::write(work.join(name), text).unwrap();
    }
    let cases: [(&[&str], &str); 13] = [
        (
            &["--write", "run.ini", "--key", "batch_size"],
            "run.ini: the answer is written into a .toml, .yaml, .yml or .json file",
        ),
        (
            &["--write", "train.yaml", "--key", "defaults.model"],
            "train.yaml: 'defaults.model' is not in the file (the nearest there: defaults.0.model,",
        ),
        (
            &[
                "--write",
                "train.yaml",
                "--key",
                "training.batch_size.per_gpu",
            ],
            "train.yaml: 'training.batch_size.per_gpu' is not in the file (the nearest there: training.batch_size,",
        ),
        (
            &[
                "--write",
                "team-run.toml",
                "--key",
                "trainer.callbacks.batch_size",
            ],
            "team-run.toml: 'trainer.callbacks.batch_size' is not in the file",
        ),
        (
            &[
                "--write",
                "team-run.toml",
                "--key",
                "model.name.x",
                "--new-key",
            ],
            "team-run.toml: 'model.name' is a scalar",
        ),
        (
            &["--write", "run.json", "--key", "seed.x", "--new-key"],
            "run.json: 'seed' is a scalar",
        ),
        (&["--write", "bad.yaml", "--key", "a.b"], "bad.yaml: line 3"),
        (
            &["--write", "bad.toml", "--key", "a"],
            "bad.toml: not valid TOML: line 1",
        ),
        (
            &["--write", "bad.json", "--key", "a"],
            "bad.json: not valid JSON",
        ),
        (&["--write", "run.json"], "run.json: give --key DOTTED.PATH"),
        (
            &["--write", "run.json", "--key", "data.batchsize"],
            "run.json: 'data.batchsize' is not in the file (the nearest there: data.batch_size, data.workers, model.name); --new-key adds it as a new key",
        ),
        (
            &["--write", "missing.yaml", "--key", "a"],
            "missing.yaml: cannot read the config",
        ),
        (
            &[
                "--write",
                "train.yaml",
                "--key",
                "training.batch_size",
                "--effective-batch",
                "4096",
            ],
            "give --accumulation-key DOTTED.PATH, where train.yaml keeps them",
        ),
    ];
    for (args, said) in cases {
        let mut all = vec!["autobatch", "--workers", "0"];
        all.extend(args);
        let o = tuner(&all, &[MEMORY], "0", &work, &tmp);
        assert_eq!(o.code, 2, "{args:?}: {}", o.stderr);
        assert!(o.stderr.contains(said), "{args:?}: {}", o.stderr);
        assert_eq!(o.stderr.trim().lines().count(), 1, "{args:?}: {}", o.stderr);
        assert!(o.stdout.is_empty(), "{args:?}: {}", o.stdout);
    }
    // Every file as it was, no backup, no trial run.
    for (name, text) in files {
        assert_eq!(read(&work.join(name)), text, "{name}");
    }
    assert_eq!(listing(&work).len(), files.len());
    assert!(listing(&tmp).is_empty(), "{:?}", listing(&tmp));
}

/// A data config whose loaders are a list, and whose training mapping merges shared defaults.
const LOADERS: &str = "\
shared: &shared
  batch_size: 32
  workers: 4
train:
  <<: *shared
  shuffle: true
eval:
  <<: *shared
loaders:
  - name: train
    batch_size: 16
";

#[test]
fn keys_in_lists_and_through_merge_keys_are_where_the_framework_reads_them() {
    let (_s, work, tmp) = places("lists");
    std::fs::write(work.join("data.yaml"), LOADERS).unwrap();
    autobatch(
        &["--write", "data.yaml", "--key", "loaders.0.batch_size"],
        &work,
        &tmp,
    );
    let after_list = LOADERS.replace("    batch_size: 16\n", "    batch_size: 1856\n");
    assert_eq!(read(&work.join("data.yaml")), after_list);
    // train.batch_size is 32 through the merge: the answer becomes train's own key, and eval
    // still reads the shared 32.
    autobatch(
        &["--write", "data.yaml", "--key", "train.batch_size"],
        &work,
        &tmp,
    );
    assert_eq!(
        read(&work.join("data.yaml")),
        after_list.replace("  shuffle: true\n", "  shuffle: true\n  batch_size: 1856\n")
    );
}

#[test]
fn a_typo_in_the_key_is_refused_naming_the_nearest_and_new_key_adds_it() {
    let (_s, work, tmp) = places("typo");
    let conf = "data:\n  loader:\n    batch_size: 64\n    workers: 8\n";
    std::fs::write(work.join("conf.yaml"), conf).unwrap();
    let args = ["--write", "conf.yaml", "--key", "data.loader.batchsize"];
    let mut all = vec!["autobatch", "--workers", "0"];
    all.extend(args);
    let o = tuner(&all, &[MEMORY], "0", &work, &tmp);
    assert_eq!(o.code, 2, "{}", o.stderr);
    assert_eq!(
        o.stderr.trim(),
        "error: conf.yaml: 'data.loader.batchsize' is not in the file (the nearest there: data.loader.batch_size, data.loader.workers); --new-key adds it as a new key"
    );
    assert_eq!(read(&work.join("conf.yaml")), conf);
    let mut asked = args.to_vec();
    asked.push("--new-key");
    let o = autobatch(&asked, &work, &tmp);
    says(
        &o,
        "wrote data.loader.batchsize = 1856 into conf.yaml (backup conf.yaml.bak)",
    );
    assert_eq!(
        read(&work.join("conf.yaml")),
        format!("{conf}    batchsize: 1856\n")
    );
}

//! Writing into YAML through yaml-edit, a lossless parser and editor: comments, blank lines,
//! quoting, key order and line endings stay as written, and only the value at the key path
//! changes. A missing key is added at the end of its mapping, in the mapping's own style (a
//! new nested mapping is indented two spaces under its key, the editor's fixed step).
//!
//! The parser recovers from errors to keep editing, so the file is also checked against YAML
//! 1.2 first: what is not valid YAML is refused with its line, never guessed at. A number in the
//! key path indexes a list. A key that a mapping gets through a merge key (`<<: *defaults`) is
//! read from the merged mapping, as PyYAML reads it, and written as the mapping's own key,
//! which wins over the merged one and leaves the anchored mapping (and whatever else merges it)
//! as it was; a path that goes on through a merged mapping is refused, as a key of its own there
//! would hide the rest of it. Paths through a scalar, an alias or a tagged value are refused in
//! one line, as is a key that holds a collection or a tagged value: writing a number there would
//! throw away more than a value. After each edit the text is read again and the key must give
//! back the value written.

use serde_json::{Map, Value};
use yaml_edit::anchor_resolution::{AnchorRegistry, MappingMergedExt, MergedMapping};
use yaml_edit::validator::{Severity, Validator};
use yaml_edit::{Document, Mapping, YamlFile, YamlNode};

use super::keys::{index, set, Absent, Edit, Kind, Node};
use crate::text::line_of;

/// `message` at byte `at` of `text`, as `line N: message` on one line: the parser's first
/// sentence says what is wrong; its hints after it name the character found, a line break too.
fn at_line(text: &str, at: u32, message: &str) -> String {
    let line = line_of(text, at as usize);
    let message = message.split(". ").next().unwrap_or(message);
    let message = message.replace('\n', "\\n").replace('\r', "\\r");
    let (first, rest) = message.split_at(message.chars().next().map_or(0, char::len_utf8));
    format!("line {line}: {}{rest}", first.to_lowercase())
}

/// The file and its one document, checked against YAML 1.2.
fn parse(text: &str) -> Result<(YamlFile, Document), String> {
    let parsed = YamlFile::parse(text);
    if let Some(e) = parsed.positioned_errors().first() {
        return Err(at_line(text, e.range.start, &e.message));
    }
    let file = parsed.tree();
    if let Some(second) = file.documents().nth(1) {
        return Err(at_line(
            text,
            second.byte_range().start,
            "a second YAML document; write into a file of one",
        ));
    }
    // A file of comments only has no document yet: the first key starts one.
    let doc = file.ensure_document();
    let violations = Validator::new().validate(&doc);
    if let Some(v) = violations.iter().find(|v| v.severity == Severity::Error) {
        let start = v.text_range.map_or(0, |r| r.start);
        return Err(at_line(text, start, &v.message));
    }
    Ok((file, doc))
}

/// A value written as `key:` and nothing else, which a nested key may fill.
fn is_empty(node: &YamlNode) -> bool {
    node.as_scalar()
        .is_some_and(|s| !s.is_quoted() && !s.is_block() && s.as_string().is_empty())
}

/// The mapping the document's root holds, its first key added where the document is empty;
/// None where it is empty and `e` only sets a key that is there.
fn root(doc: &Document, e: &Edit) -> Result<Option<Mapping>, String> {
    if let Some(m) = doc.as_mapping() {
        return Ok(Some(m));
    }
    if doc.as_sequence().is_some() {
        return Err("the file's top level is a list; a key path goes through mappings only".into());
    }
    if doc.as_scalar().is_some() || doc.as_tagged().is_some() {
        return Err("the file's top level is a single value, not a mapping of keys".into());
    }
    if e.absent == Absent::Skip {
        return Ok(None);
    }
    // An empty document: its first key starts the root mapping, and the walk sets the rest.
    doc.set(&e.key.0[0], Mapping::new_pending_block());
    doc.as_mapping()
        .map(Some)
        .ok_or_else(|| "the empty document could not take a key; left as it was".into())
}

/// `map` with the keys its merge keys (<<) bring, as PyYAML reads it.
fn merged<'r>(map: &Mapping, registry: &'r AnchorRegistry) -> Result<MergedMapping<'r>, String> {
    map.merged(registry)
        .map_err(|e| format!("a merge key (<<) cannot be read: {e}"))
}

/// The file as plain values, merge keys resolved.
pub fn tree(text: &str) -> Result<Value, String> {
    fn plain(node: &YamlNode, registry: &AnchorRegistry, depth: usize) -> Result<Value, String> {
        if depth > 64 {
            return Ok(Value::Null);
        }
        Ok(match node {
            YamlNode::Mapping(map) => Value::Object(
                (merged(map, registry)?.iter())
                    // A key that is a plain value, by its text.
                    .filter_map(|(k, v)| Some((k.as_scalar()?.as_string(), v)))
                    .map(|(k, v)| Ok((k, plain(&v, registry, depth + 1)?)))
                    .collect::<Result<_, String>>()?,
            ),
            YamlNode::Sequence(list) => Value::Array(
                list.values()
                    .map(|v| plain(&v, registry, depth + 1))
                    .collect::<Result<_, _>>()?,
            ),
            YamlNode::Scalar(s) => Value::String(s.as_string()),
            _ => Value::Null,
        })
    }
    let (_, doc) = parse(text)?;
    let registry = AnchorRegistry::from_document(&doc);
    match doc.as_mapping() {
        Some(map) => plain(&YamlNode::Mapping(map), &registry, 0),
        None => Ok(Value::Object(Map::new())),
    }
}

/// A mapping or list of the document, and the anchors its merge keys name.
struct Step<'r>(YamlNode, &'r AnchorRegistry);

impl Node for Step<'_> {
    const MAP: &'static str = "a mapping";
    const THROUGH: &'static str = "is a scalar, not a mapping; the key path cannot go through it";

    /// Beside what every format refuses: a tagged value, a path through an alias or through a
    /// merged mapping. A key written `key:` with nothing else is there to be filled.
    fn look(&self, seg: &str, here: &str, last: bool) -> Result<Option<Kind>, String> {
        // A mapping's own key, else one its merge keys bring; an item of a list.
        let number = seg.parse::<usize>().ok();
        let found = match &self.0 {
            YamlNode::Mapping(map) => match map.get(seg) {
                Some(own) => Some((own, true)),
                None => merged(map, self.1)?.get(seg).map(|m| (m, false)),
            },
            YamlNode::Sequence(list) => number.and_then(|i| list.get(i)).map(|n| (n, true)),
            _ => None,
        };
        let Some((node, own)) = found else {
            return Ok(None);
        };
        let empty = !last && is_empty(&node);
        let kind = match &node {
            YamlNode::Mapping(_) => Kind::Map,
            YamlNode::Sequence(list) => Kind::List(list.len()),
            YamlNode::TaggedNode(_) => {
                return Err(format!("'{here}' is tagged (!); write it as a plain value"))
            }
            YamlNode::Alias(_) if !last => return Err(format!(
                "'{here}' is an alias (*) of a mapping written elsewhere; set the key where it is anchored"
            )),
            _ => Kind::Scalar,
        };
        if !own && !last && (kind != Kind::Scalar || empty) {
            return Err(format!(
                "'{here}' comes through a merge key (<<) from a mapping anchored elsewhere; a key of its own here would hide the rest of it: set the key where it is anchored"
            ));
        }
        match (&self.0, empty) {
            (YamlNode::Mapping(_), true) => Ok(None),
            (_, true) => Err(format!("'{here}' cannot hold keys")),
            _ => Ok(Some(kind)),
        }
    }

    fn descend(self, seg: &str, here: &str, _: bool) -> Result<Self, String> {
        let node = match &self.0 {
            YamlNode::Mapping(map) => match map.get(seg) {
                Some(n @ (YamlNode::Mapping(_) | YamlNode::Sequence(_))) => n,
                _ => {
                    map.set(seg, Mapping::new_pending_block());
                    YamlNode::Mapping(map.get_mapping(seg).ok_or_else(|| {
                        format!("'{here}' could not be made a mapping; left as it was")
                    })?)
                }
            },
            YamlNode::Sequence(list) => list.get(index(seg)).expect("looked up"),
            _ => unreachable!("a key path goes through mappings and lists"),
        };
        Ok(Step(node, self.1))
    }

    fn set(self, seg: &str, value: usize) {
        match &self.0 {
            // A merged key gets one of the mapping's own, which wins over the merge.
            YamlNode::Mapping(map) => map.set(seg, value),
            YamlNode::Sequence(list) => {
                list.set(index(seg), value);
            }
            _ => unreachable!("a key path is set in a mapping or a list"),
        }
    }
}

pub fn edit(text: &str, e: &Edit) -> Result<Option<String>, String> {
    let (file, doc) = parse(text)?;
    let Some(map) = root(&doc, e)? else {
        return Ok(None);
    };
    let registry = AnchorRegistry::from_document(&doc);
    if !set(Step(YamlNode::Mapping(map), &registry), e)? {
        return Ok(None);
    }
    let edited = file.to_string();
    let back = tree(&edited)
        .map_err(|err| format!("the edited file would not read back ({err}); left as it was"))?;
    if e.key.get(&back) != Some(&Value::String(e.value.to_string())) {
        return Err(format!(
            "'{}' would not read back as {} after the edit; left as it was",
            e.key, e.value
        ));
    }
    Ok(Some(edited))
}
#[cfg(test)]
mod tests {
    use super::super::keys::KeyPath;
    use super::*;

    fn key(s: &str) -> KeyPath {
        KeyPath::parse(s).unwrap()
    }

    /// The whole number `key` holds in `text`, as PyYAML reads it, where it holds one.
    fn read(text: &str, key: &KeyPath) -> Result<Option<i64>, String> {
        Ok(key.get(&tree(text)?).and_then(|v| v.as_str()?.parse().ok()))
    }

    fn set(text: &str, pairs: &[(&str, usize)]) -> Result<String, String> {
        super::super::tests::edit_pairs(super::super::Format::Yaml, text, pairs)
    }

    /// A Hydra-style config: nested mappings, comments everywhere, a list, quoting.
    const HYDRA: &str = "\
# @package _global_
defaults:
  - model: resnet18
  - _self_

seed: 7

training:
  # tuned by hand
  batch_size: 64    # per GPU
  accumulation: 2
  optimizer:
    name: sgd
    lr: 0.1 # linear rule
  schedule: 'cosine'

data:
  root: /data/imagenet
  workers: 8
";

    #[test]
    fn a_nested_scalar_is_replaced_and_every_other_byte_kept() {
        let out = set(
            HYDRA,
            &[("training.batch_size", 744), ("training.accumulation", 1)],
        )
        .unwrap();
        let want = HYDRA
            .replace(
                "batch_size: 64    # per GPU",
                "batch_size: 744    # per GPU",
            )
            .replace("accumulation: 2", "accumulation: 1");
        assert_eq!(out, want);
        let out = set(HYDRA, &[("training.optimizer.lr", 3)]).unwrap();
        assert!(out.contains("    lr: 3 # linear rule\n"), "{out}");
        assert_eq!(
            set(HYDRA, &[("seed", 9)]).unwrap(),
            HYDRA.replace("seed: 7", "seed: 9")
        );
    }

    #[test]
    fn missing_keys_are_added_at_their_mapping_s_indentation() {
        let out = set(HYDRA, &[("training.accumulation_steps", 4)]).unwrap();
        assert!(
            out.contains("  schedule: 'cosine'\n  accumulation_steps: 4\n\ndata:"),
            "{out}"
        );
        let out = set(HYDRA, &[("training.optimizer.momentum", 9)]).unwrap();
        assert!(
            out.contains("    lr: 0.1 # linear rule\n    momentum: 9\n"),
            "{out}"
        );
        let out = set(HYDRA, &[("trainer.limits.batch_size", 32)]).unwrap();
        assert!(
            out.ends_with("  workers: 8\ntrainer:\n  limits:\n    batch_size: 32\n"),
            "{out}"
        );
        // A key added to a mapping of the file's takes that mapping's indentation; a mapping
        // that is new, under a key that was empty, is indented two spaces, yaml-edit's step.
        let out = set(
            "model:\n    name: vit\ntrainer:\n",
            &[("model.size", 16), ("trainer.batch_size", 16)],
        )
        .unwrap();
        assert_eq!(
            out,
            "model:\n    name: vit\n    size: 16\ntrainer:\n  batch_size: 16\n"
        );
        let out = set("# only a comment\n", &[("batch_size", 16)]).unwrap();
        assert_eq!(out, "# only a comment\nbatch_size: 16\n");
        assert_eq!(set("", &[("a.b", 1)]).unwrap(), "a:\n  b: 1\n");
        let out = set("a: 1", &[("b", 2)]).unwrap();
        assert_eq!(out, "a: 1\nb: 2", "no newline added at the end");
        let out = set("x: 1\r\ny:\r\n  z: 2\r\n", &[("y.w", 3)]).unwrap();
        assert_eq!(out, "x: 1\r\ny:\r\n  z: 2\r\n  w: 3\r\n");
    }

    #[test]
    fn empty_values_quoted_keys_and_document_markers() {
        let out = set(
            "training:\n  batch_size:   # fill me\n",
            &[("training.batch_size", 8)],
        )
        .unwrap();
        assert_eq!(out, "training:\n  batch_size: 8   # fill me\n");
        let out = set(
            "\"data loader\":\n  'batch size': 4 # ok\n",
            &[("data loader.batch size", 5)],
        );
        assert_eq!(out.unwrap(), "\"data loader\":\n  'batch size': 5 # ok\n");
        let out = set("'my key': 4\n", &[("my key", 5)]).unwrap();
        assert_eq!(out, "'my key': 5\n");
        let out = set("%YAML 1.2\n---\na: \"1\"\n...\n", &[("a", 2)]).unwrap();
        assert_eq!(out, "%YAML 1.2\n---\na: 2\n...\n");
        let out = set("url: http://x:80/a # where\n", &[("url", 1)]).unwrap();
        assert_eq!(out, "url: 1 # where\n");
        let out = set("a:\n- 1\n- 2\nb: 3\n", &[("b", 4)]).unwrap();
        assert_eq!(out, "a:\n- 1\n- 2\nb: 4\n");
    }

    #[test]
    fn what_it_cannot_change_cleanly_is_refused_in_one_line() {
        let cases: [(&str, &str, &str); 9] = [
            (HYDRA, "defaults.model", "'defaults' is a list of 2"),
            ("a:\n- 1\n", "a.b", "'a' is a list of 1"),
            ("a: [1,\n  2]\n", "a", "'a' holds a list"),
            (HYDRA, "seed.x", "'seed' is a scalar"),
            ("a: '1'\n", "a.b", "'a' is a scalar"),
            (HYDRA, "training", "holds a mapping"),
            ("a: {b: 1}\n", "a", "holds a mapping"),
            ("a: !!int 3\n", "a", "tagged"),
            (
                "base: &b\n  lr: 1\nother: *b\n",
                "other.lr",
                "'other' is an alias",
            ),
        ];
        for (text, k, says) in cases {
            let e = set(text, &[(k, 1)]).unwrap_err();
            assert!(e.contains(says), "{k} in {text:?}: {e}");
            assert_eq!(e.lines().count(), 1, "{e}");
        }
    }

    /// What a parser of the whole language edits cleanly: the node at the key is replaced, however
    /// it was written, and the rest of the file stays.
    #[test]
    fn flow_style_anchors_and_values_over_several_lines_are_written() {
        let cases: [(&str, &str, &str); 9] = [
            ("a: {b: 1} # c\n", "a.b", "a: {b: 7} # c\n"),
            ("a: {b: 1}\n", "a.c", "a: {b: 1, c: 7}\n"),
            ("{a: 1}\n", "b", "{a: 1, b: 7}\n"),
            // The anchor stays on the new value, so what aliases it keeps sharing it.
            ("base: &b\n  lr: 1\n", "base.lr", "base: &b\n  lr: 7\n"),
            ("a: &n 3\nb: *n\n", "a", "a: &n 7\nb: *n\n"),
            ("n: &n 3\na: *n\n", "a", "n: &n 3\na: 7\n"),
            ("a: |\n  text\nb: 2\n", "a", "a: 7\nb: 2\n"),
            ("a: one\n  two\n", "a", "a: 7\n"),
            ("a:\n  text only\n", "a", "a: 7\n"),
        ];
        for (text, k, want) in cases {
            assert_eq!(set(text, &[(k, 7)]).unwrap(), want, "{k} in {text:?}");
        }
    }

    #[test]
    fn malformed_files_are_refused_with_the_line() {
        let cases: [(&str, &str); 11] = [
            ("a:\n  b: 1\n c: 2\n", "line 3: "),
            ("a: 1\n  b: 2\n", "line 2: "),
            ("a:\n  b: 1\n    c: 2\n", "line 3: "),
            ("a:\n  b:\n    c: 2\n   d: 1\n", "line 4: "),
            ("a: 1\na: 2\n", "line 2: duplicate key"),
            ("a:\n\tb: 1\n", "line 2: tabs are not allowed"),
            ("a: *b\n", "line 1: undefined alias"),
            ("just text\n", "top level is a single value"),
            ("a: 1\n---\nb: 2\n", "line 2: a second YAML document"),
            ("- 1\n- 2\n", "top level is a list"),
            ("a: \"open\n", "line 1: unterminated quoted string"),
        ];
        for (text, says) in cases {
            let e = set(text, &[("z", 1)]).unwrap_err();
            assert!(e.contains(says), "{text:?}: {e}");
            assert_eq!(e.lines().count(), 1, "{e}");
        }
        let e = set("a: b: c\n", &[("z", 1)]).unwrap_err();
        assert!(e.starts_with("line 1: "), "{e}");
    }

    /// A LightningCLI config: lists of mappings on the way, class paths, a null.
    const LIGHTNING: &str = "\
# lightning.pytorch==2.6
seed_everything: 42
trainer:
  accelerator: gpu
  callbacks:
    - class_path: lightning.pytorch.callbacks.ModelCheckpoint
      init_args:
        monitor: val_loss
    - EarlyStopping
  logger: null
data:
  class_path: mydata.DataModule
  init_args:
    batch_size: 32 # per device
    num_workers: 4
";

    #[test]
    fn a_lightning_config_past_lists_of_mappings() {
        let out = set(LIGHTNING, &[("data.init_args.batch_size", 96)]).unwrap();
        assert_eq!(
            out,
            LIGHTNING.replace("batch_size: 32 # per device", "batch_size: 96 # per device")
        );
        let out = set(LIGHTNING, &[("trainer.logger", 1)]).unwrap();
        assert!(out.contains("  logger: 1\ndata:"), "{out}");
        let out = set(LIGHTNING, &[("trainer.accumulate_grad_batches", 4)]).unwrap();
        assert!(
            out.contains("  logger: null\n  accumulate_grad_batches: 4\ndata:"),
            "{out}"
        );
        let e = set(LIGHTNING, &[("trainer.callbacks.init_args", 1)]).unwrap_err();
        assert!(e.contains("'trainer.callbacks' is a list"), "{e}");
        // An item out of line with its list is YAML's error too.
        let bad = LIGHTNING.replace("    - EarlyStopping", "  - EarlyStopping");
        let e = set(&bad, &[("seed_everything", 1)]).unwrap_err();
        assert!(e.starts_with("line 9: "), "{e}");
        let e = set(LIGHTNING, &[("trainer.logger.x", 1)]).unwrap_err();
        assert!(e.contains("'trainer.logger' is a scalar"), "{e}");
    }

    #[test]
    fn a_number_indexes_a_list_and_a_merged_key_is_written_where_pyyaml_reads_it() {
        let out = set(LIGHTNING, &[("trainer.callbacks.0.init_args.patience", 3)]).unwrap();
        assert!(
            out.contains("        monitor: val_loss\n        patience: 3\n    - EarlyStopping"),
            "{out}"
        );
        let out = set("sizes:\n- 1 # small\n- 2\n", &[("sizes.0", 8)]).unwrap();
        assert_eq!(out, "sizes:\n- 8 # small\n- 2\n");
        let e = set(LIGHTNING, &[("trainer.callbacks.2.x", 1)]).unwrap_err();
        assert!(e.contains("'trainer.callbacks' is a list of 2"), "{e}");
        // OmegaConf reads train.batch_size through the merge: 32. The answer goes into train as
        // its own key, which wins over the merged one; eval still merges 32.
        let merged = "\
defaults: &defaults
  batch_size: 32
  optim:
    lr: 0.1
train:
  <<: *defaults
  epochs: 90
eval:
  <<: *defaults
";
        let t = tree(merged).unwrap();
        assert_eq!(t["train"]["batch_size"], "32");
        assert_eq!(t["eval"]["optim"]["lr"], "0.1");
        assert!(key("train.batch_size").get(&t).is_some());
        let out = set(merged, &[("train.batch_size", 96)]).unwrap();
        assert_eq!(
            out,
            merged.replace("  epochs: 90\n", "  epochs: 90\n  batch_size: 96\n")
        );
        assert_eq!(read(&out, &key("train.batch_size")).unwrap(), Some(96));
        assert_eq!(read(&out, &key("eval.batch_size")).unwrap(), Some(32));
        let e = set(merged, &[("train.optim.lr", 1)]).unwrap_err();
        assert!(e.contains("'train.optim' comes through a merge key"), "{e}");
        // Set where it is anchored, every mapping that merges it reads the new value.
        let out = set(merged, &[("defaults.batch_size", 64)]).unwrap();
        assert_eq!(read(&out, &key("eval.batch_size")).unwrap(), Some(64));
    }

    #[test]
    fn a_key_only_if_present_is_left_out_when_missing() {
        let k = key("training.accumulation_steps");
        let edits = [Edit {
            key: &k,
            value: 4,
            absent: Absent::Skip,
        }];
        let (text, written) = super::super::Format::Yaml.edit(HYDRA, &edits).unwrap();
        assert_eq!((text.as_str(), written.len()), (HYDRA, 0));
        let (text, written) = super::super::Format::Yaml
            .edit("training:\n  accumulation_steps: 1\n", &edits)
            .unwrap();
        assert_eq!(text, "training:\n  accumulation_steps: 4\n");
        assert_eq!(written, [("training.accumulation_steps".to_string(), 4)]);
    }
}

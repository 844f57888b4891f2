//! Key paths (`training.batch_size`, `trainer.callbacks.0.patience`), the edits at them and the
//! one walk that makes them in any file format; a key path that is not in the file, refused with
//! the nearest ones that are.

use std::fmt;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// A dotted key path: `training.batch_size`; in JSON, its text.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(try_from = "String")]
pub struct KeyPath(pub(super) Vec<String>);

impl TryFrom<String> for KeyPath {
    type Error = String;
    fn try_from(s: String) -> Result<KeyPath, String> {
        KeyPath::parse(&s)
    }
}

impl KeyPath {
    pub fn parse(s: &str) -> Result<KeyPath, String> {
        let segments: Vec<String> = s.split('.').map(str::to_string).collect();
        // An empty name, or one with spaces at either end.
        if segments.iter().any(|p| p.is_empty() || p.trim() != p) {
            return Err(format!(
                "'{s}' is not a key path: names joined by dots, like training.batch_size"
            ));
        }
        Ok(KeyPath(segments))
    }

    /// What the file holds at this key path, as the framework reads it (`tree`: the file as
    /// plain values, merge keys resolved; a number in the path indexes a list).
    pub fn get<'a>(&self, tree: &'a Value) -> Option<&'a Value> {
        self.0.iter().try_fold(tree, |node, seg| child(node, seg))
    }
}

/// What `seg` names in `node`: a key of an object, a number of a list.
pub fn child<'a>(node: &'a Value, seg: &str) -> Option<&'a Value> {
    match node {
        Value::Object(o) => o.get(seg),
        Value::Array(a) => a.get(seg.parse::<usize>().ok()?),
        _ => None,
    }
}

/// Every key path in `tree` that ends at a value (a scalar, an empty list or mapping), in the
/// file's order.
pub fn key_paths(tree: &Value) -> Vec<String> {
    let children: Vec<(String, &Value)> = match tree {
        Value::Object(o) => o.iter().map(|(k, v)| (k.clone(), v)).collect(),
        Value::Array(a) => a
            .iter()
            .enumerate()
            .map(|(i, v)| (i.to_string(), v))
            .collect(),
        _ => return Vec::new(),
    };
    let paths = |(k, v): (String, &Value)| match key_paths(v) {
        below if below.is_empty() => vec![k],
        below => below.iter().map(|p| format!("{k}.{p}")).collect(),
    };
    children.into_iter().flat_map(paths).collect()
}

/// The refusal of a key path that is not in the file: it names the (at most three) nearest
/// key paths that are, and the flag that adds a new key.
pub fn not_there(key: &KeyPath, tree: &Value) -> String {
    let wanted = key.to_string();
    let mut paths = key_paths(tree);
    // A stable sort: of equally near ones, the first in the file first.
    paths.sort_by_key(|p| strsim::levenshtein(&wanted, p));
    paths.truncate(3);
    let there = match paths.is_empty() {
        true => "the file has no keys".to_string(),
        false => format!("the nearest there: {}", paths.join(", ")),
    };
    format!("'{wanted}' is not in the file ({there}); --new-key adds it as a new key")
}

impl fmt::Display for KeyPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0.join("."))
    }
}

impl Serialize for KeyPath {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// What an edit does where the file does not have its key path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Absent {
    /// Leave the file as it is.
    Skip,
    /// Add the key (and the mappings on its way).
    Add,
    /// Refuse, naming the nearest key paths that are there.
    Refuse,
}

/// One whole number to set at a key path.
pub struct Edit<'a> {
    pub key: &'a KeyPath,
    pub value: usize,
    pub absent: Absent,
}

/// What a key path meets in a file: a mapping (a table, an object), a list of `len` items, or
/// a value it cannot go through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Map,
    List(usize),
    Scalar,
}

/// A mapping or a list of a file being edited, as its format's editor holds it: what the walk
/// of a key path ([set]) asks of each format.
pub trait Node: Sized {
    /// What a mapping is called in this format: "a table".
    const MAP: &'static str;
    /// Why a key path cannot go on through a scalar, after its path.
    const THROUGH: &'static str;
    /// What `seg` holds here (`here`: the key path to it): a key of a mapping, a number of a
    /// list; None where it is not there. Err for what the format cannot set without guessing.
    fn look(&self, seg: &str, here: &str, last: bool) -> Result<Option<Kind>, String>;
    /// The mapping or list at `seg`, an empty mapping added where there is none (`implicit`:
    /// one that holds only mappings).
    fn descend(self, seg: &str, here: &str, implicit: bool) -> Result<Self, String>;
    /// Set `seg` (a mapping's key, added where missing, or a list's item) to `value`.
    fn set(self, seg: &str, value: usize);
}

/// The number of a list's item in a key path, looked up before.
pub fn index(seg: &str) -> usize {
    seg.parse().expect("looked up by its number")
}

/// Set one key path from the file's top mapping `node`; false where it is missing and only to
/// be set where present. A path through a scalar, to a collection or past a list's end is
/// refused; a missing key is added, with the mappings on its way.
pub fn set<N: Node>(mut node: N, e: &Edit) -> Result<bool, String> {
    let segments = &e.key.0;
    let mut at = Kind::Map;
    for (i, seg) in segments.iter().enumerate() {
        let here = segments[..=i].join(".");
        let last = i + 1 == segments.len();
        let found = node.look(seg, &here, last)?;
        let holds = |what| Err(format!("'{here}' holds {what}, not a number"));
        match (at, found) {
            (_, None) if e.absent == Absent::Skip => return Ok(false),
            (Kind::List(len), None) => {
                return Err(format!(
                    "'{here}' is not in the file: '{}' is a list of {len}, indexed from 0",
                    segments[..i].join(".")
                ))
            }
            (_, Some(Kind::Map)) if last => return holds(N::MAP),
            (_, Some(Kind::List(_))) if last => return holds("a list"),
            (_, Some(Kind::Scalar)) if !last => return Err(format!("'{here}' {}", N::THROUGH)),
            _ if last => {
                node.set(seg, e.value);
                return Ok(true);
            }
            _ => {}
        }
        node = node.descend(seg, &here, i + 2 < segments.len())?;
        at = found.unwrap_or(Kind::Map);
    }
    Ok(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_typo_is_refused_with_the_nearest_key_paths() {
        let tree = serde_json::json!({
            "data": {"loader": {"batch_size": 64, "workers": 8}, "root": "/data"},
            "trainer": {"callbacks": [{"patience": 3}, {}], "devices": []},
        });
        let has = |k: &str| KeyPath::parse(k).unwrap().get(&tree).is_some();
        assert!(has("data.loader.batch_size"));
        assert!(has("trainer.callbacks.0.patience"));
        assert!(has("trainer.callbacks.1"));
        assert!(!has("trainer.callbacks.2"));
        assert!(!has("trainer.callbacks.x"));
        assert!(!has("data.loader.batch_size.x"));
        assert_eq!(
            KeyPath::parse("trainer.callbacks.0.patience")
                .unwrap()
                .get(&tree),
            Some(&serde_json::json!(3))
        );
        assert_eq!(
            key_paths(&tree),
            [
                "data.loader.batch_size",
                "data.loader.workers",
                "data.root",
                "trainer.callbacks.0.patience",
                "trainer.callbacks.1",
                "trainer.devices"
            ]
        );
        let e = not_there(&KeyPath::parse("data.loader.batchsize").unwrap(), &tree);
        assert_eq!(
            e,
            "'data.loader.batchsize' is not in the file (the nearest there: data.loader.batch_size, data.loader.workers, data.root); --new-key adds it as a new key"
        );
        let e = not_there(&KeyPath::parse("a").unwrap(), &serde_json::json!({}));
        assert!(e.contains("(the file has no keys)"), "{e}");
        // The nearest by edits of one character (insert, delete, replace).
        assert_eq!(strsim::levenshtein("kitten", "sitting"), 3);
        assert_eq!(strsim::levenshtein("", "ab"), 2);
    }
}

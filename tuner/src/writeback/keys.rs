//! Key paths (`training.batch_size`) and the edits each file format makes at them.

use std::fmt;

use serde::Serialize;

/// A dotted key path: `training.batch_size`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyPath(Vec<String>);

impl KeyPath {
    pub fn parse(s: &str) -> Result<KeyPath, String> {
        let segments: Vec<String> = s.split('.').map(str::to_string).collect();
        if segments
            .iter()
            .any(|p| p.trim().is_empty() || p.trim() != p)
        {
            return Err(format!(
                "'{s}' is not a key path: names joined by dots, like training.batch_size"
            ));
        }
        Ok(KeyPath(segments))
    }

    /// A key path of names known to be good.
    pub fn of(names: &[&str]) -> KeyPath {
        KeyPath(names.iter().map(|n| n.to_string()).collect())
    }

    pub fn segments(&self) -> &[String] {
        &self.0
    }

    /// The first `n` names, as a key path's text.
    pub fn prefix(&self, n: usize) -> String {
        self.0[..n].join(".")
    }
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

/// One whole number to set at a key path.
pub struct Edit<'a> {
    pub key: &'a KeyPath,
    pub value: usize,
    /// Set only where the key is already there.
    pub only_if_present: bool,
}

/// A file's new text and what was set in it, in order.
pub struct Edited {
    pub text: String,
    pub written: Vec<(String, usize)>,
}

//! TOML through toml_edit: the document keeps its comments, key order and formatting; a value
//! replaced keeps the comments around it; a missing table is added as a table of its own. A
//! number in the key path indexes an array (of tables, of inline tables, or of numbers).

use toml_edit::{DocumentMut, Item, Table, TableLike};

use super::keys::{index, set, Edit, Kind, Node};
use crate::text::line_of;

pub fn parse(text: &str) -> Result<DocumentMut, String> {
    text.parse().map_err(|err: toml_edit::TomlError| {
        let message = err.message().trim().replace('\n', " ");
        let line = err.span().map(|span| line_of(text, span.start));
        let at = line.map(|l| format!("line {l}: ")).unwrap_or_default();
        format!("not valid TOML: {at}{message}")
    })
}

/// The file as plain values.
pub fn tree(text: &str) -> Result<serde_json::Value, String> {
    parse(text)?;
    toml_edit::de::from_str(text).map_err(|e| format!("not valid TOML: {}", e.message()))
}

/// Set `key = v`; an existing key keeps its comments (the one above it and the one after it).
pub fn set_keeping_comments(table: &mut dyn TableLike, key: &str, v: i64) {
    match table.get_mut(key).and_then(|i| i.as_value_mut()) {
        Some(old) => replace(old, v),
        None => {
            table.insert(key, toml_edit::value(v));
        }
    }
}

/// `old` replaced by `v`, with its comments.
fn replace(old: &mut toml_edit::Value, v: i64) {
    let decor = old.decor().clone();
    *old = toml_edit::Value::from(v);
    *old.decor_mut() = decor;
}

/// What `item` is to a key path: an array (of tables or of values) is a list.
fn kind(item: &Item) -> Kind {
    match item {
        Item::ArrayOfTables(t) => Kind::List(t.len()),
        Item::Value(toml_edit::Value::Array(a)) => Kind::List(a.len()),
        other if other.is_table_like() => Kind::Map,
        _ => Kind::Scalar,
    }
}

/// A table (or inline table), an array or an array of tables, each an item of the document.
impl Node for &mut Item {
    const MAP: &'static str = "a table";
    const THROUGH: &'static str = "is a scalar; a key path goes through tables and lists only";

    fn look(&self, seg: &str, _: &str, _: bool) -> Result<Option<Kind>, String> {
        Ok(match self.is_table_like() {
            true => self.get(seg),
            false => seg.parse::<usize>().ok().and_then(|i| self.get(i)),
        }
        .map(kind))
    }

    fn descend(self, seg: &str, _: &str, implicit: bool) -> Result<Self, String> {
        if let Some(table) = self.as_table_like_mut().filter(|t| !t.contains_key(seg)) {
            let mut t = Table::new();
            // A table that holds only tables shows through them, as `[a.b]` shows `a`.
            t.set_implicit(implicit);
            table.insert(seg, Item::Table(t));
        }
        Ok(match self.is_table_like() {
            true => &mut self[seg],
            false => &mut self[index(seg)],
        })
    }

    fn set(self, seg: &str, value: usize) {
        match self.as_table_like_mut() {
            Some(table) => set_keeping_comments(table, seg, value as i64),
            None => replace(
                self[index(seg)].as_value_mut().expect("looked up"),
                value as i64,
            ),
        }
    }
}

pub fn edit(text: &str, e: &Edit) -> Result<Option<String>, String> {
    let mut doc = parse(text)?;
    i64::try_from(e.value).map_err(|_| format!("{} is too large for TOML", e.value))?;
    Ok(set(doc.as_item_mut(), e)?.then(|| doc.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::writeback::keys::KeyPath;

    /// The whole number `key` holds in `text`.
    fn read(text: &str, key: &KeyPath) -> Option<i64> {
        let doc = parse(text).ok()?;
        let mut item = doc.as_item();
        for seg in &key.0 {
            item = item.get(seg)?;
        }
        item.as_integer()
    }

    const RUN: &str = r#"# our training run
title = "resnet" # which one

[model]
preset = "large" # the big one

[model.optimizer]
name = "sgd"
lr = 0.05 # linear rule

[training]
# tuned by hand last week
batch_size = 64 # per GPU
my_own_key = "kept"

[[callbacks]]
name = "early-stop"
"#;

    fn set(text: &str, pairs: &[(&str, usize)]) -> Result<String, String> {
        super::super::tests::edit_pairs(super::super::Format::Toml, text, pairs)
    }

    #[test]
    fn values_in_nested_tables_are_replaced_keeping_comments() {
        let out = set(
            RUN,
            &[("training.batch_size", 744), ("model.optimizer.lr", 2)],
        )
        .unwrap();
        let want = RUN
            .replace("batch_size = 64 # per GPU", "batch_size = 744 # per GPU")
            .replace("lr = 0.05 # linear rule", "lr = 2 # linear rule");
        assert_eq!(out, want);
        let k = KeyPath::parse("model.optimizer.lr").unwrap();
        assert_eq!(read(&out, &k), Some(2));
    }

    #[test]
    fn missing_keys_and_tables_are_added() {
        let out = set(RUN, &[("training.accumulation_steps", 4)]).unwrap();
        assert!(
            out.contains(
                "batch_size = 64 # per GPU\nmy_own_key = \"kept\"\naccumulation_steps = 4\n"
            ),
            "{out}"
        );
        let out = set(RUN, &[("model.data.loader.batch_size", 8)]).unwrap();
        assert!(
            out.contains("[model.data.loader]\nbatch_size = 8\n"),
            "{out}"
        );
        assert!(!out.contains("[model.data]\n"), "{out}");
        assert!(out.starts_with("# our training run\ntitle = \"resnet\" # which one\n"));
        let out = set("model = { name = \"vit\" }\n", &[("model.batch_size", 8)]).unwrap();
        assert_eq!(out, "model = { name = \"vit\" , batch_size = 8 }\n");
    }

    #[test]
    fn a_number_in_the_key_path_indexes_an_array() {
        let out = set(RUN, &[("callbacks.0.patience", 3)]).unwrap();
        assert!(
            out.ends_with("[[callbacks]]\nname = \"early-stop\"\npatience = 3\n"),
            "{out}"
        );
        let out = set("sizes = [1, 2] # two\n", &[("sizes.1", 8)]).unwrap();
        assert_eq!(out, "sizes = [1, 8] # two\n");
        let text = "loaders = [{ name = \"train\", batch = 4 }]\n";
        let out = set(text, &[("loaders.0.batch", 16)]).unwrap();
        assert_eq!(out, "loaders = [{ name = \"train\", batch = 16 }]\n");
        let e = set("sizes = [[1]]\n", &[("sizes.0", 8)]).unwrap_err();
        assert!(e.contains("holds a list"), "{e}");
    }

    #[test]
    fn a_key_only_if_present_is_left_out_past_a_list_s_end() {
        for k in ["callbacks.1", "callbacks.name", "callbacks.1.patience"] {
            let k = KeyPath::parse(k).unwrap();
            let edits = [Edit {
                key: &k,
                value: 4,
                absent: super::super::keys::Absent::Skip,
            }];
            let (text, written) = super::super::Format::Toml.edit(RUN, &edits).unwrap();
            assert_eq!((text.as_str(), written.len()), (RUN, 0), "{k}");
        }
    }

    #[test]
    fn paths_through_lists_and_scalars_are_refused() {
        let cases = [
            ("callbacks.name", "'callbacks.name' is not in the file"),
            ("callbacks.1.name", "'callbacks' is a list of 1"),
            ("callbacks.0", "holds a table"),
            ("title.x", "'title' is a scalar"),
            ("model", "holds a table"),
        ];
        for (k, says) in cases {
            let e = set(RUN, &[(k, 1)]).unwrap_err();
            assert!(e.contains(says), "{k}: {e}");
        }
        let e = set("a = [1, 2]\n", &[("a.b", 1)]).unwrap_err();
        assert!(e.contains("'a' is a list of 2"), "{e}");
        let e = set("a = [1, 2]\n", &[("a", 1)]).unwrap_err();
        assert!(e.contains("holds a list"), "{e}");
        let e = set("[training\n", &[("a", 1)]).unwrap_err();
        assert!(
            e.starts_with("not valid TOML") && e.lines().count() == 1,
            "{e}"
        );
    }
}

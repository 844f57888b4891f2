//! TOML through toml_edit: the document keeps its comments, key order and formatting; a value
//! replaced keeps the comments around it; a missing table is added as a table of its own. A
//! number in the key path indexes an array (of tables, of inline tables, or of numbers).

use toml_edit::{Array, ArrayOfTables, DocumentMut, Item, Table, TableLike};

#[cfg(test)]
use super::keys::KeyPath;
use super::keys::{index, set, Edit, Kind, Node};
use crate::text::line_of;

pub fn parse(text: &str) -> Result<DocumentMut, String> {
    text.parse().map_err(|err: toml_edit::TomlError| {
        let message = err.message().trim().replace('\n', " ");
        match err.span() {
            Some(span) => format!(
                "not valid TOML: line {}: {message}",
                line_of(text, span.start)
            ),
            None => format!("not valid TOML: {message}"),
        }
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

/// Where a key path is on its way: a table (or inline table), an array, an array of tables.
enum Step<'a> {
    Table(&'a mut dyn TableLike),
    Array(&'a mut Array),
    Tables(&'a mut ArrayOfTables),
}

fn item_kind(item: &Item) -> Kind {
    match item {
        Item::ArrayOfTables(t) => Kind::List(t.len()),
        Item::Value(v) => value_kind(v),
        other if other.is_table_like() => Kind::Map,
        _ => Kind::Scalar,
    }
}

fn value_kind(value: &toml_edit::Value) -> Kind {
    match value {
        toml_edit::Value::Array(a) => Kind::List(a.len()),
        toml_edit::Value::InlineTable(_) => Kind::Map,
        _ => Kind::Scalar,
    }
}

impl<'a> Step<'a> {
    fn of_value(value: &'a mut toml_edit::Value) -> Step<'a> {
        match value {
            toml_edit::Value::Array(a) => Step::Array(a),
            t => Step::Table(t.as_inline_table_mut().expect("looked up as a table")),
        }
    }
}

impl Node for Step<'_> {
    const MAP: &'static str = "a table";
    const THROUGH: &'static str = "is a scalar; a key path goes through tables and lists only";

    fn look(&self, seg: &str, _: &str, _: bool) -> Result<Option<Kind>, String> {
        let index = seg.parse::<usize>().ok();
        Ok(match self {
            Step::Table(table) => table.get(seg).map(item_kind),
            Step::Array(a) => index.and_then(|i| a.get(i)).map(value_kind),
            Step::Tables(t) => index.and_then(|i| t.get(i)).map(|_| Kind::Map),
        })
    }

    fn descend(self, seg: &str, _: &str, implicit: bool) -> Result<Self, String> {
        Ok(match self {
            Step::Table(table) => {
                if !table.contains_key(seg) {
                    let mut t = Table::new();
                    // A table that holds only tables shows through them, as `[a.b]` shows `a`.
                    t.set_implicit(implicit);
                    table.insert(seg, Item::Table(t));
                }
                match table.get_mut(seg).expect("present or just added") {
                    Item::ArrayOfTables(t) => Step::Tables(t),
                    Item::Value(value) => Step::of_value(value),
                    other => Step::Table(other.as_table_like_mut().expect("looked up as a table")),
                }
            }
            Step::Array(a) => Step::of_value(a.get_mut(index(seg)).expect("looked up")),
            Step::Tables(t) => Step::Table(t.get_mut(index(seg)).expect("looked up")),
        })
    }

    fn set(self, seg: &str, value: usize) {
        match self {
            Step::Table(table) => set_keeping_comments(table, seg, value as i64),
            Step::Array(a) => replace(a.get_mut(index(seg)).expect("looked up"), value as i64),
            Step::Tables(_) => unreachable!("an array of tables holds tables"),
        }
    }
}

pub fn edit(text: &str, e: &Edit) -> Result<Option<String>, String> {
    let mut doc = parse(text)?;
    i64::try_from(e.value).map_err(|_| format!("{} is too large for TOML", e.value))?;
    Ok(set(Step::Table(doc.as_table_mut()), e)?.then(|| doc.to_string()))
}

/// The whole number `key` holds in `text`.
#[cfg(test)]
fn read(text: &str, key: &KeyPath) -> Option<i64> {
    let doc = parse(text).ok()?;
    let mut item = doc.as_item();
    for seg in key.segments() {
        item = item.get(seg)?;
    }
    item.as_integer()
}

#[cfg(test)]
mod tests {
    use super::*;

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
        super::super::edit_pairs(super::super::Format::Toml, text, pairs)
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
            let e = super::super::Format::Toml.edit(RUN, &edits).unwrap();
            assert_eq!((e.text.as_str(), e.written.len()), (RUN, 0), "{k}");
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

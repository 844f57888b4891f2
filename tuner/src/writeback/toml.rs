//! TOML through toml_edit: the document keeps its comments, key order and formatting; a value
//! replaced keeps the comments around it; a missing table is added as a table of its own. A
//! number in the key path indexes an array (of tables, of inline tables, or of numbers).

use toml_edit::{Array, ArrayOfTables, DocumentMut, Item, Table, TableLike};

#[cfg(test)]
use super::keys::KeyPath;
use super::keys::{Edit, Edited};

pub fn parse(text: &str) -> Result<DocumentMut, String> {
    text.parse().map_err(|err: toml_edit::TomlError| {
        let message = err.message().trim().replace('\n', " ");
        match err.span() {
            Some(span) => {
                let line = text[..span.start.min(text.len())].matches('\n').count() + 1;
                format!("not valid TOML: line {line}: {message}")
            }
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
        Some(old) => {
            let decor = old.decor().clone();
            *old = toml_edit::Value::from(v);
            *old.decor_mut() = decor;
        }
        None => {
            table.insert(key, toml_edit::value(v));
        }
    }
}

/// Where a key path is on its way: a table (or inline table), an array, an array of tables.
enum Node<'a> {
    Table(&'a mut dyn TableLike),
    Array(&'a mut Array),
    Tables(&'a mut ArrayOfTables),
}

impl<'a> Node<'a> {
    /// The node `item` is, or what it is instead (a scalar), for the message.
    fn of_item(item: &'a mut Item) -> Result<Node<'a>, &'static str> {
        match item {
            Item::ArrayOfTables(t) => Ok(Node::Tables(t)),
            Item::Value(value) => Node::of_value(value),
            other => other.as_table_like_mut().map(Node::Table).ok_or("a scalar"),
        }
    }

    fn of_value(value: &'a mut toml_edit::Value) -> Result<Node<'a>, &'static str> {
        match value {
            toml_edit::Value::Array(a) => Ok(Node::Array(a)),
            toml_edit::Value::InlineTable(t) => Ok(Node::Table(t)),
            _ => Err("a scalar"),
        }
    }
}

/// Set one key in `doc`; false when it is missing and only to be set where present.
fn set(doc: &mut DocumentMut, e: &Edit) -> Result<bool, String> {
    let segments = e.key.segments();
    let (last, parents) = segments.split_last().expect("a key path has a name");
    let v = i64::try_from(e.value).map_err(|_| format!("{} is too large for TOML", e.value))?;
    let mut node = Node::Table(doc.as_table_mut());
    let out_of_range = |i: usize, len: usize| {
        format!(
            "'{}' is not in the file: '{}' is a list of {len}, indexed from 0",
            e.key.prefix(i + 1),
            e.key.prefix(i)
        )
    };
    for (i, seg) in parents.iter().enumerate() {
        let here = e.key.prefix(i + 1);
        let through =
            |what| format!("'{here}' is {what}; a key path goes through tables and lists only");
        let index = seg.parse::<usize>().ok();
        node = match node {
            Node::Table(table) => {
                if !table.contains_key(seg) {
                    if e.only_if_present() {
                        return Ok(false);
                    }
                    let mut t = Table::new();
                    // A table that holds only tables shows through them, as `[a.b]` shows `a`.
                    t.set_implicit(i + 1 < parents.len());
                    table.insert(seg, Item::Table(t));
                }
                Node::of_item(table.get_mut(seg).expect("present or just added"))
                    .map_err(through)?
            }
            Node::Tables(tables) => {
                let len = tables.len();
                match index.and_then(|k| tables.get_mut(k)) {
                    Some(t) => Node::Table(t),
                    None if e.only_if_present() => return Ok(false),
                    None => return Err(out_of_range(i, len)),
                }
            }
            Node::Array(array) => {
                let len = array.len();
                match index.and_then(|k| array.get_mut(k)) {
                    Some(value) => Node::of_value(value).map_err(through)?,
                    None if e.only_if_present() => return Ok(false),
                    None => return Err(out_of_range(i, len)),
                }
            }
        };
    }
    let index = last.parse::<usize>().ok();
    let i = parents.len();
    match node {
        Node::Table(table) => {
            match table.get(last) {
                None if e.only_if_present() => return Ok(false),
                Some(item) if item.is_table_like() => {
                    return Err(format!("'{}' holds a table, not a number", e.key))
                }
                Some(item) if item.is_array() || item.is_array_of_tables() => {
                    return Err(format!("'{}' holds a list, not a number", e.key))
                }
                _ => {}
            }
            set_keeping_comments(table, last, v);
        }
        Node::Tables(tables) => {
            return Err(match index.filter(|&k| k < tables.len()) {
                Some(_) => format!("'{}' holds a table, not a number", e.key),
                None => out_of_range(i, tables.len()),
            })
        }
        Node::Array(array) => {
            let len = array.len();
            let Some(k) = index.filter(|&k| k < len) else {
                return match e.only_if_present() {
                    true => Ok(false),
                    false => Err(out_of_range(i, len)),
                };
            };
            let old = array.get_mut(k).expect("in range");
            let held = match old {
                toml_edit::Value::Array(_) => Some("a list"),
                toml_edit::Value::InlineTable(_) => Some("a table"),
                _ => None,
            };
            if let Some(held) = held {
                return Err(format!("'{}' holds {held}, not a number", e.key));
            }
            let decor = old.decor().clone();
            *old = toml_edit::Value::from(v);
            *old.decor_mut() = decor;
        }
    }
    Ok(true)
}

pub fn edit(text: &str, edits: &[Edit]) -> Result<Edited, String> {
    let mut doc = parse(text)?;
    let mut written = Vec::new();
    for e in edits {
        if set(&mut doc, e)? {
            written.push((e.key.to_string(), e.value));
        }
    }
    Ok(Edited {
        text: doc.to_string(),
        written,
    })
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

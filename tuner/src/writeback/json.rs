//! JSON through serde_json with its keys in the file's order (`preserve_order`). JSON has no
//! comments to keep; the file is written back with its own indentation (two spaces, four, a
//! tab, or on one line).

use serde_json::{Map, Value};

use super::keys::{child, index, set, Edit, Kind, Node};

/// The file as plain values: itself.
pub fn tree(text: &str) -> Result<Value, String> {
    serde_json::from_str(text).map_err(|e| format!("not valid JSON: {e}"))
}

impl Node for &mut Value {
    const MAP: &'static str = "an object";
    const THROUGH: &'static str = "is a scalar; a key path goes through objects and lists only";

    fn look(&self, seg: &str, _: &str, _: bool) -> Result<Option<Kind>, String> {
        Ok(child(self, seg).map(|v| match v {
            Value::Array(a) => Kind::List(a.len()),
            Value::Object(_) => Kind::Map,
            _ => Kind::Scalar,
        }))
    }

    fn descend(self, seg: &str, _: &str, _: bool) -> Result<Self, String> {
        Ok(match self {
            Value::Object(o) => o.entry(seg).or_insert_with(|| Value::Object(Map::new())),
            v => &mut v[index(seg)],
        })
    }

    fn set(self, seg: &str, value: usize) {
        *self.descend(seg, "", false).expect("JSON takes any key") = Value::from(value);
    }
}

/// The indentation of the file's first indented line; None for a file on one line.
fn indentation(text: &str) -> Option<String> {
    text.trim_end().lines().skip(1).find_map(|l| {
        let pad: String = l.chars().take_while(|c| *c == ' ' || *c == '\t').collect();
        (!pad.is_empty()).then_some(pad)
    })
}

pub fn edit(text: &str, e: &Edit) -> Result<Option<String>, String> {
    let mut root = tree(text)?;
    if !root.is_object() {
        return Err("the file's top level is not an object".into());
    }
    if !set(&mut root, e)? {
        return Ok(None);
    }
    let mut out = match indentation(text) {
        None if !text.trim().contains('\n') => serde_json::to_string(&root),
        pad => {
            let pad = pad.unwrap_or_else(|| "  ".into());
            let mut buf = Vec::new();
            let formatter = serde_json::ser::PrettyFormatter::with_indent(pad.as_bytes());
            let mut ser = serde_json::Serializer::with_formatter(&mut buf, formatter);
            serde::Serialize::serialize(&root, &mut ser)
                .map(|_| String::from_utf8(buf).expect("serde_json writes UTF-8"))
        }
    }
    .map_err(|e| format!("cannot write JSON: {e}"))?;
    if text.ends_with('\n') {
        out.push('\n');
    }
    Ok(Some(out))
}

#[cfg(test)]
mod tests {
    const RUN: &str = r#"{
    "model": {"name": "vit", "depth": 12},
    "data": {
        "workers": 8,
        "batch_size": 64
    },
    "callbacks": [{"name": "early-stop"}],
    "seed": 7
}
"#;

    fn set(text: &str, pairs: &[(&str, usize)]) -> Result<String, String> {
        super::super::tests::edit_pairs(super::super::Format::Json, text, pairs)
    }

    #[test]
    fn keys_keep_their_order_and_the_file_its_indentation() {
        let out = set(RUN, &[("data.batch_size", 744), ("data.accumulation", 2)]).unwrap();
        let want = "{\n    \"model\": {\n        \"name\": \"vit\",\n        \"depth\": 12\n    },\n    \"data\": {\n        \"workers\": 8,\n        \"batch_size\": 744,\n        \"accumulation\": 2\n    },\n    \"callbacks\": [\n        {\n            \"name\": \"early-stop\"\n        }\n    ],\n    \"seed\": 7\n}\n";
        assert_eq!(out, want);
        assert_eq!(
            set("{\"b\": 1, \"a\": 2}", &[("b", 3)]).unwrap(),
            "{\"b\":3,\"a\":2}"
        );
        let out = set("{\n\t\"z\": 1\n}\n", &[("y.x", 2)]).unwrap();
        assert_eq!(out, "{\n\t\"z\": 1,\n\t\"y\": {\n\t\t\"x\": 2\n\t}\n}\n");
    }

    #[test]
    fn a_number_in_the_key_path_indexes_a_list() {
        let out = set(RUN, &[("callbacks.0.patience", 3)]).unwrap();
        assert!(
            out.contains("\"name\": \"early-stop\",\n            \"patience\": 3\n"),
            "{out}"
        );
        let out = set("{\"sizes\": [1, 2]}", &[("sizes.1", 8)]).unwrap();
        assert_eq!(out, "{\"sizes\":[1,8]}");
    }

    #[test]
    fn paths_through_lists_and_scalars_are_refused() {
        let cases = [
            ("callbacks.name", "'callbacks.name' is not in the file"),
            ("callbacks.1.name", "'callbacks' is a list of 1"),
            ("seed.x", "'seed' is a scalar"),
            ("model", "holds an object"),
            ("callbacks", "holds a list"),
        ];
        for (k, says) in cases {
            let e = set(RUN, &[(k, 1)]).unwrap_err();
            assert!(e.contains(says), "{k}: {e}");
        }
        assert!(set("[1]", &[("a", 1)])
            .unwrap_err()
            .contains("not an object"));
        let e = set("{\"a\": ", &[("a", 1)]).unwrap_err();
        assert!(
            e.starts_with("not valid JSON") && e.contains("line 1"),
            "{e}"
        );
    }
}

//! A `.safetensors` reader: an 8-byte little-endian header length, a JSON header mapping each
//! tensor name to `{dtype, shape, data_offsets}` (offsets relative to the end of the header),
//! then the raw little-endian data.

use std::path::Path;

use super::Array;

pub fn read(path: &Path) -> Result<Vec<(String, Array)>, String> {
    let bytes = std::fs::read(path).map_err(|e| format!("{}: cannot read: {e}", path.display()))?;
    parse(&bytes).map_err(|e| format!("{}: {e}", path.display()))
}

fn npy_type(dtype: &str) -> Result<&'static str, String> {
    Ok(match dtype {
        "F32" => "f4",
        "F64" => "f8",
        "I8" => "i1",
        "U8" | "BOOL" => "u1",
        "I16" => "i2",
        "U16" => "u2",
        "I32" => "i4",
        "U32" => "u4",
        "I64" => "i8",
        "U64" => "u8",
        other => {
            return Err(format!(
                "tensor type {other} is not supported (use F32/F64 or integers)"
            ))
        }
    })
}

pub fn parse(bytes: &[u8]) -> Result<Vec<(String, Array)>, String> {
    let len_bytes: [u8; 8] = bytes
        .get(..8)
        .ok_or("not a .safetensors file (shorter than its 8-byte header length)")?
        .try_into()
        .expect("8 bytes");
    let header_len = u64::from_le_bytes(len_bytes);
    let end = 8u64
        .checked_add(header_len)
        .filter(|&e| e <= bytes.len() as u64)
        .ok_or("not a .safetensors file (header length past the end of the file)")?
        as usize;
    let header: serde_json::Value = serde_json::from_slice(&bytes[8..end])
        .map_err(|e| format!("the header is not valid JSON: {e}"))?;
    let map = header
        .as_object()
        .ok_or("the header is not a JSON object")?;
    let data = &bytes[end..];
    let mut out = Vec::new();
    for (name, t) in map {
        if name == "__metadata__" {
            continue;
        }
        let field = |k: &str| {
            t.get(k)
                .ok_or_else(|| format!("tensor '{name}' has no '{k}'"))
        };
        let dtype = field("dtype")?
            .as_str()
            .ok_or_else(|| format!("tensor '{name}': dtype is not a string"))?;
        let shape = field("shape")?
            .as_array()
            .ok_or_else(|| format!("tensor '{name}': shape is not a list"))?
            .iter()
            .map(|d| {
                d.as_u64()
                    .map(|d| d as usize)
                    .ok_or_else(|| format!("tensor '{name}': bad shape"))
            })
            .collect::<Result<Vec<usize>, String>>()?;
        let offsets = field("data_offsets")?
            .as_array()
            .filter(|o| o.len() == 2)
            .and_then(|o| Some((o[0].as_u64()? as usize, o[1].as_u64()? as usize)))
            .ok_or_else(|| format!("tensor '{name}': data_offsets must be [begin, end]"))?;
        let raw = data
            .get(offsets.0..offsets.1)
            .filter(|_| offsets.0 <= offsets.1)
            .ok_or_else(|| {
                format!("tensor '{name}': data_offsets {offsets:?} lie outside the file")
            })?;
        let values = super::npy::decode_all(npy_type(dtype)?, raw)
            .map_err(|e| format!("tensor '{name}': {e}"))?;
        let count: usize = shape.iter().product();
        if values.len() != count {
            return Err(format!(
                "tensor '{name}': shape {shape:?} has {count} elements, its data holds {}",
                values.len()
            ));
        }
        out.push((
            name.clone(),
            Array {
                shape,
                data: values,
            },
        ));
    }
    Ok(out)
}

/// Write tensors as `.safetensors`, for tests and tools: (name, dtype, shape, raw bytes).
pub fn encode(tensors: &[(&str, &str, Vec<usize>, Vec<u8>)]) -> Vec<u8> {
    let mut header = serde_json::Map::new();
    let mut at = 0usize;
    for (name, dtype, shape, raw) in tensors {
        header.insert(
            name.to_string(),
            serde_json::json!({"dtype": dtype, "shape": shape, "data_offsets": [at, at + raw.len()]}),
        );
        at += raw.len();
    }
    let text = serde_json::Value::Object(header).to_string();
    let mut out = (text.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(text.as_bytes());
    for (_, _, _, raw) in tensors {
        out.extend_from_slice(raw);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f32s(v: &[f32]) -> Vec<u8> {
        v.iter().flat_map(|x| x.to_le_bytes()).collect()
    }

    #[test]
    fn reads_what_it_writes() {
        let file = encode(&[
            ("features", "F32", vec![2, 2], f32s(&[1.0, 2.0, 3.0, 4.0])),
            (
                "labels",
                "I64",
                vec![2],
                [1i64, 0].iter().flat_map(|x| x.to_le_bytes()).collect(),
            ),
        ]);
        let t = parse(&file).unwrap();
        let f = &t.iter().find(|(n, _)| n == "features").unwrap().1;
        assert_eq!(f.shape, vec![2, 2]);
        assert_eq!(f.data, vec![1.0, 2.0, 3.0, 4.0]);
        let l = &t.iter().find(|(n, _)| n == "labels").unwrap().1;
        assert_eq!(l.data, vec![1.0, 0.0]);
    }

    #[test]
    fn broken_files_say_why() {
        assert!(parse(b"abc").unwrap_err().contains("not a .safetensors"));
        let mut huge = u64::MAX.to_le_bytes().to_vec();
        huge.extend_from_slice(b"{}");
        assert!(parse(&huge).unwrap_err().contains("past the end"));
        let wrong_shape = encode(&[("features", "F32", vec![3], f32s(&[1.0, 2.0]))]);
        assert!(parse(&wrong_shape).unwrap_err().contains("has 3 elements"));
        let bf16 = encode(&[("x", "BF16", vec![1], vec![0, 0])]);
        assert!(parse(&bf16).unwrap_err().contains("not supported"));
        let mut not_json = 3u64.to_le_bytes().to_vec();
        not_json.extend_from_slice(b"{x}");
        assert!(parse(&not_json).unwrap_err().contains("JSON"));
    }
}

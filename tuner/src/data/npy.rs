//! A `.npy` reader: the magic `\x93NUMPY`, a version, a little header (a Python dict literal
//! with `descr`, `fortran_order`, `shape`), then the raw array. Little-endian integers and
//! floats of the usual sizes, C order; anything else is a clear error.

use std::path::Path;

use super::Array;

/// Read a whole `.npy` file.
pub fn read(path: &Path) -> Result<Array, String> {
    let bytes = std::fs::read(path).map_err(|e| format!("{}: cannot read: {e}", path.display()))?;
    parse(&bytes).map_err(|e| format!("{}: {e}", path.display()))
}

/// Element types the reader understands, from the `descr` string.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Elem {
    F32,
    F64,
    I8,
    U8,
    I16,
    I32,
    I64,
    U16,
    U32,
    U64,
}

impl Elem {
    fn parse(descr: &str) -> Result<Elem, String> {
        let d = descr.trim_start_matches(['<', '|', '=']);
        if descr.starts_with('>') {
            return Err(format!(
                "big-endian arrays ('{descr}') are not supported; save little-endian"
            ));
        }
        Ok(match d {
            "f4" => Elem::F32,
            "f8" => Elem::F64,
            "i1" => Elem::I8,
            "u1" | "b1" => Elem::U8,
            "i2" => Elem::I16,
            "u2" => Elem::U16,
            "i4" => Elem::I32,
            "u4" => Elem::U32,
            "i8" => Elem::I64,
            "u8" => Elem::U64,
            _ => {
                return Err(format!(
                    "element type '{descr}' is not supported (use float32/float64 or integers)"
                ))
            }
        })
    }

    fn size(self) -> usize {
        match self {
            Elem::I8 | Elem::U8 => 1,
            Elem::I16 | Elem::U16 => 2,
            Elem::F32 | Elem::I32 | Elem::U32 => 4,
            Elem::F64 | Elem::I64 | Elem::U64 => 8,
        }
    }

    fn decode(self, b: &[u8]) -> f64 {
        match self {
            Elem::F32 => f32::from_le_bytes(b.try_into().expect("4 bytes")) as f64,
            Elem::F64 => f64::from_le_bytes(b.try_into().expect("8 bytes")),
            Elem::I8 => b[0] as i8 as f64,
            Elem::U8 => b[0] as f64,
            Elem::I16 => i16::from_le_bytes(b.try_into().expect("2 bytes")) as f64,
            Elem::U16 => u16::from_le_bytes(b.try_into().expect("2 bytes")) as f64,
            Elem::I32 => i32::from_le_bytes(b.try_into().expect("4 bytes")) as f64,
            Elem::U32 => u32::from_le_bytes(b.try_into().expect("4 bytes")) as f64,
            Elem::I64 => i64::from_le_bytes(b.try_into().expect("8 bytes")) as f64,
            Elem::U64 => u64::from_le_bytes(b.try_into().expect("8 bytes")) as f64,
        }
    }
}

/// Decode raw little-endian elements of a safetensors/npy type name.
pub(crate) fn decode_all(elem: &str, raw: &[u8]) -> Result<Vec<f64>, String> {
    let e = Elem::parse(elem)?;
    if raw.len() % e.size() != 0 {
        return Err("data length is not a whole number of elements".into());
    }
    Ok(raw.chunks_exact(e.size()).map(|c| e.decode(c)).collect())
}

fn dict_value<'a>(header: &'a str, key: &str) -> Result<&'a str, String> {
    let pat = format!("'{key}':");
    let at = header
        .find(&pat)
        .ok_or_else(|| format!("the header has no '{key}'"))?;
    Ok(header[at + pat.len()..].trim_start())
}

pub fn parse(bytes: &[u8]) -> Result<Array, String> {
    if bytes.len() < 10 || &bytes[..6] != b"\x93NUMPY" {
        return Err("not a .npy file (no \\x93NUMPY magic)".into());
    }
    let major = bytes[6];
    let (header_len, start) = match major {
        1 => (u16::from_le_bytes([bytes[8], bytes[9]]) as usize, 10),
        2 | 3 => {
            if bytes.len() < 12 {
                return Err("truncated header".into());
            }
            (
                u32::from_le_bytes(bytes[8..12].try_into().expect("4 bytes")) as usize,
                12,
            )
        }
        v => return Err(format!(".npy version {v} is not supported")),
    };
    let header = bytes
        .get(start..start + header_len)
        .ok_or("truncated header")?;
    let header = std::str::from_utf8(header).map_err(|_| "the header is not text")?;
    let descr = dict_value(header, "descr")?;
    let descr = descr
        .strip_prefix('\'')
        .and_then(|d| d.split('\'').next())
        .ok_or("cannot read 'descr' (structured arrays are not supported)")?;
    let elem = Elem::parse(descr)?;
    if dict_value(header, "fortran_order")?.starts_with("True") {
        return Err(
            "Fortran-order arrays are not supported; save with np.ascontiguousarray".into(),
        );
    }
    let shape_text = dict_value(header, "shape")?;
    let shape_text = shape_text
        .strip_prefix('(')
        .and_then(|s| s.split(')').next())
        .ok_or("cannot read 'shape'")?;
    let shape = shape_text
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| {
            s.trim_end_matches('L')
                .parse::<usize>()
                .map_err(|_| format!("bad dimension '{s}' in shape"))
        })
        .collect::<Result<Vec<usize>, String>>()?;
    let count = shape
        .iter()
        .try_fold(1usize, |a, &d| a.checked_mul(d))
        .ok_or("the shape is too large")?;
    let data = &bytes[start + header_len..];
    let expected = count
        .checked_mul(elem.size())
        .ok_or("the shape is too large")?;
    if data.len() != expected {
        return Err(format!(
            "shape {shape:?} of {descr} needs {expected} bytes of data, the file has {}",
            data.len()
        ));
    }
    Ok(Array {
        shape,
        data: data
            .chunks_exact(elem.size())
            .map(|c| elem.decode(c))
            .collect(),
    })
}

/// Write a C-order little-endian `.npy` (version 1), for tests and tools.
pub fn encode(descr: &str, shape: &[usize], raw: &[u8]) -> Vec<u8> {
    let dims: Vec<String> = shape.iter().map(|d| d.to_string()).collect();
    let shape_text = if dims.len() == 1 {
        format!("({},)", dims[0])
    } else {
        format!("({})", dims.join(", "))
    };
    let mut header =
        format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape_text}, }}");
    while (10 + header.len() + 1) % 64 != 0 {
        header.push(' ');
    }
    header.push('\n');
    let mut out = b"\x93NUMPY\x01\x00".to_vec();
    out.extend_from_slice(&(header.len() as u16).to_le_bytes());
    out.extend_from_slice(header.as_bytes());
    out.extend_from_slice(raw);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f32_bytes(v: &[f32]) -> Vec<u8> {
        v.iter().flat_map(|x| x.to_le_bytes()).collect()
    }

    #[test]
    fn reads_what_it_writes() {
        let file = encode("<f4", &[2, 3], &f32_bytes(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.5]));
        let a = parse(&file).unwrap();
        assert_eq!(a.shape, vec![2, 3]);
        assert_eq!(a.data, vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.5]);
        let labels = encode(
            "<i8",
            &[3],
            &[1i64, 0, 2]
                .iter()
                .flat_map(|x| x.to_le_bytes())
                .collect::<Vec<u8>>(),
        );
        let l = parse(&labels).unwrap();
        assert_eq!(l.shape, vec![3]);
        assert_eq!(l.data, vec![1.0, 0.0, 2.0]);
    }

    #[test]
    fn reads_a_header_numpy_wrote() {
        // The exact header np.save writes for np.zeros((2, 2), np.float32), padded to 64 bytes.
        let mut file =
            b"\x93NUMPY\x01\x00v\x00{'descr': '<f4', 'fortran_order': False, 'shape': (2, 2), }"
                .to_vec();
        while file.len() < 127 {
            file.push(b' ');
        }
        file.push(b'\n');
        file.extend_from_slice(&[0u8; 16]);
        let a = parse(&file).unwrap();
        assert_eq!(a.shape, vec![2, 2]);
    }

    #[test]
    fn wrong_files_say_why() {
        assert!(parse(b"hello world!").unwrap_err().contains("magic"));
        let short = encode("<f4", &[2, 3], &f32_bytes(&[1.0; 5]));
        assert!(parse(&short).unwrap_err().contains("needs 24 bytes"));
        let big = encode(">f4", &[1], &[0; 4]);
        assert!(parse(&big).unwrap_err().contains("big-endian"));
        let complex = encode("<c8", &[1], &[0; 8]);
        assert!(parse(&complex).unwrap_err().contains("not supported"));
        let fortran = encode("<f4", &[1], &[0; 4]);
        let at = fortran.windows(5).position(|w| w == b"False").unwrap();
        let mut fortran = fortran;
        fortran[at..at + 5].copy_from_slice(b"True ");
        assert!(parse(&fortran).unwrap_err().contains("Fortran"));
    }

    #[test]
    fn a_missing_file_names_itself() {
        let e = read(Path::new("/nonexistent/f.npy")).unwrap_err();
        assert!(e.contains("/nonexistent/f.npy") && e.contains("cannot read"));
    }
}

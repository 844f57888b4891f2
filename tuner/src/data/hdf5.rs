//! `.h5` data through the HDF5 C library (the `hdf5` cargo feature): the datasets named
//! `features` and `labels` (or `x` and `y`) at the file's root, read as float64.

use std::path::Path;

use super::Array;

pub fn read(path: &Path) -> Result<Vec<(String, Array)>, String> {
    let what = path.display().to_string();
    let file = hdf5::File::open(path).map_err(|e| format!("{what}: cannot open as HDF5: {e}"))?;
    let names = file
        .member_names()
        .map_err(|e| format!("{what}: cannot list the datasets: {e}"))?;
    let mut out = Vec::new();
    for name in names {
        if !["features", "labels", "x", "y", "X", "Y"].contains(&name.as_str()) {
            continue;
        }
        let ds = file
            .dataset(&name)
            .map_err(|e| format!("{what}: '{name}' is not a dataset: {e}"))?;
        let shape = ds.shape();
        let data: Vec<f64> = ds
            .read_raw::<f64>()
            .map_err(|e| format!("{what}: cannot read '{name}' as numbers: {e}"))?;
        out.push((name, Array { shape, data }));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_features_and_labels_it_wrote() {
        let path = std::env::temp_dir().join(format!("tuner-h5-{}.h5", std::process::id()));
        {
            let f = hdf5::File::create(&path).unwrap();
            let x: Vec<f32> = (0..6).map(|v| v as f32).collect();
            f.new_dataset::<f32>()
                .shape([3, 2])
                .create("features")
                .unwrap()
                .write_raw(&x)
                .unwrap();
            f.new_dataset::<i64>()
                .shape([3])
                .create("labels")
                .unwrap()
                .write_raw(&[0i64, 1, 0])
                .unwrap();
        }
        let d = crate::data::Dataset::from_file(&path, None, 2).unwrap();
        assert_eq!(d.input, 2);
        assert_eq!(d.labels, vec![0, 1, 0]);
        let _ = std::fs::remove_file(&path);
        let e = read(Path::new("/nonexistent.h5")).unwrap_err();
        assert!(e.contains("cannot open"));
    }
}

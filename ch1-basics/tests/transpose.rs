//! The transpose pair on the CPU: its variants, their kernels and their grids.

use ch1_basics::transpose::TransposeVariant;

#[test]
fn the_baseline_comes_first_and_the_tiled_family_is_the_rest_but_the_unpadded_tile() {
    let baseline = TransposeVariant::Naive;
    assert_eq!(TransposeVariant::ALL[0], baseline);
    let mut tiled = TransposeVariant::TILED.iter();
    assert!(tiled.all(|v| TransposeVariant::ALL.contains(v) && *v != baseline));
    assert!(!TransposeVariant::TILED.contains(&TransposeVariant::Tiled32Unpadded));
    let mut names: Vec<&str> = TransposeVariant::ALL.iter().map(|v| v.name()).collect();
    names.sort();
    names.dedup();
    assert_eq!(names.len(), TransposeVariant::ALL.len());
    let source = include_str!("../kernels/transpose.cu");
    for v in TransposeVariant::ALL {
        assert!(source.contains(&format!("void {}(", v.kernel())), "{v:?}");
    }
}

#[test]
fn every_grid_covers_the_matrix() {
    for side in [1u32, 31, 33, 1000, 8192] {
        for v in TransposeVariant::ALL {
            let cfg = v.launch_config(side);
            // Each kernel's tile, columns x rows, as transpose.cu defines it.
            let cols = match v {
                TransposeVariant::Tiled32x64 | TransposeVariant::Tiled64 => 64,
                _ => 32,
            };
            let rows = match v {
                TransposeVariant::Naive => 8,
                TransposeVariant::Tiled64 => 64,
                _ => 32,
            };
            assert!(cfg.grid_dim.0 * cols >= side, "{} side {side}", v.name());
            assert!(cfg.grid_dim.1 * rows >= side, "{} side {side}", v.name());
        }
    }
}

//! The crate's modules import each other in no loop.

#[test]
fn modules_import_each_other_in_no_loop() {
    common::testing::assert_no_import_cycles(env!("CARGO_MANIFEST_DIR"));
}

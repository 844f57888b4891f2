//! The crate's modules import each other in no loop, and in chains no more than six deep.

#[test]
fn modules_import_each_other_in_no_loop() {
    common::testing::assert_no_import_cycles(env!("CARGO_MANIFEST_DIR"));
}

#[test]
fn no_chain_of_imports_is_more_than_six_modules_deep() {
    common::testing::assert_import_depth(env!("CARGO_MANIFEST_DIR"), 6);
}

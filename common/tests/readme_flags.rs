//! The README's table of the flags every lesson binary shares is the flag set of `CommonArgs`,
//! which every lesson binary (and compare) flattens into its own: a flag added, renamed or
//! dropped on one side and not the other fails here.

use clap::{Args, Command};

fn readme_flags() -> Vec<String> {
    common::testing::readme_shared_flags()
        .into_iter()
        .map(|(flag, _)| flag)
        .collect()
}

fn common_args_flags() -> Vec<String> {
    let cmd = common::cli::CommonArgs::augment_args(Command::new("lesson"));
    let mut flags: Vec<String> = cmd
        .get_arguments()
        .filter(|a| !a.is_hide_set())
        .filter_map(|a| a.get_long().map(str::to_string))
        .collect();
    flags.sort();
    flags
}

#[test]
fn the_readme_lists_exactly_the_shared_flags() {
    let readme = readme_flags();
    assert!(readme.len() >= 8, "read the table: {readme:?}");
    assert_eq!(readme, common_args_flags());
}

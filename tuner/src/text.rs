//! A file's text, read with a one-line error, and the line a place in it is on.

use std::path::Path;

/// The text of the file at `path`, `what` naming it where it cannot be read ("the config").
pub fn read_text(path: &Path, what: &str) -> Result<String, String> {
    std::fs::read_to_string(path)
        .map_err(|e| format!("{}: cannot read {what}: {e}", path.display()))
}

/// The line (from 1) that byte `at` of `text` is on; 1 for a byte past its end.
pub fn line_of(text: &str, at: usize) -> usize {
    text.get(..at)
        .map_or(1, |before| before.matches('\n').count() + 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_from_one_and_a_missing_file_in_one_line() {
        let text = "a = 1\nb = [\nc";
        let lines: Vec<usize> = [0, 5, 6, 12, text.len(), 99]
            .map(|at| line_of(text, at))
            .into();
        assert_eq!(lines, [1, 1, 2, 3, 3, 1]);
        let e = read_text(Path::new("/nonexistent/run.toml"), "the config").unwrap_err();
        assert!(
            e.starts_with("/nonexistent/run.toml: cannot read the config: "),
            "{e}"
        );
        assert_eq!(e.lines().count(), 1, "{e}");
    }
}

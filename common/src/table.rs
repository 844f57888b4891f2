//! The one table printer: every table the project prints (a lesson's variants, a sweep's grid,
//! the compare, the tuner's trials) is a [Table] rendered as markdown, and the same value goes
//! into JSON. Also the number formats tables share.

use serde::{Deserialize, Serialize};

/// What an empty cell shows.
pub const EMPTY: &str = "-";

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Align {
    Left,
    Right,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Column {
    pub name: String,
    pub align: Align,
}

/// A table: named columns and rows of already formatted cells.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Table {
    pub columns: Vec<Column>,
    pub rows: Vec<Vec<String>>,
}

impl Table {
    pub fn new() -> Table {
        Table::default()
    }

    /// Add a left-aligned column (names, labels).
    pub fn left(mut self, name: impl Into<String>) -> Table {
        self.columns.push(Column {
            name: name.into(),
            align: Align::Left,
        });
        self
    }

    /// Add a right-aligned column (numbers).
    pub fn right(mut self, name: impl Into<String>) -> Table {
        self.columns.push(Column {
            name: name.into(),
            align: Align::Right,
        });
        self
    }

    /// Append a row; missing cells are shown empty, extra cells are an error in the caller.
    pub fn row(&mut self, cells: Vec<String>) {
        assert!(
            cells.len() <= self.columns.len(),
            "a row of {} cells in a table of {} columns",
            cells.len(),
            self.columns.len()
        );
        let mut cells = cells;
        cells.resize(self.columns.len(), EMPTY.to_string());
        self.rows.push(cells);
    }

    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// Remove the columns named in `optional` whose every cell is empty.
    pub fn drop_empty(&mut self, optional: &[&str]) {
        let keep: Vec<bool> = self
            .columns
            .iter()
            .enumerate()
            .map(|(i, c)| {
                !optional.contains(&c.name.as_str()) || self.rows.iter().any(|r| r[i] != EMPTY)
            })
            .collect();
        let mut i = 0;
        self.columns.retain(|_| {
            i += 1;
            keep[i - 1]
        });
        for row in &mut self.rows {
            let mut i = 0;
            row.retain(|_| {
                i += 1;
                keep[i - 1]
            });
        }
    }

    /// GitHub-flavoured markdown: a header row, the alignment row, one line per row.
    pub fn markdown(&self) -> String {
        let line = |cells: &mut dyn Iterator<Item = &str>| {
            let mut s = String::from("|");
            for c in cells {
                s.push(' ');
                s.push_str(c);
                s.push_str(" |");
            }
            s.push('\n');
            s
        };
        let mut out = line(&mut self.columns.iter().map(|c| c.name.as_str()));
        out.push('|');
        for c in &self.columns {
            out.push_str(match c.align {
                Align::Left => "---|",
                Align::Right => "---:|",
            });
        }
        out.push('\n');
        for row in &self.rows {
            out.push_str(&line(&mut row.iter().map(String::as_str)));
        }
        out
    }
}

/// `Some(value)` formatted, or the empty cell.
pub fn cell<T>(value: Option<T>, format: impl Fn(T) -> String) -> String {
    value.map(format).unwrap_or_else(|| EMPTY.to_string())
}

/// Milliseconds with a unit that keeps three significant figures.
pub fn format_ms(ms: f64) -> String {
    if ms >= 1000.0 {
        format!("{:.3} s", ms / 1000.0)
    } else if ms >= 1.0 {
        format!("{ms:.3} ms")
    } else {
        format!("{:.2} us", ms * 1000.0)
    }
}

/// A value with three significant figures: 1234, 12.3, 1.23, 0.123.
pub fn three_figures(v: f64) -> String {
    let a = v.abs();
    if a >= 100.0 {
        format!("{v:.0}")
    } else if a >= 10.0 {
        format!("{v:.1}")
    } else if a >= 1.0 {
        format!("{v:.2}")
    } else {
        format!("{v:.3}")
    }
}

/// A fraction as a percentage with one decimal: 0.974 -> "97.4%".
pub fn percent(fraction: f64) -> String {
    format!("{:.1}%", fraction * 100.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markdown_has_header_alignment_and_rows() {
        let mut t = Table::new().left("size \\ count").right("8").right("1024");
        t.row(vec!["16".into(), "10.0x".into()]);
        assert_eq!(
            t.markdown(),
            "| size \\ count | 8 | 1024 |\n|---|---:|---:|\n| 16 | 10.0x | - |\n"
        );
    }

    #[test]
    fn optional_columns_that_are_all_empty_are_dropped() {
        let mut t = Table::new().left("a").right("b").right("c");
        t.row(vec!["x".into(), EMPTY.into(), "1".into()]);
        t.row(vec!["y".into(), EMPTY.into(), EMPTY.into()]);
        t.drop_empty(&["b", "c"]);
        assert_eq!(t.columns.len(), 2);
        assert_eq!(t.rows[0], vec!["x", "1"]);
        // A column not named optional stays even when empty.
        let mut t = Table::new().left("a").right("b");
        t.row(vec!["x".into()]);
        t.drop_empty(&[]);
        assert_eq!(t.columns.len(), 2);
    }

    #[test]
    #[should_panic(expected = "a row of 3 cells in a table of 2 columns")]
    fn too_many_cells_is_a_bug() {
        let mut t = Table::new().left("a").right("b");
        t.row(vec!["1".into(), "2".into(), "3".into()]);
    }

    #[test]
    fn number_formats() {
        assert_eq!(format_ms(0.0123), "12.30 us");
        assert_eq!(format_ms(1.5), "1.500 ms");
        assert_eq!(format_ms(2500.0), "2.500 s");
        assert_eq!(three_figures(1234.4), "1234");
        assert_eq!(three_figures(12.345), "12.3");
        assert_eq!(three_figures(1.2345), "1.23");
        assert_eq!(three_figures(0.12345), "0.123");
        assert_eq!(three_figures(-12.345), "-12.3");
        assert_eq!(percent(0.9744), "97.4%");
        assert_eq!(cell(Some(2.0), |v| format!("{v}x")), "2x");
        assert_eq!(cell(None::<f64>, |v| format!("{v}x")), "-");
    }
}

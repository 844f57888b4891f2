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

    /// GitHub-flavoured markdown: a header row, the alignment row (`---:` for right-aligned
    /// columns), one line per row, every column padded to its widest cell so that the table
    /// reads as a table in a terminal and renders as one anywhere markdown does.
    pub fn markdown(&self) -> String {
        use tabled::grid::config::Offset;
        use tabled::settings::object::Columns;
        use tabled::settings::style::LineChar;
        use tabled::settings::{Alignment, Style};

        if self.columns.is_empty() {
            return String::new();
        }
        let mut builder = tabled::builder::Builder::new();
        builder.push_record(self.columns.iter().map(|c| markdown_cell(&c.name)));
        for row in &self.rows {
            builder.push_record(row.iter().map(|c| markdown_cell(c)));
        }
        let mut table = builder.build();
        table.with(Style::markdown());
        for (i, column) in self.columns.iter().enumerate() {
            if column.align == Align::Right {
                table.modify(Columns::one(i), Alignment::right());
                // The alignment row is the top line of the first row under the header.
                table.modify((1, i), LineChar::horizontal(':', Offset::End(0)));
            }
        }
        let mut out = table.to_string();
        out.push('\n');
        out
    }
}

/// A table's columns as data: each one's name, alignment and the cell a row shows in it, so
/// that a table of rows is its list of columns, with nothing written out row by row.
pub struct Columns<'a, R> {
    columns: Vec<(Column, CellOf<'a, R>)>,
    /// The columns left out of a table where no row has a cell in them.
    optional: Vec<String>,
}

/// How a column shows a row.
type CellOf<'a, R> = Box<dyn Fn(&R) -> String + 'a>;

impl<'a, R> Columns<'a, R> {
    pub fn new() -> Self {
        Columns {
            columns: Vec::new(),
            optional: Vec::new(),
        }
    }

    /// Add a left-aligned column whose cell of a row is `cell(row)`.
    pub fn left(self, name: impl Into<String>, cell: impl Fn(&R) -> String + 'a) -> Self {
        self.column(name.into(), Align::Left, cell)
    }

    /// Add a right-aligned column whose cell of a row is `cell(row)`.
    pub fn right(self, name: impl Into<String>, cell: impl Fn(&R) -> String + 'a) -> Self {
        self.column(name.into(), Align::Right, cell)
    }

    /// [Columns::left], for a column left out where no row has a cell in it.
    pub fn left_if_any(self, name: impl Into<String>, cell: impl Fn(&R) -> String + 'a) -> Self {
        self.optional(name.into(), Align::Left, cell)
    }

    /// [Columns::right], for a column left out where no row has a cell in it.
    pub fn right_if_any(self, name: impl Into<String>, cell: impl Fn(&R) -> String + 'a) -> Self {
        self.optional(name.into(), Align::Right, cell)
    }

    fn optional(mut self, name: String, align: Align, cell: impl Fn(&R) -> String + 'a) -> Self {
        self.optional.push(name.clone());
        self.column(name, align, cell)
    }

    fn column(mut self, name: String, align: Align, cell: impl Fn(&R) -> String + 'a) -> Self {
        self.columns.push((Column { name, align }, Box::new(cell)));
        self
    }

    /// The table of `rows`: a row each, a cell per column, less the optional columns no row
    /// has a cell in.
    pub fn table<T: std::borrow::Borrow<R>>(&self, rows: impl IntoIterator<Item = T>) -> Table {
        let mut table = Table {
            columns: self.columns.iter().map(|(c, _)| c.clone()).collect(),
            rows: (rows.into_iter())
                .map(|r| {
                    self.columns
                        .iter()
                        .map(|(_, cell)| cell(r.borrow()))
                        .collect()
                })
                .collect(),
        };
        let optional: Vec<&str> = self.optional.iter().map(String::as_str).collect();
        table.drop_empty(&optional);
        table
    }
}

impl<R> Default for Columns<'_, R> {
    fn default() -> Self {
        Columns::new()
    }
}

/// A cell as markdown keeps it on one line of its table: a `|` escaped, line breaks as spaces.
fn markdown_cell(text: &str) -> String {
    text.replace('|', "\\|").replace(['\r', '\n'], " ")
}

/// `markdown` with the padding taken out of every table line (`| a | b |`), for tests that
/// look for a row by its cells; other lines are kept as they are.
pub fn unpadded(markdown: &str) -> String {
    let mut out = String::with_capacity(markdown.len());
    for line in markdown.split_inclusive('\n') {
        let (body, end) = match line.strip_suffix('\n') {
            Some(body) => (body, "\n"),
            None => (line, ""),
        };
        let trimmed = body.trim_end();
        if trimmed.len() > 1 && trimmed.starts_with('|') && trimmed.ends_with('|') {
            let cells = cells_of(&trimmed[1..trimmed.len() - 1]);
            let is_alignment = cells
                .iter()
                .all(|c| !c.is_empty() && c.trim_matches(':').chars().all(|ch| ch == '-'));
            out.push('|');
            for c in cells {
                out.push_str(&match (is_alignment, c.ends_with(':')) {
                    (true, true) => "---:|".to_string(),
                    (true, false) => "---|".to_string(),
                    (false, _) => format!(" {c} |"),
                });
            }
        } else {
            out.push_str(body);
        }
        out.push_str(end);
    }
    out
}

/// The cells between a table line's outer bars, trimmed; an escaped `\\|` stays in its cell.
fn cells_of(inner: &str) -> Vec<&str> {
    let mut cells = Vec::new();
    let mut start = 0;
    for (i, _) in inner.match_indices('|') {
        if !inner[..i].ends_with('\\') {
            cells.push(inner[start..i].trim());
            start = i + 1;
        }
    }
    cells.push(inner[start..].trim());
    cells
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
        t.row(vec!["2048".into(), "1.5x".into(), "0.98x".into()]);
        assert_eq!(
            t.markdown(),
            "| size \\ count |     8 |  1024 |\n\
             |--------------|------:|------:|\n\
             | 16           | 10.0x |     - |\n\
             | 2048         |  1.5x | 0.98x |\n"
        );
        assert_eq!(
            unpadded(&t.markdown()),
            "| size \\ count | 8 | 1024 |\n|---|---:|---:|\n| 16 | 10.0x | - |\n| 2048 | 1.5x | 0.98x |\n"
        );
    }

    #[test]
    fn columns_as_data_make_the_same_table_as_rows_by_hand() {
        let rows = [("a", 1.5), ("bb", 10.0)];
        let by_hand = {
            let mut t = Table::new().left("name").right("x").right("2x");
            for (n, x) in rows {
                t.row(vec![n.into(), format!("{x:.1}"), format!("{:.1}", 2.0 * x)]);
            }
            t
        };
        let columns = Columns::<(&str, f64)>::new()
            .left("name", |r| r.0.to_string())
            .right("x", |r| format!("{:.1}", r.1))
            .right("2x", |r| format!("{:.1}", 2.0 * r.1));
        assert_eq!(columns.table(rows), by_hand);
        assert_eq!(columns.table(rows.iter()), by_hand, "rows borrowed");
        let header = Table::new().left("name").right("x").right("2x");
        assert_eq!(columns.table(Vec::<(&str, f64)>::new()), header, "no rows");
        // An optional column is left out where every cell is empty, and kept where one is not.
        let maybe = |r: &(&str, f64)| cell(Some(r.1).filter(|&x| x > 5.0), |x| x.to_string());
        let columns = columns
            .right_if_any("big", maybe)
            .left_if_any("none", |_| EMPTY.into());
        let mut kept = Table::new()
            .left("name")
            .right("x")
            .right("2x")
            .right("big");
        kept.row(vec!["a".into(), "1.5".into(), "3.0".into(), EMPTY.into()]);
        kept.row(vec!["bb".into(), "10.0".into(), "20.0".into(), "10".into()]);
        assert_eq!(columns.table(rows), kept, "'none' left out, 'big' kept");
    }

    /// What a GitHub-flavoured markdown reader needs of a table: every line between outer bars
    /// with as many cells as the header, and an alignment row of dashes and colons.
    fn assert_valid_markdown(md: &str, columns: usize) {
        let lines: Vec<&str> = md.lines().collect();
        assert!(lines.len() >= 2, "{md}");
        for line in &lines {
            assert!(line.starts_with("| ") || line.starts_with("|-"), "{line}");
            assert!(
                line.ends_with(" |") || line.ends_with("-|") || line.ends_with(":|"),
                "{line}"
            );
            assert_eq!(cells_of(&line[1..line.len() - 1]).len(), columns, "{line}");
        }
        for cell in cells_of(&lines[1][1..lines[1].len() - 1]) {
            assert!(cell.contains('-'), "{md}");
            assert!(cell.trim_matches(':').chars().all(|c| c == '-'), "{md}");
        }
        // Padded: every line as wide as the header (in characters, for µ and the like).
        let width = lines[0].chars().count();
        assert!(lines.iter().all(|l| l.chars().count() == width), "{md}");
    }

    #[test]
    fn padded_tables_stay_valid_markdown() {
        let mut t = Table::new().left("kernel").right("time").right("share");
        t.row(vec!["a | b".into(), "1.5 µs".into(), "97.4%".into()]);
        t.row(vec!["two\nlines".into(), "12.000 ms".into()]);
        t.row(vec!["x".into()]);
        let md = t.markdown();
        assert_valid_markdown(&md, 3);
        assert!(
            md.contains("| a \\| b    |"),
            "a bar in a cell is escaped: {md}"
        );
        assert!(md.contains("| two lines |"), "{md}");
        assert_eq!(md.lines().nth(1), Some("|-----------|----------:|------:|"));
        let rows = unpadded(&md);
        assert!(rows.contains("| a \\| b | 1.5 µs | 97.4% |"), "{rows}");
        assert!(rows.contains("| x | - | - |"), "{rows}");
        // A table of one narrow column still has dashes in its alignment row.
        let mut narrow = Table::new().right("n");
        narrow.row(vec!["1".into()]);
        assert_valid_markdown(&narrow.markdown(), 1);
        assert_eq!(Table::new().markdown(), "");
    }

    #[test]
    fn unpadded_keeps_other_lines() {
        let text = "title\n\n|  a | b  |\n|---:|:---|\n|  1 | 2  |\nafter | not a row";
        assert_eq!(
            unpadded(text),
            "title\n\n| a | b |\n|---:|---|\n| 1 | 2 |\nafter | not a row"
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

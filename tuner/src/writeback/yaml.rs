//! A small editor for YAML's block mappings, the shape of Hydra and LightningCLI configs.
//!
//! No YAML crate keeps comments through a round trip, so the answer is written the way a person
//! would: the key is found by its indentation, the scalar on its line is replaced, and every
//! other byte stays (comments, blank lines, quoting, key order). A missing key is added as a
//! line at its mapping's indentation. What the editor cannot change without guessing it refuses
//! in one line: a path through a list or a scalar, flow style (`{a: 1}`, `[1, 2]`), anchors,
//! aliases and tags, block scalars and values over several lines, several documents. The whole
//! file is read first, so indentation that YAML itself would reject is refused too; after an
//! edit the file is read again and the key must give back the value written.

use super::keys::{Edit, Edited, KeyPath};

/// What a key holds.
#[derive(Debug)]
enum Value {
    /// Nothing after the colon and nothing nested below: null, to be filled in.
    Empty,
    /// A scalar on the key's own line: its byte range in that line.
    Scalar {
        start: usize,
        end: usize,
    },
    Mapping(Mapping),
    Sequence,
    /// Something the editor leaves alone, said as "a flow-style collection" and the like.
    Refused(String),
}

#[derive(Debug)]
struct Entry {
    key: String,
    /// The key's line and the byte just after its colon.
    line: usize,
    colon: usize,
    value: Value,
    /// The last line that belongs to the entry (its value's lines included).
    last: usize,
}

#[derive(Debug)]
struct Mapping {
    indent: usize,
    entries: Vec<Entry>,
}

impl Mapping {
    fn get(&self, key: &str) -> Option<&Entry> {
        self.entries.iter().find(|e| e.key == key)
    }
}

/// The file as lines, with what is needed to write it back byte for byte.
struct Lines {
    lines: Vec<String>,
    newline: &'static str,
    ends_with_newline: bool,
}

impl Lines {
    fn of(text: &str) -> Lines {
        let newline = if text.contains("\r\n") { "\r\n" } else { "\n" };
        let ends_with_newline = text.is_empty() || text.ends_with('\n');
        let body = text.strip_suffix('\n').unwrap_or(text);
        let lines = if text.is_empty() {
            Vec::new()
        } else {
            body.split('\n')
                .map(|l| l.strip_suffix('\r').unwrap_or(l).to_string())
                .collect()
        };
        Lines {
            lines,
            newline,
            ends_with_newline,
        }
    }

    fn text(&self) -> String {
        let mut t = self.lines.join(self.newline);
        if self.ends_with_newline && !self.lines.is_empty() {
            t.push_str(self.newline);
        }
        t
    }
}

struct Document {
    root: Mapping,
    /// Where a new top-level key goes: after this many lines.
    root_end: usize,
    /// The indentation step of nested mappings (2 where the file has none).
    step: usize,
}

fn indent_of(line: &str) -> usize {
    line.len() - line.trim_start_matches(' ').len()
}

fn is_content(line: &str) -> bool {
    let t = line.trim_start();
    !t.is_empty() && !t.starts_with('#')
}

fn is_marker(line: &str, marker: &str) -> bool {
    line == marker
        || line
            .strip_prefix(marker)
            .is_some_and(|r| r.starts_with([' ', '\t']))
}

fn is_item(t: &str) -> bool {
    t == "-" || t.starts_with("- ") || t.starts_with("-\t")
}

/// Where a comment starts in `t` (a `#` at the start or after a space), outside quotes.
fn comment_start(t: &str) -> Option<usize> {
    let mut quote: Option<char> = None;
    let mut prev = ' ';
    for (i, c) in t.char_indices() {
        match quote {
            Some(q) if c == q => quote = None,
            Some(_) => {}
            None if c == '#' && (prev == ' ' || prev == '\t') => return Some(i),
            None if (c == '"' || c == '\'') && (prev == ' ' || prev == '\t' || i == 0) => {
                quote = Some(c)
            }
            None => {}
        }
        prev = c;
    }
    None
}

/// The end of the quoted scalar that starts `t`, past its closing quote.
fn quoted_end(t: &str) -> Option<usize> {
    let q = t.chars().next()?;
    let mut chars = t.char_indices().skip(1).peekable();
    while let Some((i, c)) = chars.next() {
        if q == '"' && c == '\\' {
            chars.next();
        } else if c == q {
            if q == '\'' && chars.peek().is_some_and(|(_, n)| *n == '\'') {
                chars.next();
            } else {
                return Some(i + 1);
            }
        }
    }
    None
}

/// The key of a `key: ...` line (`t` starts at its indentation) and the byte after its colon;
/// None when the line is not one.
fn key_of(t: &str) -> Option<(String, usize)> {
    let (key, rest_at) = match t.chars().next()? {
        '"' | '\'' => {
            let end = quoted_end(t)?;
            let inner = &t[1..end - 1];
            let key = if t.starts_with('"') {
                serde_json::from_str::<String>(&t[..end]).unwrap_or_else(|_| inner.to_string())
            } else {
                inner.replace("''", "'")
            };
            let gap = t[end..].len() - t[end..].trim_start_matches([' ', '\t']).len();
            (key, end + gap)
        }
        '[' | '{' | '&' | '*' | '!' | '|' | '>' | '%' | '@' | '`' | '#' | '?' => return None,
        _ => {
            let stop = comment_start(t).unwrap_or(t.len());
            let colon = t[..stop]
                .char_indices()
                .find(|&(i, c)| {
                    c == ':'
                        && t[i + 1..]
                            .chars()
                            .next()
                            .is_none_or(|n| n == ' ' || n == '\t')
                })?
                .0;
            (t[..colon].trim_end().to_string(), colon)
        }
    };
    let after = t[rest_at..].strip_prefix(':')?;
    if !(after.is_empty() || after.starts_with([' ', '\t'])) || key.is_empty() {
        return None;
    }
    Some((key, rest_at + 1))
}

struct Parser<'a> {
    lines: &'a [String],
}

impl Parser<'_> {
    /// The next line at or after `from` that holds something.
    fn next_content(&self, from: usize) -> Option<usize> {
        (from..self.lines.len()).find(|&i| is_content(&self.lines[i]))
    }

    fn check_indentation(&self, i: usize) -> Result<(), String> {
        let line = &self.lines[i];
        if line[indent_of(line)..].starts_with('\t') {
            return Err(format!(
                "line {}: a tab in the indentation (YAML indents with spaces)",
                i + 1
            ));
        }
        Ok(())
    }

    fn document(&self) -> Result<Document, String> {
        let mut i = 0;
        let mut started = false;
        // Directives and one `---` may open the document.
        while let Some(j) = self.next_content(i) {
            let line = &self.lines[j];
            if !started && line.starts_with('%') {
                i = j + 1;
            } else if !started && is_marker(line, "---") {
                if is_content(line[3..].trim_start()) {
                    return Err(format!(
                        "line {}: content on the `---` line; this editor reads block mappings only",
                        j + 1
                    ));
                }
                started = true;
                i = j + 1;
            } else {
                break;
            }
        }
        let root = match self.next_content(i) {
            None => Mapping {
                indent: 0,
                entries: Vec::new(),
            },
            Some(j) => {
                self.check_indentation(j)?;
                let t = self.lines[j].trim_start();
                if is_item(t) {
                    return Err(
                        "the file's top level is a list; a key path goes through mappings only"
                            .into(),
                    );
                }
                if t.starts_with(['{', '[']) {
                    return Err("the file is in flow style ({...}); this editor changes block mappings only".into());
                }
                let (m, next) = self.mapping(j, indent_of(&self.lines[j]))?;
                i = next;
                m
            }
        };
        let mut root_end = root.entries.last().map(|e| e.last + 1);
        if let Some(j) = self.next_content(i) {
            let line = &self.lines[j];
            if is_marker(line, "---") {
                return Err(format!(
                    "line {}: a second YAML document; write into a file of one",
                    j + 1
                ));
            }
            if !is_marker(line, "...") {
                return Err(format!(
                    "line {}: indented less than the top-level keys",
                    j + 1
                ));
            }
            if let Some(k) = self.next_content(j + 1) {
                return Err(format!(
                    "line {}: a second YAML document; write into a file of one",
                    k + 1
                ));
            }
            root_end = root_end.or(Some(j));
        }
        let step = step_of(&root).unwrap_or(2);
        Ok(Document {
            root,
            root_end: root_end.unwrap_or(self.lines.len()),
            step,
        })
    }

    /// The mapping whose keys stand at `indent`, from line `from`; and the line after it.
    fn mapping(&self, from: usize, indent: usize) -> Result<(Mapping, usize), String> {
        let mut entries: Vec<Entry> = Vec::new();
        let mut i = from;
        while let Some(j) = self.next_content(i) {
            let line = &self.lines[j];
            if indent == 0 && (is_marker(line, "---") || is_marker(line, "...")) {
                break;
            }
            self.check_indentation(j)?;
            let at = indent_of(line);
            if at < indent {
                break;
            }
            if at > indent {
                return Err(format!(
                    "line {}: indented more than the keys above it",
                    j + 1
                ));
            }
            let t = &line[at..];
            if is_item(t) {
                return Err(format!(
                    "line {}: a list item among a mapping's keys",
                    j + 1
                ));
            }
            let Some((key, colon)) = key_of(t) else {
                return Err(format!("line {}: not a `key: value` line", j + 1));
            };
            if entries.iter().any(|e| e.key == key) {
                return Err(format!(
                    "line {}: '{key}' appears twice in one mapping",
                    j + 1
                ));
            }
            let (value, last) = self.value(j, at, at + colon)?;
            entries.push(Entry {
                key,
                line: j,
                colon: at + colon,
                value,
                last,
            });
            i = last + 1;
        }
        Ok((Mapping { indent, entries }, i))
    }

    /// The last content line from `from` on that is indented more than `indent` (or, with
    /// `items`, a list item at `indent`), else `before`.
    fn block_end(&self, from: usize, indent: usize, items: bool, before: usize) -> usize {
        let mut last = before;
        let mut i = from;
        while let Some(j) = self.next_content(i) {
            let line = &self.lines[j];
            let at = indent_of(line);
            let item_here = items && at == indent && is_item(&line[at..]);
            if at <= indent && !item_here {
                break;
            }
            if at == 0 && (is_marker(line, "---") || is_marker(line, "...")) {
                break;
            }
            last = j;
            i = j + 1;
        }
        last
    }

    /// What the key on line `j` (indented `indent`, its colon ending at `colon`) holds, and its
    /// last line.
    fn value(&self, j: usize, indent: usize, colon: usize) -> Result<(Value, usize), String> {
        let line = &self.lines[j];
        let rest = &line[colon..];
        let s = rest.trim_start_matches([' ', '\t']);
        let start = colon + (rest.len() - s.len());
        let refused = |what: &str, last: usize| Ok((Value::Refused(what.to_string()), last));
        if s.is_empty() || s.starts_with('#') {
            let Some(m) = self.next_content(j + 1) else {
                return Ok((Value::Empty, j));
            };
            let next = &self.lines[m];
            let at = indent_of(next);
            if at == indent && is_item(&next[at..]) {
                return Ok((Value::Sequence, self.block_end(m, indent, true, j)));
            }
            if at <= indent || (indent == 0 && is_marker(next, "---")) {
                return Ok((Value::Empty, j));
            }
            self.check_indentation(m)?;
            if is_item(&next[at..]) {
                return Ok((Value::Sequence, self.block_end(m, indent, false, j)));
            }
            if key_of(&next[at..]).is_none() {
                return refused(
                    "a value on the lines below its key",
                    self.block_end(m, indent, false, j),
                );
            }
            let (mapping, after) = self.mapping(m, at)?;
            let last = mapping.entries.last().map_or(j, |e| e.last);
            if let Some(k) = self.next_content(after) {
                if indent_of(&self.lines[k]) > indent {
                    return Err(format!(
                        "line {}: indented less than the keys of its mapping but more than their parent",
                        k + 1
                    ));
                }
            }
            return Ok((Value::Mapping(mapping), last));
        }
        let nested = |from: usize| self.block_end(from, indent, true, j);
        match s.chars().next().unwrap_or(' ') {
            '&' => {
                return refused(
                    "anchored (&): editing it would change every alias of it",
                    nested(j + 1),
                )
            }
            '*' => return refused("an alias (*) of a value written elsewhere", j),
            '!' => return refused("tagged (!)", nested(j + 1)),
            '|' | '>' => return refused("a block scalar (| or >)", nested(j + 1)),
            '[' | '{' => {
                let last = self.flow_end(j, start)?;
                return refused("in flow style ([...] or {...})", last);
            }
            '"' | '\'' => {
                let Some(len) = quoted_end(s) else {
                    let last = self.quote_end(j, start)?;
                    return refused("a quoted value over several lines", last);
                };
                let after = s[len..].trim_start_matches([' ', '\t']);
                if !(after.is_empty() || after.starts_with('#')) {
                    return Err(format!("line {}: text after a quoted value", j + 1));
                }
                return self.scalar(j, indent, start, start + len);
            }
            _ => {}
        }
        let end = start + comment_start(s).unwrap_or(s.len());
        let end = start + line[start..end].trim_end().len();
        if line[start..end].contains(": ") {
            return Err(format!(
                "line {}: a second `: ` in one line (a nested mapping goes on lines of its own)",
                j + 1
            ));
        }
        self.scalar(j, indent, start, end)
    }

    /// A scalar on line `j` at `start..end`; lines indented below it continue it.
    fn scalar(
        &self,
        j: usize,
        indent: usize,
        start: usize,
        end: usize,
    ) -> Result<(Value, usize), String> {
        let last = self.block_end(j + 1, indent, false, j);
        if last == j {
            return Ok((Value::Scalar { start, end }, j));
        }
        for k in j + 1..=last {
            let line = &self.lines[k];
            if is_content(line) && key_of(line.trim_start()).is_some() {
                return Err(format!(
                    "line {}: a key indented under a key whose value is already given",
                    k + 1
                ));
            }
        }
        Ok((Value::Refused("a value over several lines".into()), last))
    }

    /// The line where the flow collection opening at line `j`, byte `start`, closes.
    fn flow_end(&self, j: usize, start: usize) -> Result<usize, String> {
        let mut depth = 0i32;
        for (k, line) in self.lines.iter().enumerate().skip(j) {
            let from = if k == j { start } else { 0 };
            let text = &line[from..];
            let text = &text[..comment_start(text).unwrap_or(text.len())];
            let mut quote: Option<char> = None;
            for c in text.chars() {
                match (quote, c) {
                    (Some(q), c) if c == q => quote = None,
                    (Some(_), _) => {}
                    (None, '"' | '\'') => quote = Some(c),
                    (None, '[' | '{') => depth += 1,
                    (None, ']' | '}') => depth -= 1,
                    _ => {}
                }
            }
            if depth <= 0 {
                return Ok(k);
            }
        }
        Err(format!("line {}: a bracket that never closes", j + 1))
    }

    /// The line where the quoted scalar opening at line `j`, byte `start`, closes.
    fn quote_end(&self, j: usize, start: usize) -> Result<usize, String> {
        let mut text = self.lines[j][start..].to_string();
        for k in j + 1..self.lines.len() {
            text.push('\n');
            text.push_str(&self.lines[k]);
            if quoted_end(&text).is_some() {
                return Ok(k);
            }
        }
        Err(format!("line {}: a quote that never closes", j + 1))
    }
}

/// The smallest step from a mapping's indentation to its children's.
fn step_of(m: &Mapping) -> Option<usize> {
    m.entries
        .iter()
        .filter_map(|e| match &e.value {
            Value::Mapping(c) => {
                let here = c.indent.checked_sub(m.indent).filter(|s| *s > 0);
                [here, step_of(c)].into_iter().flatten().min()
            }
            _ => None,
        })
        .min()
}

fn parse(lines: &[String]) -> Result<Document, String> {
    Parser { lines }.document()
}

/// A key as YAML writes it: plain where that reads back the same, else double-quoted.
fn key_text(key: &str) -> String {
    let plain = key
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    if plain {
        key.to_string()
    } else {
        serde_json::to_string(key).unwrap_or_else(|_| format!("\"{key}\""))
    }
}

/// What one edit changes.
enum Change {
    Replace {
        line: usize,
        start: usize,
        end: usize,
    },
    Fill {
        line: usize,
        colon: usize,
    },
    Add {
        after: usize,
        indent: usize,
        keys: Vec<String>,
    },
    Nothing,
}

/// How `key` is reached in `doc`: the change that sets it, or why it cannot be set.
fn plan(doc: &Document, key: &KeyPath, only_if_present: bool) -> Result<Change, String> {
    let segments = key.segments();
    let mut map = &doc.root;
    let mut after = doc.root_end;
    let mut indent = doc.root.indent;
    for (i, seg) in segments.iter().enumerate() {
        let here = key.prefix(i + 1);
        let last = i + 1 == segments.len();
        let Some(e) = map.get(seg) else {
            if only_if_present {
                return Ok(Change::Nothing);
            }
            return Ok(Change::Add {
                after,
                indent,
                keys: segments[i..].to_vec(),
            });
        };
        match (&e.value, last) {
            (Value::Scalar { start, end }, true) => {
                return Ok(Change::Replace {
                    line: e.line,
                    start: *start,
                    end: *end,
                })
            }
            (Value::Empty, true) => {
                return Ok(Change::Fill {
                    line: e.line,
                    colon: e.colon,
                })
            }
            (Value::Empty, false) => {
                if only_if_present {
                    return Ok(Change::Nothing);
                }
                return Ok(Change::Add {
                    after: e.line + 1,
                    indent: map.indent + doc.step,
                    keys: segments[i + 1..].to_vec(),
                });
            }
            (Value::Mapping(m), false) => {
                map = m;
                after = e.last + 1;
                indent = m.indent;
            }
            (Value::Mapping(_), true) => {
                return Err(format!("'{here}' holds a mapping, not a number"))
            }
            (Value::Sequence, _) => {
                return Err(format!(
                    "'{here}' is a list; a key path goes through mappings only"
                ))
            }
            (Value::Scalar { .. }, false) => {
                return Err(format!(
                    "'{here}' is a scalar, not a mapping; the key path cannot go through it"
                ))
            }
            (Value::Refused(what), _) => {
                return Err(format!(
                    "'{here}' is {what}, which this editor leaves alone; write it as a plain block mapping or value"
                ))
            }
        }
    }
    Ok(Change::Nothing)
}

fn apply(lines: &mut Lines, change: &Change, value: &str, step: usize) {
    match change {
        Change::Replace { line, start, end } => {
            let l = &lines.lines[*line];
            lines.lines[*line] = format!("{}{value}{}", &l[..*start], &l[*end..]);
        }
        Change::Fill { line, colon } => {
            let l = &lines.lines[*line];
            lines.lines[*line] = format!("{} {value}{}", &l[..*colon], &l[*colon..]);
        }
        Change::Add {
            after,
            indent,
            keys,
        } => {
            let new: Vec<String> = keys
                .iter()
                .enumerate()
                .map(|(d, k)| {
                    let pad = " ".repeat(indent + d * step);
                    if d + 1 == keys.len() {
                        format!("{pad}{}: {value}", key_text(k))
                    } else {
                        format!("{pad}{}:", key_text(k))
                    }
                })
                .collect();
            let at = (*after).min(lines.lines.len());
            lines.lines.splice(at..at, new);
        }
        Change::Nothing => {}
    }
}

/// The scalar text `key` holds in `text`, where it holds one.
fn read(lines: &[String], key: &KeyPath) -> Result<Option<String>, String> {
    let doc = parse(lines)?;
    Ok(match plan(&doc, key, true)? {
        Change::Replace { line, start, end } => Some(lines[line][start..end].to_string()),
        _ => None,
    })
}

pub fn edit(text: &str, edits: &[Edit]) -> Result<Edited, String> {
    let mut lines = Lines::of(text);
    let mut written = Vec::new();
    for e in edits {
        let doc = parse(&lines.lines)?;
        let change = plan(&doc, e.key, e.only_if_present)?;
        if matches!(change, Change::Nothing) {
            continue;
        }
        let value = e.value.to_string();
        apply(&mut lines, &change, &value, doc.step);
        // Read back: the file still parses and the key gives the value.
        let back = read(&lines.lines, e.key).map_err(|err| {
            format!("the edited file would not read back ({err}); left as it was")
        })?;
        if back.as_deref() != Some(value.as_str()) {
            return Err(format!(
                "'{}' would not read back as {value} after the edit; left as it was",
                e.key
            ));
        }
        written.push((e.key.to_string(), e.value));
    }
    Ok(Edited {
        text: lines.text(),
        written,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(s: &str) -> KeyPath {
        KeyPath::parse(s).unwrap()
    }

    fn set(text: &str, pairs: &[(&str, usize)]) -> Result<String, String> {
        super::super::edit_pairs(super::super::Format::Yaml, text, pairs)
    }

    /// A Hydra-style config: nested mappings, comments everywhere, a list, quoting.
    const HYDRA: &str = "\
# @package _global_
defaults:
  - model: resnet18
  - _self_

seed: 7

training:
  # tuned by hand
  batch_size: 64    # per GPU
  accumulation: 2
  optimizer:
    name: sgd
    lr: 0.1 # linear rule
  schedule: 'cosine'

data:
  root: /data/imagenet
  workers: 8
";

    #[test]
    fn a_nested_scalar_is_replaced_and_every_other_byte_kept() {
        let out = set(
            HYDRA,
            &[("training.batch_size", 744), ("training.accumulation", 1)],
        )
        .unwrap();
        let want = HYDRA
            .replace(
                "batch_size: 64    # per GPU",
                "batch_size: 744    # per GPU",
            )
            .replace("accumulation: 2", "accumulation: 1");
        assert_eq!(out, want);
        let out = set(HYDRA, &[("training.optimizer.lr", 3)]).unwrap();
        assert!(out.contains("    lr: 3 # linear rule\n"), "{out}");
        assert_eq!(
            set(HYDRA, &[("seed", 9)]).unwrap(),
            HYDRA.replace("seed: 7", "seed: 9")
        );
    }

    #[test]
    fn missing_keys_are_added_at_their_mapping_s_indentation() {
        let out = set(HYDRA, &[("training.accumulation_steps", 4)]).unwrap();
        assert!(
            out.contains("  schedule: 'cosine'\n  accumulation_steps: 4\n\ndata:"),
            "{out}"
        );
        let out = set(HYDRA, &[("training.optimizer.momentum", 9)]).unwrap();
        assert!(
            out.contains("    lr: 0.1 # linear rule\n    momentum: 9\n"),
            "{out}"
        );
        let out = set(HYDRA, &[("trainer.limits.batch_size", 32)]).unwrap();
        assert!(
            out.ends_with("  workers: 8\ntrainer:\n  limits:\n    batch_size: 32\n"),
            "{out}"
        );
        let out = set(
            "model:\n    name: vit\ntrainer:\n",
            &[("trainer.batch_size", 16)],
        )
        .unwrap();
        assert_eq!(out, "model:\n    name: vit\ntrainer:\n    batch_size: 16\n");
        let out = set("# only a comment\n", &[("batch_size", 16)]).unwrap();
        assert_eq!(out, "# only a comment\nbatch_size: 16\n");
        assert_eq!(set("", &[("a.b", 1)]).unwrap(), "a:\n  b: 1\n");
        let out = set("a: 1", &[("b", 2)]).unwrap();
        assert_eq!(out, "a: 1\nb: 2", "no newline added at the end");
        let out = set("x: 1\r\ny:\r\n  z: 2\r\n", &[("y.w", 3)]).unwrap();
        assert_eq!(out, "x: 1\r\ny:\r\n  z: 2\r\n  w: 3\r\n");
    }

    #[test]
    fn empty_values_quoted_keys_and_document_markers() {
        let out = set(
            "training:\n  batch_size:   # fill me\n",
            &[("training.batch_size", 8)],
        )
        .unwrap();
        assert_eq!(out, "training:\n  batch_size: 8   # fill me\n");
        let out = set(
            "\"data loader\":\n  'batch size': 4 # ok\n",
            &[("data loader.batch size", 5)],
        );
        assert_eq!(out.unwrap(), "\"data loader\":\n  'batch size': 5 # ok\n");
        let out = set("'my key': 4\n", &[("my key", 5)]).unwrap();
        assert_eq!(out, "'my key': 5\n");
        let out = set("%YAML 1.2\n---\na: \"1\"\n...\n", &[("a", 2)]).unwrap();
        assert_eq!(out, "%YAML 1.2\n---\na: 2\n...\n");
        let out = set("url: http://x:80/a # where\n", &[("url", 1)]).unwrap();
        assert_eq!(out, "url: 1 # where\n");
        let out = set("a:\n- 1\n- 2\nb: 3\n", &[("b", 4)]).unwrap();
        assert_eq!(out, "a:\n- 1\n- 2\nb: 4\n");
    }

    #[test]
    fn what_it_cannot_change_cleanly_is_refused_in_one_line() {
        let cases: [(&str, &str, &str); 12] = [
            (HYDRA, "defaults.model", "'defaults' is a list"),
            ("a:\n- 1\n", "a.b", "'a' is a list"),
            (HYDRA, "seed.x", "'seed' is a scalar"),
            (HYDRA, "training", "holds a mapping"),
            ("a: {b: 1}\n", "a.b", "flow style"),
            ("a: [1,\n  2]\n", "a", "flow style"),
            ("base: &b\n  lr: 1\n", "base.lr", "anchored"),
            ("a: *b\n", "a", "an alias"),
            ("a: !!int 3\n", "a", "tagged"),
            ("a: |\n  text\n", "a", "block scalar"),
            ("a: one\n  two\n", "a", "over several lines"),
            ("a:\n  text only\n", "a", "on the lines below"),
        ];
        for (text, k, says) in cases {
            let e = set(text, &[(k, 1)]).unwrap_err();
            assert!(e.contains(says), "{k} in {text:?}: {e}");
            assert_eq!(e.lines().count(), 1, "{e}");
        }
    }

    #[test]
    fn malformed_files_are_refused_with_the_line() {
        let cases: [(&str, &str); 12] = [
            ("a:\n  b: 1\n c: 2\n", "line 3"),
            ("a: 1\n  b: 2\n", "line 2: a key indented under"),
            ("a:\n  b: 1\n    c: 2\n", "line 3: a key indented under"),
            ("a:\n  b:\n    c: 2\n   d: 1\n", "line 4: indented less"),
            ("a: 1\na: 2\n", "appears twice"),
            ("a:\n\tb: 1\n", "a tab"),
            ("just text\n", "not a `key: value` line"),
            ("a: 1\n---\nb: 2\n", "second YAML document"),
            ("- 1\n- 2\n", "top level is a list"),
            ("{a: 1}\n", "flow style"),
            ("a: \"open\n", "never closes"),
            ("a: b: c\n", "second `: `"),
        ];
        for (text, says) in cases {
            let e = set(text, &[("z", 1)]).unwrap_err();
            assert!(e.contains(says), "{text:?}: {e}");
        }
    }

    /// A LightningCLI config: lists of mappings on the way, class paths, a null.
    const LIGHTNING: &str = "\
# lightning.pytorch==2.6
seed_everything: 42
trainer:
  accelerator: gpu
  callbacks:
    - class_path: lightning.pytorch.callbacks.ModelCheckpoint
      init_args:
        monitor: val_loss
    - EarlyStopping
  logger: null
data:
  class_path: mydata.DataModule
  init_args:
    batch_size: 32 # per device
    num_workers: 4
";

    #[test]
    fn a_lightning_config_past_lists_of_mappings() {
        let out = set(LIGHTNING, &[("data.init_args.batch_size", 96)]).unwrap();
        assert_eq!(
            out,
            LIGHTNING.replace("batch_size: 32 # per device", "batch_size: 96 # per device")
        );
        let out = set(LIGHTNING, &[("trainer.logger", 1)]).unwrap();
        assert!(out.contains("  logger: 1\ndata:"), "{out}");
        let out = set(LIGHTNING, &[("trainer.accumulate_grad_batches", 4)]).unwrap();
        assert!(
            out.contains("  logger: null\n  accumulate_grad_batches: 4\ndata:"),
            "{out}"
        );
        let e = set(LIGHTNING, &[("trainer.callbacks.init_args", 1)]).unwrap_err();
        assert!(e.contains("'trainer.callbacks' is a list"), "{e}");
        // An item out of line with its list is YAML's error too.
        let bad = LIGHTNING.replace("    - EarlyStopping", "  - EarlyStopping");
        let e = set(&bad, &[("seed_everything", 1)]).unwrap_err();
        assert!(
            e.contains("line 9: a list item among a mapping's keys"),
            "{e}"
        );
        let e = set(LIGHTNING, &[("trainer.logger.x", 1)]).unwrap_err();
        assert!(e.contains("'trainer.logger' is a scalar"), "{e}");
    }

    #[test]
    fn a_key_only_if_present_is_left_out_when_missing() {
        let k = key("training.accumulation_steps");
        let edits = [Edit {
            key: &k,
            value: 4,
            only_if_present: true,
        }];
        let e = edit(HYDRA, &edits).unwrap();
        assert_eq!((e.text.as_str(), e.written.len()), (HYDRA, 0));
        let e = edit("training:\n  accumulation_steps: 1\n", &edits).unwrap();
        assert_eq!(e.text, "training:\n  accumulation_steps: 4\n");
        assert_eq!(e.written, [("training.accumulation_steps".to_string(), 4)]);
    }
}

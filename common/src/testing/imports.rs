//! Modules that import each other in a loop, found by reading a crate's source: each file under
//! `src/` is a module (`a.rs` and `a/mod.rs` are `crate::a`), and a module depends on another
//! when it names it through a path: `use crate::a::X`, `super::b::f()`, or a child by its bare
//! name. The crate root is no node (it declares every module, and what it re-exports is reached
//! through the module that defines it), binaries under `src/bin/` and `main.rs` beside a
//! `lib.rs` are crates of their own, and `#[cfg(test)]` code is left out: tests may reach
//! anywhere.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// A module path below the crate root: `["page", "charts"]` is `crate::page::charts`.
type Module = Vec<String>;

/// Every loop among the modules under `crate_dir/src`, each as its modules in order, the
/// first repeated at the end ("crate::a -> crate::b -> crate::a"). Empty when there is none.
pub fn import_cycles(crate_dir: &Path) -> Result<Vec<String>, String> {
    let src = crate_dir.join("src");
    let files = module_files(&src)?;
    let known: BTreeSet<Module> = files.keys().cloned().collect();
    let mut edges: BTreeMap<Module, BTreeSet<Module>> = BTreeMap::new();
    for (module, file) in &files {
        let text = std::fs::read_to_string(file)
            .map_err(|e| format!("{}: cannot read: {e}", file.display()))?;
        let targets = dependencies(module, &lex(&text), &known);
        edges.insert(module.clone(), targets);
    }
    Ok(cycles(&edges).iter().map(|c| describe(c)).collect())
}

/// The longest chain of imports among the crate's modules, from the module that starts it
/// ("crate::main -> crate::cli -> crate::config"). The binary `main.rs` beside a `lib.rs` counts
/// here as `crate::main`, its paths through the library's name (`tuner::cli`) as the crate's:
/// it is the top of the tower a reader climbs down. Empty for a crate of one module; an error
/// where modules import each other in a loop (no chain is longest there).
pub fn longest_import_chain(crate_dir: &Path) -> Result<Vec<String>, String> {
    let src = crate_dir.join("src");
    let mut files = module_files(&src)?;
    let main = src.join("main.rs");
    let library = src.join("lib.rs").is_file() && main.is_file();
    if library {
        files.insert(vec!["main".to_string()], main);
    }
    let name = library_name(crate_dir);
    let known: BTreeSet<Module> = files.keys().cloned().collect();
    let mut edges: BTreeMap<Module, BTreeSet<Module>> = BTreeMap::new();
    for (module, file) in &files {
        let text = std::fs::read_to_string(file)
            .map_err(|e| format!("{}: cannot read: {e}", file.display()))?;
        let mut tokens = lex(&text);
        if library && module == &["main".to_string()] {
            for t in &mut tokens {
                if matches!(t, Token::Ident(w) if Some(w.as_str()) == name.as_deref()) {
                    *t = Token::Ident("crate".into());
                }
            }
        }
        edges.insert(module.clone(), dependencies(module, &tokens, &known));
    }
    if let Some(c) = cycles(&edges).first() {
        return Err(format!(
            "modules import each other in a loop: {}",
            describe(c)
        ));
    }
    // The longest path from each module, by depth-first search over a graph with no loop.
    fn from(
        m: &Module,
        edges: &BTreeMap<Module, BTreeSet<Module>>,
        memo: &mut BTreeMap<Module, Vec<Module>>,
    ) -> Vec<Module> {
        if let Some(p) = memo.get(m) {
            return p.clone();
        }
        let mut best: Vec<Module> = Vec::new();
        for next in edges.get(m).into_iter().flatten() {
            let p = from(next, edges, memo);
            if p.len() > best.len() {
                best = p;
            }
        }
        best.insert(0, m.clone());
        memo.insert(m.clone(), best.clone());
        best
    }
    let mut memo = BTreeMap::new();
    let mut longest: Vec<Module> = Vec::new();
    for m in edges.keys() {
        let p = from(m, &edges, &mut memo);
        if p.len() > longest.len() {
            longest = p;
        }
    }
    if longest.len() < 2 {
        return Ok(Vec::new());
    }
    Ok(longest
        .iter()
        .map(|m| format!("crate::{}", m.join("::")))
        .collect())
}

/// Fail the calling test where the longest chain of imports among the crate's modules
/// ([longest_import_chain]) is more than `most` modules deep, naming it.
pub fn assert_import_depth(crate_dir: impl AsRef<Path>, most: usize) {
    let dir = crate_dir.as_ref();
    match longest_import_chain(dir) {
        Ok(chain) if chain.len() <= most => {}
        Ok(chain) => panic!(
            "{}: a chain of {} modules imports each other, more than {most} (let a lower module \
             take what it needs as a value, or merge what two layers share):\n  {}",
            dir.display(),
            chain.len(),
            chain.join(" -> ")
        ),
        Err(e) => panic!("{}: {e}", dir.display()),
    }
}

/// The library's name as its binaries write it (`my-crate` is `my_crate`): the package's,
/// from Cargo.toml.
fn library_name(crate_dir: &Path) -> Option<String> {
    let text = std::fs::read_to_string(crate_dir.join("Cargo.toml")).ok()?;
    let line = text
        .lines()
        .map(str::trim)
        .find(|l| l.starts_with("name") && l.contains('='))?;
    let name = line.split_once('=')?.1.trim().trim_matches('"');
    Some(name.replace('-', "_"))
}

/// Fail the calling test, naming every loop, when the modules of the crate at `crate_dir`
/// import each other in a loop. Call it with `env!("CARGO_MANIFEST_DIR")`.
pub fn assert_no_import_cycles(crate_dir: impl AsRef<Path>) {
    let dir = crate_dir.as_ref();
    match import_cycles(dir) {
        Ok(found) if found.is_empty() => {}
        Ok(found) => panic!(
            "{}: modules import each other in a loop (move what both need into a module of its \
             own, or pass it in):\n  {}",
            dir.display(),
            found.join("\n  ")
        ),
        Err(e) => panic!("{e}"),
    }
}

fn describe(cycle: &[Module]) -> String {
    let name = |m: &Module| format!("crate::{}", m.join("::"));
    let mut names: Vec<String> = cycle.iter().map(name).collect();
    names.push(name(&cycle[0]));
    names.join(" -> ")
}

/// The crate's library modules and their files.
fn module_files(src: &Path) -> Result<BTreeMap<Module, PathBuf>, String> {
    let mut out = BTreeMap::new();
    let has_lib = src.join("lib.rs").is_file();
    let mut stack = vec![(src.to_path_buf(), Vec::<String>::new())];
    while let Some((dir, prefix)) = stack.pop() {
        let entries =
            std::fs::read_dir(&dir).map_err(|e| format!("{}: cannot read: {e}", dir.display()))?;
        for entry in entries {
            let path = entry
                .map_err(|e| format!("{}: cannot read: {e}", dir.display()))?
                .path();
            let Some(name) = path
                .file_name()
                .and_then(|n| n.to_str())
                .map(str::to_string)
            else {
                continue;
            };
            if path.is_dir() {
                if !(prefix.is_empty() && name == "bin") {
                    let mut p = prefix.clone();
                    p.push(name);
                    stack.push((path, p));
                }
                continue;
            }
            let Some(stem) = name.strip_suffix(".rs") else {
                continue;
            };
            let module = match stem {
                "lib" if prefix.is_empty() => continue,
                "main" if prefix.is_empty() => {
                    if has_lib {
                        continue;
                    }
                    prefix.clone()
                }
                "mod" => prefix.clone(),
                _ => {
                    let mut p = prefix.clone();
                    p.push(stem.to_string());
                    p
                }
            };
            if !module.is_empty() {
                out.insert(module, path);
            }
        }
    }
    Ok(out)
}

#[derive(Debug, Clone, PartialEq)]
enum Token {
    Ident(String),
    PathSep,
    Punct(char),
}

/// Rust source as identifiers, `::` and punctuation, with comments, strings, characters and
/// lifetimes removed.
fn lex(text: &str) -> Vec<Token> {
    let c: Vec<char> = text.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    let ident_char = |ch: char| ch.is_alphanumeric() || ch == '_';
    while i < c.len() {
        let ch = c[i];
        let next = c.get(i + 1).copied();
        if ch.is_whitespace() {
            i += 1;
        } else if ch == '/' && next == Some('/') {
            while i < c.len() && c[i] != '\n' {
                i += 1;
            }
        } else if ch == '/' && next == Some('*') {
            let mut depth = 0;
            while i < c.len() {
                if c[i] == '/' && c.get(i + 1) == Some(&'*') {
                    depth += 1;
                    i += 2;
                } else if c[i] == '*' && c.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
        } else if ch == '"' {
            i = skip_string(&c, i + 1, 0);
        } else if ch == '\'' {
            if next == Some('\\') {
                i += 2;
                while i < c.len() && c[i] != '\'' {
                    i += 1;
                }
                i += 1;
            } else if c.get(i + 2) == Some(&'\'') {
                i += 3;
            } else {
                i += 1;
                while i < c.len() && ident_char(c[i]) {
                    i += 1;
                }
            }
        } else if ident_char(ch) {
            let start = i;
            while i < c.len() && ident_char(c[i]) {
                i += 1;
            }
            let word: String = c[start..i].iter().collect();
            // r"..", r#".."#, br#".."#: a raw string, not an identifier.
            if word == "r" || word == "br" {
                let hashes = c[i..].iter().take_while(|&&h| h == '#').count();
                if c.get(i + hashes) == Some(&'"') {
                    i = skip_string(&c, i + hashes + 1, hashes);
                    continue;
                }
            }
            out.push(Token::Ident(word));
        } else if ch == ':' && next == Some(':') {
            out.push(Token::PathSep);
            i += 2;
        } else {
            out.push(Token::Punct(ch));
            i += 1;
        }
    }
    out
}

/// The index after a string's closing quote; `hashes` > 0 for a raw string (no escapes).
fn skip_string(c: &[char], mut i: usize, hashes: usize) -> usize {
    while i < c.len() {
        if hashes == 0 && c[i] == '\\' {
            i += 2;
        } else if c[i] == '"'
            && c[i + 1..]
                .iter()
                .take(hashes)
                .filter(|&&h| h == '#')
                .count()
                == hashes
        {
            return i + 1 + hashes;
        } else {
            i += 1;
        }
    }
    i
}

fn ident(t: Option<&Token>) -> Option<&str> {
    match t {
        Some(Token::Ident(s)) => Some(s),
        _ => None,
    }
}

/// The modules `module` (the file's) names outside its tests.
fn dependencies(module: &Module, tokens: &[Token], known: &BTreeSet<Module>) -> BTreeSet<Module> {
    let mut out = BTreeSet::new();
    // Inline modules open here: (name, brace depth inside it, cfg(test)).
    let mut inline: Vec<(String, usize, bool)> = Vec::new();
    let mut depth = 0;
    let mut test_attribute = false;
    let mut i = 0;
    while i < tokens.len() {
        let in_test = inline.last().is_some_and(|m| m.2);
        let here = || -> Module {
            let mut m = module.clone();
            m.extend(inline.iter().map(|(n, _, _)| n.clone()));
            m
        };
        match &tokens[i] {
            Token::Punct('#') => {
                // An attribute: note whether it is cfg(test), and skip it.
                let mut j = i + 1;
                if tokens.get(j) == Some(&Token::Punct('!')) {
                    j += 1;
                }
                if tokens.get(j) != Some(&Token::Punct('[')) {
                    i += 1;
                    continue;
                }
                let (mut level, start) = (0, j);
                while j < tokens.len() {
                    match tokens[j] {
                        Token::Punct('[') => level += 1,
                        Token::Punct(']') => {
                            level -= 1;
                            if level == 0 {
                                break;
                            }
                        }
                        _ => {}
                    }
                    j += 1;
                }
                let words: Vec<&str> = tokens[start..j]
                    .iter()
                    .filter_map(|t| ident(Some(t)))
                    .collect();
                if words == ["cfg", "test"] {
                    test_attribute = true;
                }
                i = j + 1;
                continue;
            }
            Token::Punct('{') => {
                depth += 1;
                test_attribute = false;
            }
            Token::Punct('}') => {
                if inline.last().is_some_and(|m| m.1 == depth) {
                    inline.pop();
                }
                depth = depth.saturating_sub(1);
            }
            Token::Punct(';') => test_attribute = false,
            Token::Ident(w) if w == "mod" => {
                if let (Some(name), Some(Token::Punct('{'))) =
                    (ident(tokens.get(i + 1)), tokens.get(i + 2))
                {
                    depth += 1;
                    inline.push((name.to_string(), depth, in_test || test_attribute));
                    test_attribute = false;
                    i += 3;
                    continue;
                }
            }
            Token::Ident(w) if w == "use" => {
                let end = tokens[i..]
                    .iter()
                    .position(|t| *t == Token::Punct(';'))
                    .map_or(tokens.len(), |p| i + p);
                if !in_test && !test_attribute {
                    let mut paths = Vec::new();
                    use_tree(&tokens[i + 1..end], Vec::new(), &mut paths);
                    for p in paths {
                        out.extend(resolve(&here(), module, &p, known));
                    }
                }
                test_attribute = false;
                i = end + 1;
                continue;
            }
            Token::Ident(first) if tokens.get(i + 1) == Some(&Token::PathSep) => {
                let starts_path = i == 0 || tokens[i - 1] != Token::PathSep;
                let mut j = i;
                let mut path = vec![first.clone()];
                while tokens.get(j + 1) == Some(&Token::PathSep) {
                    match ident(tokens.get(j + 2)) {
                        Some(s) => path.push(s.to_string()),
                        None => break,
                    }
                    j += 2;
                }
                if starts_path && !in_test {
                    out.extend(resolve(&here(), module, &path, known));
                }
                i = j + 1;
                continue;
            }
            _ => {}
        }
        i += 1;
    }
    out.remove(module);
    out
}

/// The paths of a use tree (`a::{b, c::D}` is `a::b` and `a::c::D`); aliases dropped.
fn use_tree(tokens: &[Token], prefix: Vec<String>, out: &mut Vec<Vec<String>>) {
    let mut path = prefix;
    let mut i = 0;
    if tokens.first() == Some(&Token::PathSep) {
        return; // ::extern_crate
    }
    while i < tokens.len() {
        match &tokens[i] {
            Token::Ident(w) if w == "as" => break,
            Token::Ident(w) if w == "self" && !path.is_empty() => {}
            Token::Ident(w) => path.push(w.clone()),
            Token::Punct('{') => {
                let mut level = 0;
                let mut start = i + 1;
                for j in i..tokens.len() {
                    match tokens[j] {
                        Token::Punct('{') => level += 1,
                        Token::Punct('}') => {
                            level -= 1;
                            if level == 0 {
                                use_tree(&tokens[start..j], path.clone(), out);
                                return;
                            }
                        }
                        Token::Punct(',') if level == 1 => {
                            use_tree(&tokens[start..j], path.clone(), out);
                            start = j + 1;
                        }
                        _ => {}
                    }
                }
                return;
            }
            _ => {}
        }
        i += 1;
    }
    if !path.is_empty() {
        out.push(path);
    }
}

/// The module a path names from `here` (inline modules included), as the file module that holds
/// it; None for another crate, the crate root, or `file` itself.
fn resolve(
    here: &Module,
    file: &Module,
    path: &[String],
    known: &BTreeSet<Module>,
) -> Option<Module> {
    let (mut base, rest) = match path.first().map(String::as_str) {
        Some("crate") => (Vec::new(), &path[1..]),
        Some("self") => (here.clone(), &path[1..]),
        Some("super") => {
            let supers = path.iter().take_while(|s| *s == "super").count();
            let mut base = here.clone();
            for _ in 0..supers {
                base.pop()?;
            }
            (base, &path[supers..])
        }
        Some(child) => {
            let mut m = here.clone();
            m.push(child.to_string());
            if !known.contains(&m) {
                return None;
            }
            (here.clone(), path)
        }
        None => return None,
    };
    base.extend(rest.iter().cloned());
    let target = (1..=base.len())
        .rev()
        .map(|n| base[..n].to_vec())
        .find(|m| known.contains(m))?;
    (target != *file).then_some(target)
}

/// One loop per strongly connected group of modules (Tarjan), each from its first module.
fn cycles(edges: &BTreeMap<Module, BTreeSet<Module>>) -> Vec<Vec<Module>> {
    let nodes: Vec<&Module> = edges.keys().collect();
    let index_of = |m: &Module| nodes.iter().position(|n| *n == m);
    let adjacency: Vec<Vec<usize>> = nodes
        .iter()
        .map(|n| edges[*n].iter().filter_map(index_of).collect())
        .collect();
    let mut found = Vec::new();
    for group in strongly_connected(&adjacency) {
        if group.len() < 2 {
            continue;
        }
        // A loop through the group: walk from its first module inside the group until back.
        let start = *group.iter().min().unwrap();
        let mut path = vec![start];
        let mut seen = BTreeSet::from([start]);
        let mut at = start;
        loop {
            let next = adjacency[at]
                .iter()
                .copied()
                .filter(|n| group.contains(n))
                .find(|n| *n == start || !seen.contains(n))
                .or_else(|| adjacency[at].iter().copied().find(|n| group.contains(n)));
            match next {
                Some(n) if n == start => break,
                Some(n) if seen.contains(&n) => {
                    // Closed a loop that does not pass through the start: report it from n.
                    let from = path.iter().position(|p| *p == n).unwrap();
                    path.drain(..from);
                    break;
                }
                Some(n) => {
                    path.push(n);
                    seen.insert(n);
                    at = n;
                }
                None => break,
            }
        }
        found.push(path.into_iter().map(|i| nodes[i].clone()).collect());
    }
    found
}

fn strongly_connected(adjacency: &[Vec<usize>]) -> Vec<Vec<usize>> {
    struct State<'a> {
        adjacency: &'a [Vec<usize>],
        index: Vec<Option<usize>>,
        low: Vec<usize>,
        on_stack: Vec<bool>,
        stack: Vec<usize>,
        next: usize,
        groups: Vec<Vec<usize>>,
    }
    fn visit(s: &mut State, v: usize) {
        s.index[v] = Some(s.next);
        s.low[v] = s.next;
        s.next += 1;
        s.stack.push(v);
        s.on_stack[v] = true;
        for &w in &s.adjacency[v] {
            match s.index[w] {
                None => {
                    visit(s, w);
                    s.low[v] = s.low[v].min(s.low[w]);
                }
                Some(iw) if s.on_stack[w] => s.low[v] = s.low[v].min(iw),
                _ => {}
            }
        }
        if Some(s.low[v]) == s.index[v] {
            let mut group = Vec::new();
            while let Some(w) = s.stack.pop() {
                s.on_stack[w] = false;
                group.push(w);
                if w == v {
                    break;
                }
            }
            s.groups.push(group);
        }
    }
    let n = adjacency.len();
    let mut s = State {
        adjacency,
        index: vec![None; n],
        low: vec![0; n],
        on_stack: vec![false; n],
        stack: Vec::new(),
        next: 0,
        groups: Vec::new(),
    };
    for v in 0..n {
        if s.index[v].is_none() {
            visit(&mut s, v);
        }
    }
    s.groups
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A crate tree under a fresh folder: (path under src/, text).
    fn tree(name: &str, files: &[(&str, &str)]) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("imports-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        for (path, text) in files {
            let p = dir.join("src").join(path);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, text).unwrap();
        }
        dir
    }

    #[test]
    fn siblings_that_import_each_other_are_a_loop() {
        let dir = tree(
            "siblings",
            &[
                ("lib.rs", "mod page;\npub use page::html::page;"),
                (
                    "page/mod.rs",
                    "mod charts;\npub mod html;\npub struct Placed;",
                ),
                (
                    "page/charts.rs",
                    "use super::html::escape;\npub fn bars() {}",
                ),
                (
                    "page/html.rs",
                    "use super::charts::{self, bars};\npub fn escape() {}",
                ),
            ],
        );
        assert_eq!(
            import_cycles(&dir).unwrap(),
            ["crate::page::charts -> crate::page::html -> crate::page::charts"]
        );
        let panicked = std::panic::catch_unwind(|| assert_no_import_cycles(&dir));
        assert!(panicked.is_err());
    }

    #[test]
    fn paths_in_code_and_longer_loops_count() {
        let dir = tree(
            "paths",
            &[
                ("lib.rs", "pub mod a; pub mod b; pub mod c;"),
                ("a.rs", "pub fn f() { crate::b::g() }"),
                ("b.rs", "pub fn g() { let _ = crate::c::H; }"),
                ("c.rs", "pub const H: u8 = 0; fn k() { super::a::f() }"),
            ],
        );
        assert_eq!(
            import_cycles(&dir).unwrap(),
            ["crate::a -> crate::b -> crate::c -> crate::a"]
        );
    }

    #[test]
    fn layers_tests_comments_and_strings_are_no_loop() {
        let dir = tree(
            "layers",
            &[
                ("lib.rs", "pub mod a; pub mod b; pub use a::A;"),
                // b uses a; a names b only in a test, a comment, strings and the crate root.
                ("a.rs", concat!(
                    "//! see crate::b::B\n",
                    "pub struct A;\n",
                    "/* crate::b::B */ const S: &str = \"crate::b::B\";\n",
                    "const R: &str = r#\"crate::b \"quoted\"\"#; const C: char = '\"';\n",
                    "fn f<'a>(x: &'a str) -> &'a str { x }\n",
                    "#[cfg(test)]\nmod tests { use crate::b::B; fn t() { super::super::b::B; } }\n",
                    "#[cfg(test)]\nuse crate::b::B;\n",
                )),
                ("b.rs", "use crate::a::A;\nuse crate::A as Again;\npub struct B;\nmod inner { use super::B; }"),
                ("bin/tool.rs", "use crate::a; fn main() {}"),
            ],
        );
        assert_eq!(import_cycles(&dir).unwrap(), Vec::<String>::new());
        assert_no_import_cycles(&dir);
    }

    #[test]
    fn a_parent_and_its_child_can_loop() {
        let dir = tree(
            "parent",
            &[
                ("lib.rs", "pub mod page;"),
                (
                    "page/mod.rs",
                    "mod html;\npub struct Folder;\npub fn render() { html::page() }",
                ),
                ("page/html.rs", "use super::Folder;\npub fn page() {}"),
            ],
        );
        assert_eq!(
            import_cycles(&dir).unwrap(),
            ["crate::page -> crate::page::html -> crate::page"]
        );
    }

    #[test]
    fn the_longest_chain_starts_at_the_binary_and_counts_modules() {
        let dir = tree(
            "chain",
            &[
                ("lib.rs", "pub mod a; pub mod b; pub mod c; pub mod d;"),
                ("main.rs", "use tree_crate::a::f; fn main() { f() }"),
                ("a.rs", "pub fn f() { crate::b::g(); crate::d::K; }"),
                ("b.rs", "pub fn g() { let _ = crate::c::H; }"),
                ("c.rs", "pub const H: u8 = 0;"),
                ("d.rs", "pub const K: u8 = 0;"),
            ],
        );
        std::fs::write(dir.join("Cargo.toml"), "[package]\nname = \"tree-crate\"\n").unwrap();
        assert_eq!(
            longest_import_chain(&dir).unwrap(),
            ["crate::main", "crate::a", "crate::b", "crate::c"]
        );
        assert_import_depth(&dir, 4);
        let too_deep = std::panic::catch_unwind(|| assert_import_depth(&dir, 3));
        assert!(too_deep.is_err());
    }

    #[test]
    fn a_missing_source_folder_is_an_error() {
        let dir = std::env::temp_dir().join(format!("imports-{}-none", std::process::id()));
        assert!(import_cycles(&dir).unwrap_err().contains("cannot read"));
    }
}

//! `common`'s modules use each other in layers, never in a loop: the runner sits on the report,
//! the report on the timer, the timer on the device, and the command line only at the edge.
//! This reads the sources and fails on any cycle of `crate::` references (comments aside).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// module -> modules its code refers to.
fn graph() -> BTreeMap<String, BTreeSet<String>> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut files = vec![src.clone()];
    while let Some(path) = files.pop() {
        if path.is_dir() {
            for entry in std::fs::read_dir(&path).unwrap() {
                files.push(entry.unwrap().path());
            }
            continue;
        }
        if path.extension().and_then(|e| e.to_str()) != Some("rs") {
            continue;
        }
        let relative = path.strip_prefix(&src).unwrap();
        let module = relative
            .components()
            .next()
            .unwrap()
            .as_os_str()
            .to_string_lossy()
            .trim_end_matches(".rs")
            .to_string();
        if module == "lib" {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        let uses = graph.entry(module.clone()).or_default();
        for line in text.lines() {
            let code = line.split("//").next().unwrap();
            for (i, _) in code.match_indices("crate::") {
                let rest = &code[i + "crate::".len()..];
                let name: String = rest
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                if !name.is_empty() && name != module && name.chars().next().unwrap().is_lowercase()
                {
                    uses.insert(name);
                }
            }
            // `use crate::{a, b}` groups.
            if let Some(group) = code.trim().strip_prefix("use crate::{") {
                for part in group.split(',') {
                    let name = part.trim().split("::").next().unwrap().trim_matches('}');
                    if !name.is_empty() && name != module {
                        uses.insert(name.to_string());
                    }
                }
            }
        }
    }
    graph
}

fn find_cycle(graph: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        node: &str,
        graph: &BTreeMap<String, BTreeSet<String>>,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(at) = path.iter().position(|n| n == node) {
            let mut cycle = path[at..].to_vec();
            cycle.push(node.to_string());
            return Some(cycle);
        }
        if done.contains(node) {
            return None;
        }
        path.push(node.to_string());
        for next in graph.get(node).into_iter().flatten() {
            if let Some(c) = visit(next, graph, path, done) {
                return Some(c);
            }
        }
        path.pop();
        done.insert(node.to_string());
        None
    }
    let mut done = BTreeSet::new();
    for node in graph.keys() {
        if let Some(c) = visit(node, graph, &mut Vec::new(), &mut done) {
            return Some(c);
        }
    }
    None
}

#[test]
fn modules_use_each_other_without_a_loop() {
    let g = graph();
    assert!(g.len() > 10, "read the modules: {g:?}");
    if let Some(cycle) = find_cycle(&g) {
        panic!(
            "common's modules import each other in a loop: {}",
            cycle.join(" -> ")
        );
    }
}

#[test]
fn the_command_line_stays_at_the_edge() {
    let g = graph();
    for (module, uses) in &g {
        assert!(
            !uses.contains("cli") || module == "testing",
            "{module} uses the command-line module"
        );
    }
    let runner =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("src/runner.rs"))
            .unwrap();
    assert!(
        !runner.contains("clap"),
        "the runner's API has no clap types"
    );
}

#[test]
fn the_cycle_finder_finds_cycles() {
    let mut g: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    g.entry("a".into()).or_default().insert("b".into());
    g.entry("b".into()).or_default().insert("c".into());
    assert_eq!(find_cycle(&g), None);
    g.entry("c".into()).or_default().insert("a".into());
    assert_eq!(find_cycle(&g).unwrap(), vec!["a", "b", "c", "a"]);
}

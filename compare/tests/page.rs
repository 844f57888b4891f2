//! The chapter report page in a real browser: `compare --html` from the committed results, loaded
//! by headless Chromium. The page must load with no console message and no error, draw every bar
//! and roofline point it holds (its own script counts what has a size on screen and writes the
//! counts into the page, read back with --dump-dom), and its screenshot must not be blank
//! (checked by `png_not_blank.py`, standard library only).
//!
//! Needs Debian's `chromium` and `python3`; without them these tests fail with a line saying
//! so, unless PERF_LESSONS_SKIP_BROWSER=1 says to skip them.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_compare");
const SKIP: &str = "PERF_LESSONS_SKIP_BROWSER";

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("compare-page-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// The browser, or None when this run may skip; a missing browser otherwise fails the test.
fn chromium() -> Option<PathBuf> {
    let found = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .flat_map(|d| ["chromium", "chromium-browser"].map(|n| d.join(n)))
            .find(|p| p.is_file())
    });
    match found {
        Some(p) => Some(p),
        None if std::env::var(SKIP).as_deref() == Ok("1") => {
            eprintln!("skipped: chromium is not installed and {SKIP}=1");
            None
        }
        None => panic!(
            "chromium is not installed: the report page's browser test needs it (Debian: \
             apt-get install chromium); set {SKIP}=1 to skip this test"
        ),
    }
}

/// Run a command to its end or kill it after a minute; its output goes through files beside
/// `scratch` (a pipe would fill and stall a browser that prints a whole page).
fn run_limited(cmd: &mut Command, scratch: &Path) -> (String, String) {
    let (out, err) = (scratch.with_extension("out"), scratch.with_extension("err"));
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&out).unwrap())
        .stderr(std::fs::File::create(&err).unwrap())
        .spawn()
        .unwrap_or_else(|e| panic!("could not start {cmd:?}: {e}"));
    let start = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if start.elapsed() > Duration::from_secs(60) {
            let _ = child.kill();
            panic!("{cmd:?} did not finish in 60 s");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let read = |p: &Path| String::from_utf8_lossy(&std::fs::read(p).unwrap()).to_string();
    (read(&out), read(&err))
}

/// Headless Chromium on a local file with a fresh profile, as the machine's notes ask.
fn browser(chromium: &Path, profile: &Path, page: &Path, action: &[String]) -> (String, String) {
    let url = format!("file://{}", page.canonicalize().unwrap().display());
    run_limited(
        Command::new(chromium)
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--disable-quic",
                "--no-first-run",
                "--enable-logging=stderr",
                "--v=0",
            ])
            .arg(format!("--user-data-dir={}", profile.display()))
            .args(action)
            .arg(url),
        profile,
    )
}

/// What the browser made of a page.
#[derive(Debug)]
struct Seen {
    /// The self-check's attributes, name -> value.
    check: Vec<(String, String)>,
    /// Lines the page wrote to the console (it writes none of its own).
    console: Vec<String>,
    /// The screenshot verdict of png_not_blank.py, and its line.
    screenshot: (i32, String),
}

impl Seen {
    fn get(&self, name: &str) -> Option<&str> {
        self.check
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    fn number(&self, name: &str) -> usize {
        self.get(name)
            .unwrap_or_else(|| panic!("the page has no {name}: {self:?}"))
            .parse()
            .unwrap()
    }
}

fn load(chromium: &Path, page: &Path, work: &Path) -> Seen {
    let dom = browser(
        chromium,
        &work.join("profile-dom"),
        page,
        &["--dump-dom".into()],
    );
    let (html, stderr) = dom;
    // A page without the self-check (a blank one) has no counts.
    let check = html
        .find("<p id=\"self-check\"")
        .map(|start| {
            let tag = &html[start..start + html[start..].find('>').unwrap()];
            tag.split(" data-")
                .skip(1)
                .filter_map(|a| {
                    let (k, v) = a.split_once('=')?;
                    Some((k.to_string(), v.trim_matches('"').to_string()))
                })
                .collect()
        })
        .unwrap_or_default();
    let console = stderr
        .lines()
        .filter(|l| l.contains(":CONSOLE"))
        .map(str::to_string)
        .collect();
    let png = work.join("page.png");
    let shot = browser(
        chromium,
        &work.join("profile-shot"),
        page,
        &[
            "--window-size=1400,2000".into(),
            format!("--screenshot={}", png.display()),
        ],
    );
    assert!(png.exists(), "no screenshot: {}", shot.1);
    let checked = Command::new("python3")
        .arg(repo().join("compare/tests/png_not_blank.py"))
        .arg(&png)
        .output()
        .unwrap_or_else(|e| {
            panic!(
                "python3 is needed to check the screenshot (Debian: apt-get install python3): {e}"
            )
        });
    Seen {
        check,
        console,
        screenshot: (
            checked.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&checked.stdout).trim().to_string()
                + String::from_utf8_lossy(&checked.stderr).trim(),
        ),
    }
}

fn write_page(out: &Path, folders: &[PathBuf]) -> String {
    let mut cmd = Command::new(BIN);
    cmd.arg("--html").arg(out);
    for f in folders {
        cmd.arg("--results").arg(f);
    }
    let o = cmd.output().unwrap();
    let stdout = String::from_utf8_lossy(&o.stdout).to_string();
    assert_eq!(
        o.status.code(),
        Some(0),
        "{stdout}{}",
        String::from_utf8_lossy(&o.stderr)
    );
    stdout
}

/// Pairs with a speedup in a compare JSON, read here without the compare's own types.
fn speedups_in(compare_json: &Path) -> usize {
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(compare_json).unwrap()).unwrap();
    v["pairs"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["speedup"].is_number())
        .count()
}

#[test]
fn the_page_of_the_committed_results_renders_in_chromium() {
    let Some(chromium) = chromium() else { return };
    let work = dir("committed");
    // The H100's folder, the H200's, and a copy of the H100's compare and roofline alone, as a
    // third GPU with no sweep plot.
    let h100 = repo().join("results/h100");
    let h200 = repo().join("results/h200");
    let partial = work.join("partial");
    std::fs::create_dir_all(&partial).unwrap();
    for f in ["compare.json", "ch1-roofline.json"] {
        std::fs::copy(h100.join(f), partial.join(f)).unwrap();
    }
    let page = work.join("chapter.html");
    let folders = [h100.clone(), h200, partial];
    let line = write_page(&page, &folders);
    let html = std::fs::read_to_string(&page).unwrap();
    for outside in ["http://", "https://", "src=\"/", "href=\"/"] {
        assert!(
            !html.contains(outside),
            "the page refers outside itself: {outside}"
        );
    }
    assert!(
        !html.contains("id=\"notes\""),
        "what a folder lacks is left out, with no note"
    );

    let seen = load(&chromium, &page, &work);
    assert_eq!(seen.get("done"), Some("yes"), "{seen:?}");
    assert!(seen.console.is_empty(), "console: {:?}", seen.console);
    assert_eq!(seen.number("errors"), 0, "{seen:?}");
    // Every bar: one per pair with a speedup in each folder's compare.
    let bars: usize = folders
        .iter()
        .map(|f| speedups_in(&f.join("compare.json")))
        .sum();
    assert!(bars > 0);
    assert_eq!(seen.number("expected-bars"), bars, "{line}");
    assert_eq!(seen.number("bars"), bars, "{seen:?}");
    // Every roofline point drawn, two per placed pair, on both GPUs with a roofline.
    let points = seen.number("expected-points");
    assert!(points >= 4 && points % 4 == 0, "{seen:?}");
    assert_eq!(seen.number("points"), points, "{seen:?}");
    // Every sweep plot that exists, decoded.
    let plots = folders
        .iter()
        .filter(|f| f.join("tuner-sweep.svg").exists() || f.join("tuner-sweep.png").exists())
        .count();
    assert!(plots >= 1);
    assert_eq!(seen.number("expected-images"), plots);
    assert_eq!(seen.number("images"), plots, "{seen:?}");
    assert_eq!(
        seen.screenshot.0, 0,
        "blank screenshot: {}",
        seen.screenshot.1
    );
}

#[test]
fn the_check_catches_errors_missing_drawings_and_a_blank_page() {
    let Some(chromium) = chromium() else { return };
    let work = dir("planted");
    let page = work.join("chapter.html");
    write_page(&page, &[repo().join("results/h100")]);
    // A script error, a console message and a bar that draws nothing, planted in the page.
    let html = std::fs::read_to_string(&page).unwrap();
    let broken = html
        .replacen("class=\"bar\" ", "class=\"bar\" style=\"display:none\" ", 1)
        .replace(
            "</body>",
            "<script>console.warn('planted'); noSuchFunction();</script></body>",
        );
    std::fs::write(&page, broken).unwrap();
    let seen = load(&chromium, &page, &work);
    assert!(
        seen.console.iter().any(|l| l.contains("planted")),
        "{seen:?}"
    );
    assert!(
        seen.console.iter().any(|l| l.contains("noSuchFunction")),
        "{seen:?}"
    );
    assert_eq!(seen.number("errors"), 1, "{seen:?}");
    assert_eq!(
        seen.number("bars") + 1,
        seen.number("expected-bars"),
        "{seen:?}"
    );
    // An empty page: the screenshot check says blank.
    std::fs::write(&page, "<!DOCTYPE html><html><body></body></html>").unwrap();
    let seen = load(&chromium, &page, &work);
    assert!(seen.get("done").is_none());
    assert_eq!(seen.screenshot.0, 1, "{}", seen.screenshot.1);
}

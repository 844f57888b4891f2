//! Files the harness writes and reads: atomic writes (readers never see half a file), pretty
//! JSON with errors that name the file, versioned documents read back with one clear line per
//! failure, the cache folder, UTC timestamps, and paths as results record them.

use std::io::Write;
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::error::{Error, Result};

/// Write to a temporary file beside `path`, then rename it over `path`, so readers never see
/// half a file; the temporary file goes away when anything fails.
pub fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let file_name = path.file_name().ok_or_else(|| {
        std::io::Error::new(std::io::ErrorKind::InvalidInput, "path has no file name")
    })?;
    let dir = match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    };
    std::fs::create_dir_all(dir)?;
    let mut tmp = tempfile::Builder::new()
        .prefix(&format!(".{}.", file_name.to_string_lossy()))
        .suffix(".tmp")
        // What File::create gives, less the umask: results are read by other people and tools,
        // where tempfile's default would leave them readable by their owner alone.
        .permissions(std::fs::Permissions::from_mode(0o666))
        .tempfile_in(dir)?;
    tmp.write_all(bytes)?;
    tmp.as_file().sync_all()?;
    tmp.persist(path).map_err(|e| e.error)?;
    Ok(())
}

fn file_error(path: &Path, message: String) -> Error {
    Error::File {
        path: path.display().to_string(),
        message,
    }
}

/// Write `value` as pretty JSON with [write_atomically]; errors name the file and `what` it
/// held ("the report").
pub fn write_json_file<T: Serialize + ?Sized>(path: &Path, value: &T, what: &str) -> Result<()> {
    let json = serde_json::to_vec_pretty(value)
        .map_err(|e| file_error(path, format!("could not serialize {what}: {e}")))?;
    write_atomically(path, &json)
        .map_err(|e| file_error(path, format!("could not write {what}: {e}")))
}

/// Read a versioned JSON document: the file, valid JSON, the expected `schema_version`, then
/// the type. Each failure is one line naming the file and, for an old version, what to do.
pub fn read_versioned<T: serde::de::DeserializeOwned>(
    path: &Path,
    version: u32,
    what: &str,
    advice: &str,
) -> Result<T> {
    let text =
        std::fs::read_to_string(path).map_err(|e| file_error(path, format!("cannot read: {e}")))?;
    let value: serde_json::Value = serde_json::from_str(&text)
        .map_err(|e| file_error(path, format!("not valid JSON: {e}")))?;
    match value.get("schema_version").and_then(|v| v.as_u64()) {
        Some(v) if v == version as u64 => {}
        Some(v) => {
            return Err(file_error(
                path,
                format!("schema version {v}, this build reads version {version}: {advice}"),
            ))
        }
        None => return Err(file_error(path, format!("not {what} (no schema_version)"))),
    }
    serde_json::from_value(value).map_err(|e| file_error(path, format!("not {what}: {e}")))
}

/// Where compiled kernels and measured ceilings are kept: $PERF_LESSONS_CACHE, else
/// $XDG_CACHE_HOME/perf-lessons, else ~/.cache/perf-lessons, else the temp folder.
pub fn cache_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("PERF_LESSONS_CACHE") {
        return PathBuf::from(dir);
    }
    if let Some(dir) = std::env::var_os("XDG_CACHE_HOME") {
        return PathBuf::from(dir).join("perf-lessons");
    }
    if let Some(home) = std::env::var_os("HOME") {
        return PathBuf::from(home).join(".cache").join("perf-lessons");
    }
    std::env::temp_dir().join("perf-lessons")
}

/// UTC time as RFC 3339 ("2026-11-21T21:49:25Z"), without a date crate.
pub fn rfc3339_utc(t: std::time::SystemTime) -> String {
    let secs = t
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0);
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        (rem / 60) % 60,
        rem % 60
    )
}

/// Days since 1970-01-01 to (year, month, day), Howard Hinnant's algorithm.
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

/// `path` as a result records it: relative to the repository the current directory is in (the
/// nearest folder above it that holds `.git`), or to the current directory outside a
/// repository, so that a result names no machine's folders. A path outside that folder is
/// reached through `..`, except one in the system's temporary folder, which is named from
/// there as `$TMPDIR/...` (a trial's scratch folder, say).
pub fn recorded_path(path: &Path) -> String {
    let Ok(cwd) = std::env::current_dir() else {
        return path.display().to_string();
    };
    let base = repository_root(&cwd).unwrap_or_else(|| cwd.clone());
    recorded_from(&cwd.join(path), &base, &std::env::temp_dir())
}

/// [recorded_path] of an absolute `path`, from `base` or, outside it, from `temp`.
fn recorded_from(path: &Path, base: &Path, temp: &Path) -> String {
    let from_base = relative_to(path, base);
    let outside = from_base.starts_with("..");
    let from_temp = relative_to(path, temp);
    if outside && !from_temp.starts_with("..") && temp.is_absolute() && temp != Path::new("/") {
        let under = Path::new("$TMPDIR");
        let named = if from_temp == Path::new(".") {
            under.to_path_buf()
        } else {
            under.join(from_temp)
        };
        return named.display().to_string();
    }
    from_base.display().to_string()
}

/// An optional path in a result, as [recorded_path] gives it (serde's `serialize_with`).
pub fn serialize_recorded<S: serde::Serializer>(
    path: &Option<PathBuf>,
    s: S,
) -> std::result::Result<S::Ok, S::Error> {
    match path {
        Some(p) => s.serialize_some(&recorded_path(p)),
        None => s.serialize_none(),
    }
}

/// A command line as a result records it: the program by its file name, and each argument that
/// is an absolute path (alone or after `--flag=`) as [recorded_path] gives it.
pub fn recorded_command_line(args: impl IntoIterator<Item = String>) -> Vec<String> {
    let mut args = args.into_iter();
    let program = args.next().map(|p| {
        Path::new(&p)
            .file_name()
            .map_or(p.clone(), |n| n.to_string_lossy().to_string())
    });
    let arg = |a: String| match a.split_once('=') {
        _ if a.starts_with('/') => recorded_path(Path::new(&a)),
        Some((flag, value)) if flag.starts_with('-') && value.starts_with('/') => {
            format!("{flag}={}", recorded_path(Path::new(value)))
        }
        _ => a,
    };
    program.into_iter().chain(args.map(arg)).collect()
}

/// The nearest folder at or above `dir` that holds `.git`.
fn repository_root(dir: &Path) -> Option<PathBuf> {
    dir.ancestors()
        .find(|d| d.join(".git").exists())
        .map(Path::to_path_buf)
}

/// `path` from `base`, both absolute, by their components alone (no link is followed).
fn relative_to(path: &Path, base: &Path) -> PathBuf {
    use std::path::Component;
    fn normal(p: &Path) -> Vec<Component<'_>> {
        let mut out: Vec<Component> = Vec::new();
        for c in p.components() {
            match c {
                Component::CurDir => {}
                Component::ParentDir if matches!(out.last(), Some(Component::Normal(_))) => {
                    out.pop();
                }
                c => out.push(c),
            }
        }
        out
    }
    let (path, base) = (normal(path), normal(base));
    let common = path.iter().zip(&base).take_while(|(a, b)| a == b).count();
    let mut out = PathBuf::new();
    for _ in common..base.len() {
        out.push("..");
    }
    for c in &path[common..] {
        out.push(c);
    }
    if out.as_os_str().is_empty() {
        out.push(".");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_are_taken_from_the_base_by_their_parts() {
        let r = |p: &str, b: &str| {
            relative_to(Path::new(p), Path::new(b))
                .display()
                .to_string()
        };
        assert_eq!(
            r("/repo/results/h100/a.json", "/repo"),
            "results/h100/a.json"
        );
        assert_eq!(
            r("/repo/./results/../results/a.json", "/repo"),
            "results/a.json"
        );
        assert_eq!(r("/repo", "/repo"), ".");
        assert_eq!(r("/tmp/out/x.json", "/repo/sub"), "../../tmp/out/x.json");
        assert_eq!(r("/repo/a", "/repo/b/c"), "../../a");
    }

    #[test]
    fn a_temporary_folder_is_named_from_the_temporary_folder() {
        let r =
            |p: &str| recorded_from(Path::new(p), Path::new("/home/me/repo"), Path::new("/tmp"));
        assert_eq!(
            r("/tmp/tuner-sweep-1/trial-000"),
            "$TMPDIR/tuner-sweep-1/trial-000"
        );
        assert_eq!(r("/tmp"), "$TMPDIR");
        assert_eq!(r("/home/me/repo/results/a.json"), "results/a.json");
        assert_eq!(r("/home/me/other/a.json"), "../other/a.json");
        // A repository inside the temporary folder still records from the repository.
        let inside =
            |p: &str| recorded_from(Path::new(p), Path::new("/tmp/repo"), Path::new("/tmp"));
        assert_eq!(inside("/tmp/repo/results/a.json"), "results/a.json");
        assert_eq!(inside("/tmp/scratch/x"), "$TMPDIR/scratch/x");
    }

    #[test]
    fn results_record_paths_from_the_repository_root() {
        let cwd = std::env::current_dir().unwrap();
        // The tests run in the crate's folder, inside the repository.
        let root = repository_root(&cwd).expect("the tests run inside the repository");
        assert_ne!(root, cwd);
        let file = root.join("results/h100/compare.json");
        assert_eq!(recorded_path(&file), "results/h100/compare.json");
        assert_eq!(recorded_path(Path::new("src/lib.rs")), "common/src/lib.rs");
        assert!(repository_root(Path::new("/")).is_none());
    }

    #[test]
    fn command_lines_name_the_program_and_record_paths() {
        let root = repository_root(&std::env::current_dir().unwrap()).unwrap();
        let json = root.join("results/h100/x.json").display().to_string();
        let line = recorded_command_line([
            "/opt/bin/ch1-gemm".to_string(),
            "--json".into(),
            json.clone(),
            format!("--out={json}"),
            "--elements".into(),
            "10M".into(),
            "relative/path".into(),
        ]);
        assert_eq!(
            line,
            [
                "ch1-gemm",
                "--json",
                "results/h100/x.json",
                "--out=results/h100/x.json",
                "--elements",
                "10M",
                "relative/path"
            ]
        );
        assert!(recorded_command_line(std::iter::empty()).is_empty());
    }
    use std::time::{Duration, UNIX_EPOCH};

    #[test]
    fn rfc3339_of_known_instants() {
        assert_eq!(rfc3339_utc(UNIX_EPOCH), "1970-01-01T00:00:00Z");
        // 2026-11-21T21:49:25Z
        assert_eq!(
            rfc3339_utc(UNIX_EPOCH + Duration::from_secs(1_795_297_765)),
            "2026-11-21T21:49:25Z"
        );
        // A leap day.
        assert_eq!(
            rfc3339_utc(UNIX_EPOCH + Duration::from_secs(951_782_400)),
            "2000-02-29T00:00:00Z"
        );
    }

    /// What a folder holds, by name (a test's folder holds a file or two: no order needed).
    fn names_in(dir: &Path) -> Vec<std::ffi::OsString> {
        std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect()
    }

    #[test]
    fn atomic_write_replaces_and_leaves_no_temp() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sub").join("x.json");
        write_atomically(&path, b"one").unwrap();
        write_atomically(&path, b"two").unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"two");
        assert_eq!(names_in(path.parent().unwrap()), ["x.json"]);
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(
            mode & 0o644,
            0o644,
            "readable by others as File::create makes it"
        );
    }

    #[test]
    fn a_failed_atomic_write_leaves_no_partial_file() {
        let dir = tempfile::tempdir().unwrap();
        // The rename cannot replace a folder that holds something: the write fails at its end.
        let target = dir.path().join("report.json");
        std::fs::create_dir(&target).unwrap();
        std::fs::write(target.join("kept"), b"old").unwrap();
        assert!(write_atomically(&target, b"new").is_err());
        assert_eq!(
            names_in(dir.path()),
            ["report.json"],
            "no temporary file left"
        );
        assert_eq!(std::fs::read(target.join("kept")).unwrap(), b"old");
        // A file name is needed.
        let e = write_atomically(Path::new("/"), b"x").unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::InvalidInput);
    }

    #[test]
    fn versioned_reads_say_what_is_wrong() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("doc.json");
        let read = |text: &str| {
            write_atomically(&path, text.as_bytes()).unwrap();
            read_versioned::<serde_json::Value>(&path, 2, "a document", "regenerate it")
                .map_err(|e| e.to_string())
        };
        assert!(read("{\"schema_version\": 2}").is_ok());
        assert!(read("{").unwrap_err().contains("not valid JSON"));
        assert!(read("{}").unwrap_err().contains("no schema_version"));
        let old = read("{\"schema_version\": 1}").unwrap_err();
        assert!(
            old.contains("schema version 1") && old.contains("regenerate it"),
            "{old}"
        );
    }
}

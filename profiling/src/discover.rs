//! Finding nsys and ncu. They are often installed off the PATH (the CUDA toolkit puts them in
//! its own bin folder; Nsight Compute even bundles an nsys under its host folder), so look:
//!
//! 1. where `--nsys PATH` / `--ncu PATH` says (a flag typed on this command line is the most
//!    specific ask, so it wins; a wrong path is an error, not a fallback);
//! 2. on the PATH;
//! 3. where the `NSYS` / `NCU` variable says;
//! 4. in the usual install folders, in the order listed, the newest version of each first
//!    (versions compare as numbers: 2025.10 is newer than 2025.9).

use std::cmp::Ordering;
use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

/// What to look for and how to tell the reader to install it.
#[derive(Debug, Clone, Copy)]
pub struct Tool {
    /// Executable name, e.g. "nsys".
    pub exe: &'static str,
    /// Its long name for messages.
    pub long_name: &'static str,
    /// Name of the environment variable that may point at it.
    pub env_var: &'static str,
    /// The flag that may point at it.
    pub flag: &'static str,
    pub install: &'static str,
    /// Install folders, as glob patterns.
    pub folders: &'static [&'static str],
}

pub const NSYS: Tool = Tool {
    exe: "nsys",
    long_name: "nsys (Nsight Systems)",
    env_var: "NSYS",
    flag: "--nsys",
    install: "install Nsight Systems (the CUDA toolkit's nsight-systems package, or \
              https://developer.nvidia.com/nsight-systems), or pass --nsys PATH or set NSYS",
    folders: &[
        "/usr/local/cuda/bin/nsys",
        "/usr/local/cuda-*/bin/nsys",
        "/opt/nvidia/nsight-systems/*/bin/nsys",
        "/opt/nvidia/nsight-systems-cli/*/bin/nsys",
        "/usr/local/cuda/nsight-systems-*/bin/nsys",
        "/usr/local/cuda-*/nsight-systems-*/bin/nsys",
        "/opt/nvidia/nsight-compute/*/host/target-linux-x64/nsys",
    ],
};

pub const NCU: Tool = Tool {
    exe: "ncu",
    long_name: "ncu (Nsight Compute)",
    env_var: "NCU",
    flag: "--ncu",
    install: "install Nsight Compute (the CUDA toolkit's nsight-compute package, or \
              https://developer.nvidia.com/nsight-compute), or pass --ncu PATH or set NCU",
    folders: &[
        "/usr/local/cuda/bin/ncu",
        "/usr/local/cuda-*/bin/ncu",
        "/opt/nvidia/nsight-compute/*/ncu",
        "/usr/local/cuda/nsight-compute-*/ncu",
    ],
};

/// The places a search looks; [Places::from_env] reads the real ones, tests build their own.
#[derive(Debug, Clone, Default)]
pub struct Places {
    pub explicit: Option<PathBuf>,
    pub path_var: Option<OsString>,
    pub env_value: Option<OsString>,
    pub folders: Vec<String>,
}

impl Places {
    pub fn from_env(tool: &Tool, explicit: Option<PathBuf>) -> Places {
        Places {
            explicit,
            path_var: std::env::var_os("PATH"),
            env_value: std::env::var_os(tool.env_var).filter(|v| !v.is_empty()),
            folders: tool.folders.iter().map(|s| s.to_string()).collect(),
        }
    }
}

/// Find `tool` in `places`, in the order this module's comment gives.
pub fn find(tool: &Tool, places: &Places) -> Result<PathBuf> {
    if let Some(p) = &places.explicit {
        return if is_executable(p) {
            Ok(p.clone())
        } else {
            Err(Error::BadArgument(format!(
                "{} {}: no such executable file",
                tool.flag,
                p.display()
            )))
        };
    }
    if let Some(p) = on_path(tool.exe, places.path_var.as_deref()) {
        return Ok(p);
    }
    if let Some(v) = &places.env_value {
        let p = PathBuf::from(v);
        return if is_executable(&p) {
            Ok(p)
        } else {
            Err(Error::BadArgument(format!(
                "{}={}: no such executable file",
                tool.env_var,
                p.display()
            )))
        };
    }
    for pattern in &places.folders {
        if let Some(p) = newest_first(pattern).into_iter().next() {
            return Ok(p);
        }
    }
    Err(Error::ToolNotFound {
        tool: tool.long_name,
        install: tool.install,
        searched: format!(
            "{}, PATH, ${}, {}",
            tool.flag,
            tool.env_var,
            places.folders.join(", ")
        ),
    })
}

/// `exe` in a folder of a PATH-style list (empty entries, which would mean the current folder,
/// are skipped).
pub fn on_path(exe: &str, path_var: Option<&OsStr>) -> Option<PathBuf> {
    let folders = std::env::split_paths(path_var?).filter(|d| !d.as_os_str().is_empty());
    let path_var = std::env::join_paths(folders).ok()?;
    if path_var.is_empty() {
        return None;
    }
    let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/"));
    which::which_in(exe, Some(path_var), cwd).ok()
}

/// Whether `p` is a file that may be executed.
pub fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    p.metadata()
        .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        .unwrap_or(false)
}

/// The executable files a glob pattern matches, newest version first.
pub fn newest_first(pattern: &str) -> Vec<PathBuf> {
    let mut found: Vec<PathBuf> = glob::glob(pattern)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|p| is_executable(p))
        .collect();
    found.sort_by(|a, b| compare_versions(&b.to_string_lossy(), &a.to_string_lossy()));
    found
}

/// Order names as versions: runs of digits compare as numbers (2025.10 after 2025.9, cuda-13.0
/// after cuda-12.9), the text between them as text.
pub fn compare_versions(a: &str, b: &str) -> Ordering {
    let (mut a, mut b) = (a, b);
    loop {
        match (a.is_empty(), b.is_empty()) {
            (true, true) => return Ordering::Equal,
            (true, false) => return Ordering::Less,
            (false, true) => return Ordering::Greater,
            _ => {}
        }
        let (a_digits, b_digits) = (
            a.as_bytes()[0].is_ascii_digit(),
            b.as_bytes()[0].is_ascii_digit(),
        );
        let (a_run, a_rest) = split_run(a, a_digits);
        let (b_run, b_rest) = split_run(b, b_digits);
        let order = if a_digits && b_digits {
            // Without leading zeros, a longer number is larger; equal lengths compare as text.
            let (x, y) = (a_run.trim_start_matches('0'), b_run.trim_start_matches('0'));
            x.len().cmp(&y.len()).then_with(|| x.cmp(y))
        } else {
            a_run.cmp(b_run)
        };
        if order != Ordering::Equal {
            return order;
        }
        (a, b) = (a_rest, b_rest);
    }
}

/// The leading run of digits (or of non-digits) of `s`, and the rest.
fn split_run(s: &str, digits: bool) -> (&str, &str) {
    let end = s
        .find(|c: char| c.is_ascii_digit() != digits)
        .unwrap_or(s.len());
    s.split_at(end)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn executable(p: &Path) {
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o755)).unwrap();
    }

    #[test]
    fn versions_compare_as_numbers() {
        let newest_first = |names: &[&str]| {
            let mut v: Vec<String> = names.iter().map(|s| s.to_string()).collect();
            v.sort_by(|a, b| compare_versions(b, a));
            v
        };
        assert_eq!(
            newest_first(&["2025.9.1", "2025.10.0", "2024.12.3", "2025.3.1", "2025.10"]),
            ["2025.10.0", "2025.10", "2025.9.1", "2025.3.1", "2024.12.3"]
        );
        assert_eq!(
            newest_first(&[
                "/usr/local/cuda-12.9/bin/nsys",
                "/usr/local/cuda-13.0/bin/nsys"
            ]),
            [
                "/usr/local/cuda-13.0/bin/nsys",
                "/usr/local/cuda-12.9/bin/nsys"
            ]
        );
        assert_eq!(compare_versions("2025.09", "2025.9"), Ordering::Equal);
        assert_eq!(
            compare_versions("v1.2-beta", "v1.2-alpha"),
            Ordering::Greater
        );
        assert_eq!(
            compare_versions("99999999999999999999999.1", "1.1"),
            Ordering::Greater,
            "numbers past u64 still order"
        );
    }

    #[test]
    fn search_order_flag_path_env_folders() {
        let scratch = tempfile::tempdir().unwrap();
        let d = scratch.path();
        let on_path = d.join("bin/nsys");
        let from_env = d.join("env/nsys");
        // Text order would put 2025.9 first.
        let bundled_old = d.join("opt/nsight-compute/2025.9.1/host/target-linux-x64/nsys");
        let bundled_new = d.join("opt/nsight-compute/2025.10.0/host/target-linux-x64/nsys");
        for p in [&on_path, &from_env, &bundled_old, &bundled_new] {
            executable(p);
        }
        // A newer folder whose nsys cannot run is passed over.
        let not_executable = d.join("opt/nsight-compute/2026.1.0/host/target-linux-x64/nsys");
        std::fs::create_dir_all(not_executable.parent().unwrap()).unwrap();
        std::fs::write(&not_executable, "").unwrap();
        let folders = vec![
            format!("{}/usr/local/cuda-*/bin/nsys", d.display()),
            format!(
                "{}/opt/nsight-compute/*/host/target-linux-x64/nsys",
                d.display()
            ),
        ];
        let mut places = Places {
            explicit: None,
            path_var: Some(d.join("bin").into_os_string()),
            env_value: Some(from_env.clone().into_os_string()),
            folders: folders.clone(),
        };
        assert_eq!(find(&NSYS, &places).unwrap(), on_path);
        places.explicit = Some(from_env.clone());
        assert_eq!(find(&NSYS, &places).unwrap(), from_env, "the flag wins");
        places.explicit = None;
        places.path_var = Some(OsString::from(""));
        assert_eq!(find(&NSYS, &places).unwrap(), from_env, "then the variable");
        places.env_value = None;
        assert_eq!(
            find(&NSYS, &places).unwrap(),
            bundled_new,
            "then the folders, newest first"
        );
    }

    #[test]
    fn missing_tools_and_wrong_paths_say_what_to_do() {
        let places = Places {
            path_var: Some(OsString::from("/nonexistent-dir")),
            folders: vec!["/nonexistent-dir/*/nsys".into()],
            ..Places::default()
        };
        let e = find(&NSYS, &places).unwrap_err().to_string();
        assert!(
            e.starts_with("nsys (Nsight Systems) not found: install Nsight Systems"),
            "{e}"
        );
        assert!(e.contains("--nsys PATH") && !e.contains('\n'), "{e}");
        let e = find(&NCU, &places).unwrap_err().to_string();
        assert!(e.contains("install Nsight Compute"), "{e}");

        let wrong = Places {
            explicit: Some(PathBuf::from("/nonexistent-dir/nsys")),
            ..Places::default()
        };
        let e = find(&NSYS, &wrong).unwrap_err().to_string();
        assert_eq!(e, "--nsys /nonexistent-dir/nsys: no such executable file");
        let wrong_env = Places {
            env_value: Some(OsString::from("/nonexistent-dir/ncu")),
            ..Places::default()
        };
        let e = find(&NCU, &wrong_env).unwrap_err().to_string();
        assert_eq!(e, "NCU=/nonexistent-dir/ncu: no such executable file");
    }
}

//! Finding nsys and ncu. They are often installed off the PATH (the CUDA toolkit puts them in
//! its own bin folder; Nsight Compute even bundles an nsys under its host folder), so look:
//!
//! 1. where `--nsys PATH` / `--ncu PATH` says (a flag typed on this command line is the most
//!    specific ask, so it wins; a wrong path is an error, not a fallback);
//! 2. on the PATH;
//! 3. where the `NSYS` / `NCU` variable says;
//! 4. in the usual install folders, newest version first.

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
    /// Install folders; a component may hold one `*`.
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
        if let Some(p) = expand(pattern).into_iter().find(|p| is_executable(p)) {
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

/// `exe` in a folder of a PATH-style list.
pub fn on_path(exe: &str, path_var: Option<&OsStr>) -> Option<PathBuf> {
    std::env::split_paths(path_var?)
        .filter(|d| !d.as_os_str().is_empty())
        .map(|d| d.join(exe))
        .find(|p| is_executable(p))
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    p.metadata()
        .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        .unwrap_or(false)
}

/// Expand a path whose components may hold one `*` each; matches come newest version first
/// (reverse lexical order of the names, which puts 2025.3 before 2024.1).
pub fn expand(pattern: &str) -> Vec<PathBuf> {
    let mut current = vec![PathBuf::from("/")];
    for component in Path::new(pattern).components().skip(1) {
        let part = component.as_os_str().to_string_lossy();
        let mut next = Vec::new();
        for base in &current {
            if part.contains('*') {
                let mut names: Vec<String> = std::fs::read_dir(base)
                    .into_iter()
                    .flatten()
                    .flatten()
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .filter(|n| wildcard_match(&part, n))
                    .collect();
                names.sort_unstable_by(|a, b| b.cmp(a));
                next.extend(names.into_iter().map(|n| base.join(n)));
            } else {
                let p = base.join(&*part);
                if p.exists() {
                    next.push(p);
                }
            }
        }
        current = next;
    }
    current
}

/// `*` matches any run of characters (one `*` per pattern is all the folder lists need, but any
/// number works).
pub fn wildcard_match(pattern: &str, name: &str) -> bool {
    match pattern.split_once('*') {
        None => pattern == name,
        Some((head, tail)) => {
            name.starts_with(head)
                && (0..=name.len() - head.len()).any(|i| {
                    name.is_char_boundary(head.len() + i)
                        && wildcard_match(tail, &name[head.len() + i..])
                })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn scratch(name: &str) -> PathBuf {
        let d =
            std::env::temp_dir().join(format!("profiling-discover-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    fn executable(p: &Path) {
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o755)).unwrap();
    }

    #[test]
    fn wildcards() {
        assert!(wildcard_match("cuda-*", "cuda-13.0"));
        assert!(!wildcard_match("cuda-*", "cuda"));
        assert!(wildcard_match("*", "anything"));
        assert!(wildcard_match(
            "nsight-systems-*",
            "nsight-systems-2025.3.1"
        ));
        assert!(wildcard_match("a*c", "abbbc") && !wildcard_match("a*c", "abbb"));
    }

    #[test]
    fn search_order_flag_path_env_folders() {
        let d = scratch("order");
        let on_path = d.join("bin/nsys");
        let from_env = d.join("env/nsys");
        let bundled_old = d.join("opt/nsight-compute/2024.1.0/host/target-linux-x64/nsys");
        let bundled_new = d.join("opt/nsight-compute/2025.3.1/host/target-linux-x64/nsys");
        for p in [&on_path, &from_env, &bundled_old, &bundled_new] {
            executable(p);
        }
        let folders = vec![format!(
            "{}/opt/nsight-compute/*/host/target-linux-x64/nsys",
            d.display()
        )];
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
        std::fs::remove_dir_all(&d).unwrap();
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

//! Finding NCCL at run time. cudarc loads it by the names `libnccl.so` (and a few versioned
//! ones, but not NCCL's own soname `libnccl.so.2`) from the loader path; NCCL often lives
//! elsewhere, inside the PyTorch wheel (`site-packages/nvidia/nccl/lib/libnccl.so.2`). So the
//! library is looked for in order:
//!
//! 1. `NCCL_LIBRARY`: the library file itself, or its folder;
//! 2. the loader path (`LD_LIBRARY_PATH`);
//! 3. the system's library folders;
//! 4. python's site-packages, `nvidia/nccl/lib`.
//!
//! When cudarc cannot load it as it is, the process puts a link named `libnccl.so` to the file
//! found in a folder of its own, adds that folder to `LD_LIBRARY_PATH` and starts itself again
//! once (the loader reads its path only at start). NVLink multicast is switched off
//! (`NCCL_NVLS_ENABLE=0`) before NCCL starts: on a shared host it can take GPUs out of service.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

/// Names NCCL's library file goes by, the soname first.
pub const FILE_NAMES: [&str; 2] = ["libnccl.so.2", "libnccl.so"];
/// Set in the environment of the process started again, so it is started again at most once.
pub const RESTARTED: &str = "PERF_LESSONS_NCCL_RESTARTED";

/// Where the search looks, read from the process (or made up by a test).
#[derive(Debug, Clone, Default)]
pub struct SearchPath {
    /// `NCCL_LIBRARY`.
    pub explicit: Option<PathBuf>,
    /// `LD_LIBRARY_PATH`, split.
    pub loader: Vec<PathBuf>,
    pub system: Vec<PathBuf>,
    /// site-packages folders, in the order python would use them.
    pub python: Vec<PathBuf>,
}

/// Where NCCL was found and by which rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Found {
    pub path: PathBuf,
    pub how: &'static str,
}

/// The library file among [FILE_NAMES] in `dir`.
fn in_dir(dir: &Path) -> Option<PathBuf> {
    FILE_NAMES.iter().map(|n| dir.join(n)).find(|p| p.is_file())
}

/// Folders under `parent` whose name starts with `prefix` (a one-level glob), sorted.
fn glob_dirs(parent: &Path, prefix: &str) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = std::fs::read_dir(parent)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with(prefix))
        .map(|e| e.path())
        .filter(|p| p.is_dir())
        .collect();
    out.sort();
    out
}

/// site-packages and dist-packages folders of every python3 under the prefix `root` (`/usr`,
/// `/usr/local`, a virtual environment).
pub fn python_sites_under(root: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for lib in ["lib", "lib64"] {
        for py in glob_dirs(&root.join(lib), "python3") {
            for kind in ["site-packages", "dist-packages"] {
                let d = py.join(kind);
                if d.is_dir() {
                    out.push(d);
                }
            }
        }
    }
    out
}

impl SearchPath {
    /// The search path of this process: its environment, the usual system folders, and the
    /// site-packages of python3 (asked, and looked for under the usual prefixes).
    pub fn from_process() -> SearchPath {
        let var = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty());
        let loader = var("LD_LIBRARY_PATH")
            .map(|v| std::env::split_paths(&v).collect())
            .unwrap_or_default();
        let system = [
            "/usr/lib/x86_64-linux-gnu",
            "/usr/lib/aarch64-linux-gnu",
            "/usr/lib64",
            "/usr/lib",
            "/usr/local/lib",
            "/usr/local/cuda/lib64",
            "/usr/local/nccl/lib",
            "/opt/nccl/lib",
        ]
        .into_iter()
        .map(PathBuf::from)
        .collect();
        let mut python = python_site_packages();
        let mut roots: Vec<PathBuf> = ["VIRTUAL_ENV", "CONDA_PREFIX"]
            .into_iter()
            .filter_map(var)
            .map(PathBuf::from)
            .collect();
        if let Some(home) = var("HOME") {
            roots.push(Path::new(&home).join(".local"));
        }
        roots.extend(["/usr/local", "/usr", "/opt/conda"].map(PathBuf::from));
        for root in roots {
            for site in python_sites_under(&root) {
                if !python.contains(&site) {
                    python.push(site);
                }
            }
        }
        SearchPath {
            explicit: var("NCCL_LIBRARY").map(PathBuf::from),
            loader,
            system,
            python,
        }
    }

    /// NCCL's library file, by the rules in order. `NCCL_LIBRARY` naming nothing usable is an
    /// error of its own (the user asked for that one).
    pub fn find(&self) -> Result<Option<Found>, String> {
        if let Some(p) = &self.explicit {
            let hit = if p.is_dir() {
                in_dir(p)
            } else {
                p.is_file().then(|| p.clone())
            };
            return match hit {
                Some(path) => Ok(Some(Found {
                    path,
                    how: "NCCL_LIBRARY",
                })),
                None => Err(format!(
                    "NCCL_LIBRARY={} is neither libnccl.so.2 nor a folder holding it",
                    p.display()
                )),
            };
        }
        let rules: [(&'static str, Vec<PathBuf>); 3] = [
            ("the loader path", self.loader.clone()),
            ("the system's library folders", self.system.clone()),
            (
                "python's site-packages",
                self.python
                    .iter()
                    .map(|s| s.join("nvidia").join("nccl").join("lib"))
                    .collect(),
            ),
        ];
        for (how, dirs) in rules {
            if let Some(path) = dirs.iter().find_map(|d| in_dir(d)) {
                return Ok(Some(Found { path, how }));
            }
        }
        Ok(None)
    }
}

/// site-packages folders python3 itself reports (none when there is no python3).
fn python_site_packages() -> Vec<PathBuf> {
    let out = std::process::Command::new("python3")
        .args([
            "-c",
            "import site,sys; print('\\n'.join(site.getsitepackages() + [site.getusersitepackages()]))",
        ])
        .stderr(std::process::Stdio::null())
        .output();
    match out {
        Ok(o) if o.status.success() => String::from_utf8_lossy(&o.stdout)
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .map(PathBuf::from)
            .collect(),
        _ => Vec::new(),
    }
}

/// The folder holding a link `libnccl.so` -> `library`, made for this library file.
pub fn link_folder(library: &Path, base: &Path) -> std::io::Result<PathBuf> {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    library.hash(&mut h);
    let dir = base.join(format!("perf-lessons-nccl-{:016x}", h.finish()));
    std::fs::create_dir_all(&dir)?;
    let link = dir.join("libnccl.so");
    if std::fs::read_link(&link).ok().as_deref() != Some(library) {
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(library, &link)?;
    }
    Ok(dir)
}

/// `LD_LIBRARY_PATH` with `first` in front of `current`.
pub fn loader_path_with(first: &[PathBuf], current: Option<OsString>) -> Result<OsString, String> {
    let rest: Vec<PathBuf> = current
        .map(|c| std::env::split_paths(&c).collect())
        .unwrap_or_default();
    std::env::join_paths(first.iter().chain(rest.iter())).map_err(|e| e.to_string())
}

/// What to tell the user when NCCL is not there.
pub fn missing_message(detail: &str) -> String {
    format!(
        "NCCL could not be loaded{detail}: set NCCL_LIBRARY to libnccl.so.2 (PyTorch's wheel has it in site-packages/nvidia/nccl/lib), or install NCCL (pip install nvidia-nccl-cu13, or the system's libnccl2)"
    )
}

/// Switch NVLink multicast off for this process and every process it starts, before NCCL is
/// initialized.
pub fn disable_nvlink_multicast() {
    std::env::set_var("NCCL_NVLS_ENABLE", "0");
}

/// Give every collective `channels` channels (NCCL's CTAs per collective): NCCL_MIN_NCHANNELS
/// and NCCL_MAX_NCHANNELS, unless the user set either, whose values then stand. Read when the
/// first communicator is made, so call it before; the JSON records what NCCL was told.
pub fn set_channels(channels: u32) {
    const VARS: [&str; 2] = ["NCCL_MIN_NCHANNELS", "NCCL_MAX_NCHANNELS"];
    if VARS.iter().all(|v| std::env::var_os(v).is_none()) {
        for v in VARS {
            std::env::set_var(v, channels.to_string());
        }
    }
}

fn cudarc_can_load() -> bool {
    // SAFETY: only tries to dlopen the library by the names cudarc uses.
    unsafe { cudarc::nccl::sys::is_culib_present() }
}

/// Make NCCL loadable by cudarc, or say in one line why it is not. May start the process
/// again (it does not return then); call it first thing in `main`, before any thread exists.
pub fn ensure_loadable() -> Result<(), String> {
    disable_nvlink_multicast();
    if cudarc_can_load() {
        return Ok(());
    }
    let found = SearchPath::from_process()
        .find()
        .map_err(|e| missing_message(&format!(" ({e})")))?;
    let Some(found) = found else {
        return Err(missing_message(
            " (looked in NCCL_LIBRARY, LD_LIBRARY_PATH, the system's library folders and python's site-packages)",
        ));
    };
    if std::env::var_os(RESTARTED).is_some() {
        return Err(missing_message(&format!(
            " (found {} through {}, but it does not load: is it for this machine's architecture and CUDA?)",
            found.path.display(),
            found.how
        )));
    }
    let folder = link_folder(&found.path, &std::env::temp_dir()).map_err(|e| {
        missing_message(&format!(
            " (found {}, but linking it failed: {e})",
            found.path.display()
        ))
    })?;
    let mut first = vec![folder];
    if let Some(dir) = found.path.parent() {
        first.push(dir.to_path_buf());
    }
    let path = loader_path_with(&first, std::env::var_os("LD_LIBRARY_PATH"))
        .map_err(|e| missing_message(&format!(" ({e})")))?;
    let exe = std::env::current_exe().map_err(|e| missing_message(&format!(" ({e})")))?;
    use std::os::unix::process::CommandExt;
    let error = std::process::Command::new(exe)
        .args(std::env::args_os().skip(1))
        .env("LD_LIBRARY_PATH", path)
        .env(RESTARTED, "1")
        .exec();
    Err(missing_message(&format!(
        " (found {}, but starting again with it on the loader path failed: {error})",
        found.path.display()
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("nccl-search-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    fn library_in(dir: &Path, name: &str) -> PathBuf {
        std::fs::create_dir_all(dir).unwrap();
        let p = dir.join(name);
        std::fs::write(&p, b"not really a library").unwrap();
        p
    }

    #[test]
    fn the_search_goes_explicit_loader_system_python() {
        let root = temp("order");
        let (explicit, loader, system, site) = (
            root.join("explicit"),
            root.join("loader"),
            root.join("system"),
            root.join("py/site-packages"),
        );
        let py_lib = library_in(&site.join("nvidia/nccl/lib"), "libnccl.so.2");
        let mut search = SearchPath {
            explicit: None,
            loader: vec![root.join("empty"), loader.clone()],
            system: vec![system.clone()],
            python: vec![root.join("other-site"), site.clone()],
        };
        let found = |s: &SearchPath| s.find().unwrap().unwrap();
        assert_eq!(found(&search).path, py_lib);
        assert_eq!(found(&search).how, "python's site-packages");
        let sys_lib = library_in(&system, "libnccl.so");
        assert_eq!(found(&search).path, sys_lib);
        let ld_lib = library_in(&loader, "libnccl.so.2");
        assert_eq!(
            found(&search),
            Found {
                path: ld_lib,
                how: "the loader path"
            }
        );
        let own = library_in(&explicit, "libnccl.so.2");
        search.explicit = Some(explicit.clone());
        assert_eq!(found(&search).path, own, "a folder in NCCL_LIBRARY");
        search.explicit = Some(own.clone());
        assert_eq!(found(&search).how, "NCCL_LIBRARY");
        // NCCL_LIBRARY naming nothing is an error, not a fall back to the others.
        search.explicit = Some(root.join("nothing-here"));
        assert!(search.find().unwrap_err().contains("NCCL_LIBRARY"));
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn nothing_found_is_none() {
        let root = temp("none");
        let search = SearchPath {
            loader: vec![root.clone()],
            system: vec![root.join("missing")],
            python: vec![root.clone()],
            ..SearchPath::default()
        };
        assert_eq!(search.find(), Ok(None));
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn python_sites_are_globbed_under_a_prefix() {
        let root = temp("sites");
        for d in [
            "lib/python3.12/site-packages",
            "lib/python3.10/dist-packages",
            "lib/python2.7/site-packages",
            "lib64/python3.11/site-packages",
        ] {
            std::fs::create_dir_all(root.join(d)).unwrap();
        }
        let sites = python_sites_under(&root);
        let rel: Vec<String> = sites
            .iter()
            .map(|p| p.strip_prefix(&root).unwrap().display().to_string())
            .collect();
        assert_eq!(
            rel,
            [
                "lib/python3.10/dist-packages",
                "lib/python3.12/site-packages",
                "lib64/python3.11/site-packages"
            ]
        );
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn the_link_is_named_as_cudarc_looks_for_it() {
        let root = temp("link");
        let lib = library_in(&root.join("wheel"), "libnccl.so.2");
        let folder = link_folder(&lib, &root).unwrap();
        assert_eq!(std::fs::read_link(folder.join("libnccl.so")).unwrap(), lib);
        assert_eq!(
            link_folder(&lib, &root).unwrap(),
            folder,
            "made once, reused"
        );
        let path = loader_path_with(std::slice::from_ref(&folder), Some("/a:/b".into())).unwrap();
        let parts: Vec<PathBuf> = std::env::split_paths(&path).collect();
        assert_eq!(parts, [folder, PathBuf::from("/a"), PathBuf::from("/b")]);
        std::fs::remove_dir_all(&root).unwrap();
    }
}

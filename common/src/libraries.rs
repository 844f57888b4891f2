//! The CUDA libraries a lesson's process loads, where the dynamic loader finds them, and reading
//! them into the page cache ahead of the processes that load them.
//!
//! A machine that never ran the chapter reads each library from disk the first time a process
//! maps it: the driver at the first context, NVRTC and its builtins at the first compile,
//! cuBLAS (and cuBLASLt, most of the bytes) at the first handle. A program that starts several
//! such processes in turn, like the compare, knows which libraries they will load and can have
//! have them read while the first process works: [read_ahead] reads each file through once on a
//! thread of its own, at idle I/O priority (a plain read, not `posix_fadvise(WILLNEED)`, which a
//! file system may take as a hint and drop: a read leaves the pages in the cache for certain).
//! On a machine whose page cache holds them it costs a pass over memory.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// The CUDA major version the bindings are built for (cudarc's `cuda-13000`), the version in
/// the file names of the toolkit's libraries.
pub const CUDA_MAJOR: &str = "13";

/// A shared library as the loader finds it: a file named `stem`, or `stem.version` with any
/// further version parts (`libnvrtc.so.13`, `libnvrtc.so.13.0.88`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Library {
    pub stem: &'static str,
    pub version: &'static str,
}

impl Library {
    /// Whether a file of this name is this library (a name, not a path).
    pub fn matches(&self, file_name: &str) -> bool {
        let Some(rest) = file_name.strip_prefix(self.stem) else {
            return false;
        };
        let Some(version) = rest.strip_prefix('.') else {
            return rest.is_empty();
        };
        version == self.version
            || version
                .strip_prefix(self.version)
                .is_some_and(|more| more.starts_with('.'))
    }
}

/// The driver, which every process that opens a GPU loads.
pub const DRIVER: &[Library] = &[Library {
    stem: "libcuda.so",
    version: "1",
}];

/// NVML, which [crate::Gpu::open] loads for clocks and names.
pub const NVML: &[Library] = &[Library {
    stem: "libnvidia-ml.so",
    version: "1",
}];

/// NVRTC and the builtins it loads at its first compile.
pub const NVRTC: &[Library] = &[
    Library {
        stem: "libnvrtc.so",
        version: CUDA_MAJOR,
    },
    Library {
        stem: "libnvrtc-builtins.so",
        version: CUDA_MAJOR,
    },
];

/// cuBLAS and cuBLASLt, which it loads (most of the bytes: its GEMM kernels).
pub const CUBLAS: &[Library] = &[
    Library {
        stem: "libcublas.so",
        version: CUDA_MAJOR,
    },
    Library {
        stem: "libcublasLt.so",
        version: CUDA_MAJOR,
    },
];

/// The toolkit folders [crate::gpu::ensure_library] looks in when the loader finds nothing:
/// `$CUDA_HOME` and `$CUDA_PATH`, then `/usr/local/cuda`.
pub fn toolkit_dirs() -> Vec<PathBuf> {
    let mut roots: Vec<PathBuf> = ["CUDA_HOME", "CUDA_PATH"]
        .iter()
        .filter_map(|var| std::env::var_os(var).map(PathBuf::from))
        .collect();
    roots.push(PathBuf::from("/usr/local/cuda"));
    roots
        .iter()
        .flat_map(|root| [root.join("lib64"), root.join("targets/x86_64-linux/lib")])
        .collect()
}

/// The paths a loader cache (`/etc/ld.so.cache`) names: its string table holds each library's
/// name and its full path, NUL-terminated; the paths are the strings that start with '/'.
pub fn cache_paths(cache: &[u8]) -> Vec<PathBuf> {
    cache
        .split(|&b| b == 0)
        .filter(|s| s.first() == Some(&b'/'))
        .filter_map(|s| std::str::from_utf8(s).ok())
        .map(PathBuf::from)
        .collect()
}

/// Where to look, in the loader's order: `$LD_LIBRARY_PATH`'s folders, the loader cache's
/// files, the default folders, then the toolkit folders.
#[derive(Debug, Clone, Default)]
pub struct SearchPath {
    pub dirs_first: Vec<PathBuf>,
    pub cached: Vec<PathBuf>,
    pub dirs_last: Vec<PathBuf>,
}

impl SearchPath {
    /// This process's: its environment, this machine's loader cache and folders.
    pub fn of_this_process() -> SearchPath {
        let dirs_first = std::env::var_os("LD_LIBRARY_PATH")
            .map(|p| std::env::split_paths(&p).collect())
            .unwrap_or_default();
        let cached = std::fs::read("/etc/ld.so.cache")
            .map(|bytes| cache_paths(&bytes))
            .unwrap_or_default();
        let mut dirs_last: Vec<PathBuf> = [
            "/lib/x86_64-linux-gnu",
            "/usr/lib/x86_64-linux-gnu",
            "/lib64",
            "/usr/lib64",
            "/lib",
            "/usr/lib",
        ]
        .iter()
        .map(PathBuf::from)
        .collect();
        dirs_last.extend(toolkit_dirs());
        SearchPath {
            dirs_first,
            cached,
            dirs_last,
        }
    }

    /// The file `library` resolves to (symbolic links followed), if any.
    pub fn locate(&self, library: &Library) -> Option<PathBuf> {
        let in_dir = |dir: &Path| -> Option<PathBuf> {
            let mut names: Vec<String> = std::fs::read_dir(dir)
                .ok()?
                .flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| library.matches(n))
                .collect();
            // The shortest name is the one the loader asks for (`libnvrtc.so.13`).
            names.sort_by_key(|n| (n.len(), n.clone()));
            names
                .iter()
                .find_map(|n| std::fs::canonicalize(dir.join(n)).ok())
        };
        let cached = || {
            self.cached
                .iter()
                .filter(|p| {
                    p.file_name()
                        .is_some_and(|n| library.matches(&n.to_string_lossy()))
                })
                .find_map(|p| std::fs::canonicalize(p).ok())
        };
        self.dirs_first
            .iter()
            .find_map(|d| in_dir(d))
            .or_else(cached)
            .or_else(|| self.dirs_last.iter().find_map(|d| in_dir(d)))
    }

    /// The files of `libraries`, in order, each once; those not found are left out.
    pub fn files(&self, libraries: &[Library]) -> Vec<PathBuf> {
        let mut files: Vec<PathBuf> = Vec::new();
        for path in libraries.iter().filter_map(|l| self.locate(l)) {
            if !files.contains(&path) {
                files.push(path);
            }
        }
        files
    }
}

/// What [read_ahead] read: the files' names (not their folders), their bytes in all, and how
/// long finding and reading them took.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ReadAhead {
    pub files: Vec<String>,
    pub bytes: u64,
    pub seconds: f64,
}

/// Read the files `find` names through, in order, so that they are in the page cache, on a
/// thread of its own at idle I/O priority and the lowest CPU priority, so that a process started
/// meanwhile that reads them at normal priority comes first. `find` runs on that thread too
/// (the search reads folders and the loader cache). Returns at once; the thread's answer says
/// what was read (a file that cannot be opened is skipped: the process that loads it will
/// say).
pub fn read_ahead(
    find: impl FnOnce() -> Vec<PathBuf> + Send + 'static,
) -> std::thread::JoinHandle<ReadAhead> {
    std::thread::spawn(move || {
        let start = std::time::Instant::now();
        lower_this_threads_priority();
        let mut done = ReadAhead::default();
        for path in &find() {
            if let Some(bytes) = read_through(path) {
                let name = path.file_name().unwrap_or(path.as_os_str());
                done.files.push(name.to_string_lossy().into_owned());
                done.bytes += bytes;
            }
        }
        done.seconds = start.elapsed().as_secs_f64();
        done
    })
}

/// Read the whole file, a chunk at a time into one buffer: its size, or None where it cannot be
/// opened or read.
fn read_through(path: &Path) -> Option<u64> {
    use std::io::Read;
    let mut file = std::fs::File::open(path).ok()?;
    let mut chunk = vec![0u8; 4 << 20];
    let mut bytes = 0u64;
    loop {
        match file.read(&mut chunk) {
            Ok(0) => return Some(bytes),
            Ok(n) => bytes += n as u64,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => return None,
        }
    }
}

/// Idle I/O class and nice 19 for the calling thread only (Linux keeps both per thread).
/// Best effort: a system that refuses either still reads ahead, at normal priority.
fn lower_this_threads_priority() {
    const IOPRIO_WHO_PROCESS: libc::c_long = 1;
    const IOPRIO_CLASS_IDLE: libc::c_long = 3;
    const IOPRIO_CLASS_SHIFT: libc::c_long = 13;
    // SAFETY: plain system calls on the calling thread (who 0), no memory passed.
    unsafe {
        libc::syscall(
            libc::SYS_ioprio_set,
            IOPRIO_WHO_PROCESS,
            0 as libc::c_long,
            IOPRIO_CLASS_IDLE << IOPRIO_CLASS_SHIFT,
        );
        libc::setpriority(libc::PRIO_PROCESS, 0, 19);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NVRTC_13: Library = Library {
        stem: "libnvrtc.so",
        version: "13",
    };

    #[test]
    fn a_library_is_its_stem_or_its_version() {
        for name in ["libnvrtc.so", "libnvrtc.so.13", "libnvrtc.so.13.0.88"] {
            assert!(NVRTC_13.matches(name), "{name}");
        }
        for name in [
            "libnvrtc.so.12",
            "libnvrtc.so.130",
            "libnvrtc.so.1",
            "libnvrtc-builtins.so.13.0",
            "libnvrtc.so13",
            "libnvrtc.a",
        ] {
            assert!(!NVRTC_13.matches(name), "{name}");
        }
        assert!(!CUBLAS[0].matches("libcublasLt.so.13"));
        assert!(!DRIVER[0].matches("libcudart.so.13"));
        assert!(DRIVER[0].matches("libcuda.so.1"));
    }

    #[test]
    fn the_cache_names_its_paths() {
        let mut cache = b"glibc-ld.so.cache1.1\0\x03\0\0\0".to_vec();
        for s in [
            "libnvrtc.so.13",
            "/usr/local/cuda/lib64/libnvrtc.so.13",
            "libcuda.so.1",
            "/usr/lib/x86_64-linux-gnu/libcuda.so.1",
        ] {
            cache.extend_from_slice(s.as_bytes());
            cache.push(0);
        }
        assert_eq!(
            cache_paths(&cache),
            [
                PathBuf::from("/usr/local/cuda/lib64/libnvrtc.so.13"),
                PathBuf::from("/usr/lib/x86_64-linux-gnu/libcuda.so.1"),
            ]
        );
        assert!(cache_paths(b"").is_empty());
    }

    /// A folder holding `names` (real files of `len` bytes) and `links` (name -> target).
    fn folder(names: &[(&str, usize)], links: &[(&str, &str)]) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        for (n, len) in names {
            std::fs::write(dir.path().join(n), vec![7u8; *len]).unwrap();
        }
        for (n, target) in links {
            std::os::unix::fs::symlink(target, dir.path().join(n)).unwrap();
        }
        dir
    }

    #[test]
    fn the_loader_order_decides_and_links_are_followed() {
        let first = folder(
            &[("libnvrtc.so.13.0.88", 10)],
            &[("libnvrtc.so.13", "libnvrtc.so.13.0.88")],
        );
        let cached = folder(&[("libnvrtc.so.13", 20), ("libcublas.so.13", 30)], &[]);
        let last = folder(&[("libnvrtc.so.13", 40), ("libcublasLt.so.13", 50)], &[]);
        let search = SearchPath {
            dirs_first: vec![first.path().into(), PathBuf::from("/no/such/folder")],
            cached: vec![
                cached.path().join("libnvrtc.so.13"),
                cached.path().join("libcublas.so.13"),
            ],
            dirs_last: vec![last.path().into()],
        };
        let real = |dir: &tempfile::TempDir, n: &str| std::fs::canonicalize(dir.path().join(n));
        assert_eq!(
            search.locate(&NVRTC_13),
            Some(real(&first, "libnvrtc.so.13.0.88").unwrap())
        );
        assert_eq!(
            search.files(CUBLAS),
            [
                real(&cached, "libcublas.so.13").unwrap(),
                real(&last, "libcublasLt.so.13").unwrap()
            ]
        );
        // Named twice, read once; a library found nowhere is left out.
        let twice = [NVRTC_13, DRIVER[0], NVRTC_13];
        assert_eq!(search.files(&twice).len(), 1);
    }

    #[test]
    fn this_machines_loader_finds_its_c_library() {
        let libc = Library {
            stem: "libc.so",
            version: "6",
        };
        let found = SearchPath::of_this_process().locate(&libc);
        assert!(found.as_ref().is_some_and(|p| p.is_file()), "{found:?}");
    }

    #[test]
    fn a_stale_cache_entry_is_passed_over() {
        let last = folder(&[("libcuda.so.1", 5)], &[]);
        let search = SearchPath {
            dirs_first: vec![],
            cached: vec![PathBuf::from("/no/such/folder/libcuda.so.1")],
            dirs_last: vec![last.path().into()],
        };
        assert_eq!(
            search.locate(&DRIVER[0]),
            std::fs::canonicalize(last.path().join("libcuda.so.1")).ok()
        );
    }

    #[test]
    fn reading_ahead_counts_the_files_it_could_open() {
        let dir = folder(&[("a.so", 4096), ("b.so", 100)], &[]);
        let files = vec![
            dir.path().join("a.so"),
            dir.path().join("missing.so"),
            dir.path().join("b.so"),
        ];
        let done = read_ahead(move || files).join().unwrap();
        assert_eq!(
            (&done.files[..], done.bytes),
            (&["a.so".to_string(), "b.so".into()][..], 4196)
        );
        assert!(done.seconds >= 0.0 && done.seconds < 10.0, "{done:?}");
    }
}

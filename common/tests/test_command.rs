//! The README's test command (`scripts/test`) on a fresh machine: it installs what the tests
//! drive (python3, Chromium, Slurm and munge) where it can, as root with apt-get, and otherwise stops with one
//! line naming what to install; with everything there it runs `cargo test --workspace`. Run
//! here with stand-ins for every program it calls, on a PATH of only those, and without the pip
//! package's step (`PERF_LESSONS_SKIP_WHEEL=1`: it builds a real wheel, which the CI run of the
//! command does).

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/test")
}

/// A folder of stand-in programs, each a shell script; a stand-in that logs writes its name
/// and arguments to `log`.
struct Bin {
    dir: PathBuf,
    log: PathBuf,
}

impl Bin {
    fn new(name: &str) -> Bin {
        let dir = std::env::temp_dir().join(format!("test-command-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let bin = Bin {
            log: dir.join("log"),
            dir,
        };
        // What the script needs from the system, whatever the test leaves out.
        common::testing::link_system_tools(&bin.dir, &["bash", "dirname"]);
        bin
    }

    fn add(&self, name: &str, body: &str) -> &Bin {
        let path = self.dir.join(name);
        std::fs::write(&path, format!("#!/bin/bash\n{body}\n")).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        self
    }

    fn logging(&self, name: &str) -> &Bin {
        self.add(
            name,
            &format!("echo \"{name} $*\" >> {}", self.log.display()),
        )
    }

    /// A Slurm that answers: its daemons, the client that submits, and munge.
    fn slurm(&self) -> &Bin {
        for name in ["slurmctld", "slurmd", "sbatch", "munged"] {
            self.logging(name);
        }
        self
    }

    fn user(&self, uid: u32) -> &Bin {
        self.add("id", &format!("echo {uid}"))
    }

    fn run(&self, env: &[(&str, &str)]) -> (Output, String) {
        let out = Command::new(self.dir.join("bash"))
            .arg(script())
            .arg("--quiet")
            .env_clear()
            .env("PATH", &self.dir)
            .env("PERF_LESSONS_SKIP_WHEEL", "1")
            .envs(env.iter().copied())
            .output()
            .unwrap();
        let log = std::fs::read_to_string(&self.log).unwrap_or_default();
        (out, log)
    }
}

impl Drop for Bin {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn with_everything_there_it_runs_the_workspace_tests() {
    let bin = Bin::new("ready");
    bin.user(1000)
        .logging("python3")
        .logging("chromium")
        .slurm()
        .logging("cargo");
    let (out, log) = bin.run(&[]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(log, "cargo test --workspace --locked --quiet\n");
    assert!(
        stderr(&out).contains("the pip package was not tried (PERF_LESSONS_SKIP_WHEEL=1)"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn without_root_it_names_what_to_install_in_one_line() {
    let bin = Bin::new("user");
    bin.user(1000).logging("apt-get").logging("cargo");
    let (out, log) = bin.run(&[]);
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.starts_with(
            "error: the tests need python3 chromium slurmctld slurmd slurm-client munge: install them"
        ),
        "{err}"
    );
    assert!(
        err.trim_end().ends_with(
            "(or set PERF_LESSONS_SKIP_BROWSER=1 PERF_LESSONS_SKIP_SLURM=1 to skip the tests that need them)"
        ),
        "{err}"
    );
    assert_eq!(log, "", "nothing installed, no tests run");
    // The pip package's step needs python3's venv as well.
    let (out, _) = bin.run(&[("PERF_LESSONS_SKIP_WHEEL", "")]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        err.starts_with(
            "error: the tests need python3 python3-venv chromium slurmctld slurmd slurm-client munge: install them"
        ),
        "{err}"
    );
    // Skipping the browser test on purpose needs no Chromium, the Slurm test no Slurm.
    bin.logging("python3");
    let (out, _) = bin.run(&[("PERF_LESSONS_SKIP_BROWSER", "1")]);
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert!(
        err.starts_with("error: the tests need slurmctld slurmd slurm-client munge: install them"),
        "{err}"
    );
    let (out, log) = bin.run(&[
        ("PERF_LESSONS_SKIP_BROWSER", "1"),
        ("PERF_LESSONS_SKIP_SLURM", "1"),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(log, "cargo test --workspace --locked --quiet\n");
}

#[test]
fn as_root_it_installs_what_is_missing_then_tests() {
    let bin = Bin::new("root");
    bin.user(0).logging("python3").logging("cargo").add(
        "apt-get",
        &format!("echo \"apt-get $*\" >> {}", bin.log.display()),
    );
    let (out, log) = bin.run(&[]);
    assert!(out.status.success(), "{}", stderr(&out));
    let lines: Vec<&str> = log.lines().collect();
    assert_eq!(
        lines,
        [
            "apt-get update -qq",
            "apt-get install -y -qq chromium slurmctld slurmd slurm-client munge",
            "cargo test --workspace --locked --quiet"
        ]
    );
    // An install that fails stops the command with one line.
    bin.add("apt-get", "exit 100");
    let (out, _) = bin.run(&[]);
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert!(
        err.lines()
            .last()
            .unwrap()
            .starts_with("error: apt-get could not install chromium slurmctld"),
        "{err}"
    );
}

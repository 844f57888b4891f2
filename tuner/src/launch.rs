//! How a trial's process starts: spawned as the command says, or, for a Python program, forked
//! from a parent that has already imported the program's modules ([ForkServer]). Either way the
//! trial is a process of its own: its own process group (killed whole at the time limit), CUDA
//! context, environment, working folder, stdout and stderr files.
//!
//! Why fork: a Python training program spends seconds importing its framework (PyTorch and
//! torchvision take 8 to 12 s on a GPU machine) before it touches the GPU, in every trial. The
//! fork server pays that once. It never initializes CUDA (it checks that the CUDA driver is not
//! even loaded after the imports, and gives up otherwise), so each forked trial creates its own
//! CUDA context exactly as a fresh process would. A program that calls `fork_here()`
//! (perf_lessons') is run once up to there, and its trials forked from that point: what it builds
//! above the call (a model on the CPU) is built once.

use std::collections::HashMap;
use std::ffi::OsString;
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::par::lock;
use common::process::{spawn_in_group, Exit};
use serde::Deserialize;

const SERVER: &str = include_str!("forkserver.py");

/// What to start: the argv (`argv[0]` the program), its environment (added to the tuner's
/// own), the CPU cores it may run on (None: the tuner's own), and where its output goes.
pub struct Spawn<'a> {
    pub argv: &'a [String],
    pub env: Vec<(String, OsString)>,
    pub cpus: Option<&'a [usize]>,
    pub stdout: &'a Path,
    pub stderr: &'a Path,
}

/// A started trial process.
pub enum Running {
    Spawned(Child),
    Forked { pid: u32, server: Arc<ForkServer> },
}

impl Running {
    /// Its process group (its pid: it leads the group).
    pub fn pgid(&self) -> u32 {
        match self {
            Running::Spawned(c) => c.id(),
            Running::Forked { pid, .. } => *pid,
        }
    }

    /// Its exit, once it has one.
    pub fn exited(&mut self) -> std::io::Result<Option<Exit>> {
        match self {
            Running::Spawned(c) => Ok(c.try_wait()?.map(Exit::of)),
            Running::Forked { pid, server } => {
                let ev = lock(&server.exits);
                // The parent died: its trials were killed with it.
                let killed = ev.gone.then_some(Exit::Signal(9));
                Ok(ev.exited.get(pid).copied().or(killed))
            }
        }
    }
}

/// Where trials come from.
pub enum Launcher {
    /// Every trial is the command, spawned.
    Spawn,
    /// Python trials forked from a server that imported the program's modules.
    Fork(Arc<ForkServer>),
}

impl Launcher {
    pub fn start(&self, s: &Spawn) -> std::io::Result<Running> {
        match self {
            Launcher::Spawn => {
                let mut cmd = Command::new(&s.argv[0]);
                cmd.args(&s.argv[1..])
                    .envs(s.env.iter().map(|(k, v)| (k, v)))
                    .stdin(Stdio::null())
                    .stdout(std::fs::File::create(s.stdout)?)
                    .stderr(std::fs::File::create(s.stderr)?);
                if let Some(cores) = s.cpus {
                    // Set in the child before exec, so every process the program starts (its
                    // data-loader workers) inherits it.
                    let mut set = nix::sched::CpuSet::new();
                    for &c in cores {
                        // Refused where a core is past what the kernel's set can hold.
                        set.set(c).map_err(std::io::Error::from)?;
                    }
                    // SAFETY: sched_setaffinity is one system call, async-signal-safe, and
                    // touches nothing of the parent's; the set was built before the fork.
                    unsafe {
                        use std::os::unix::process::CommandExt;
                        cmd.pre_exec(move || {
                            nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(0), &set)
                                .map_err(std::io::Error::from)
                        });
                    }
                }
                spawn_in_group(cmd).map(Running::Spawned)
            }
            Launcher::Fork(server) => {
                // The child leads a session of its own.
                let pid = server.fork(s)?;
                common::process::started_group(pid);
                Ok(Running::Forked {
                    pid,
                    server: server.clone(),
                })
            }
        }
    }

    /// How trials start, in words (for the report).
    pub fn describe(&self) -> String {
        match self {
            Launcher::Spawn => "each trial spawned as the command says".into(),
            Launcher::Fork(s) => format!(
                "each trial forked from a Python parent that imported the program's modules once ({:.1} s: {}){}",
                s.ready.seconds,
                s.ready.imported.join(", "),
                match s.ready.fork_here {
                    true => ", and ran the program once up to its fork_here()",
                    false => "",
                }
            ),
        }
    }
}

/// The Python program a command runs, where it is one the fork server can run as `python3`
/// would: `PYTHON SCRIPT.py ARGS` or `PYTHON -m MODULE ARGS`, with no interpreter options.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PythonProgram {
    pub interpreter: String,
    /// `["SCRIPT"]` or `["-m", "MODULE"]`.
    pub target: Vec<String>,
}

impl PythonProgram {
    pub fn of(argv: &[String]) -> Option<PythonProgram> {
        let name = Path::new(argv.first()?).file_name()?.to_str()?;
        // `python`, `python3`, `python3.12`.
        let version = name.strip_prefix("python")?;
        if !version.chars().all(|c| c.is_ascii_digit() || c == '.') {
            return None;
        }
        let target = match argv.get(1)?.as_str() {
            "-m" => vec!["-m".to_string(), argv.get(2)?.clone()],
            s if s.starts_with('-') => return None,
            s => vec![s.to_string()],
        };
        // Placeholders in the script's name: each trial runs another program.
        if target.iter().any(|t| t.contains('{')) {
            return None;
        }
        Some(PythonProgram {
            interpreter: argv[0].clone(),
            target,
        })
    }

    /// `sys.argv` of the forked child, from the command's whole argv: what follows the
    /// interpreter (for `-m`, the module's name stands where runpy puts the module's file).
    fn child_argv(&self, argv: &[String]) -> Vec<String> {
        argv.get(self.target.len()..).unwrap_or_default().to_vec()
    }
}

/// A line of the server's: the first says whether it is ready (and what it imported, in how
/// long); each later one answers a fork request (`started` or `error`) or tells of a trial's
/// exit.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct Message {
    pub ready: bool,
    pub why: Option<String>,
    pub seconds: f64,
    pub imported: Vec<String>,
    /// The program runs up to its `fork_here()` before the first trial is forked.
    pub fork_here: bool,
    /// It is running there now, for the first request.
    pub preparing: bool,
    pub started: Option<u32>,
    pub error: Option<String>,
    pub exited: Option<u32>,
    pub code: Option<i32>,
    pub signal: Option<i32>,
}

#[derive(Default)]
struct Exits {
    exited: HashMap<u32, Exit>,
    /// The server is gone: its children are killed with it.
    gone: bool,
}

/// A Python parent process that imported the program's modules and forks trials on request.
pub struct ForkServer {
    program: PythonProgram,
    /// The parent, its stdin the requests' way in.
    server: Child,
    /// Its lines other than exits, in order: the first (ready or not), then the answers to
    /// fork requests.
    answers: Mutex<Receiver<Message>>,
    exits: Arc<Mutex<Exits>>,
    /// How long the program may take to reach its `fork_here()` (a trial's time limit).
    limit: Duration,
    /// What it said once its imports were done.
    pub ready: Message,
}

impl ForkServer {
    /// Start the server for `program` in the current folder and wait (at most `limit`) until it
    /// has imported the program's modules. Err says why trials cannot be forked (the caller
    /// spawns them instead, and says so).
    pub fn start(
        program: PythonProgram,
        stderr: &Path,
        limit: Duration,
    ) -> Result<ForkServer, String> {
        let err = std::fs::File::create(stderr)
            .map_err(|e| format!("cannot create {}: {e}", stderr.display()))?;
        let mut cmd = Command::new(&program.interpreter);
        cmd.arg("-c")
            .arg(SERVER)
            .args(&program.target)
            .env("PYTHONUNBUFFERED", "1")
            .env("NCCL_NVLS_ENABLE", "0")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(err);
        let mut child = spawn_in_group(cmd)
            .map_err(|e| format!("could not start {}: {e}", program.interpreter))?;
        let stdout = child.stdout.take().expect("piped");
        let (tx, rx) = std::sync::mpsc::channel();
        let exits: Arc<Mutex<Exits>> = Arc::default();
        let shared = exits.clone();
        std::thread::Builder::new()
            .name("fork-server".into())
            .spawn(move || {
                let mut first = true;
                let lines = BufReader::new(stdout).lines().map_while(Result::ok);
                for v in lines.filter_map(|l| serde_json::from_str::<Message>(&l).ok()) {
                    match v.exited {
                        // A trial's exit; the first line says whether the parent is ready.
                        Some(pid) if !first => {
                            let exit = (v.code.map(Exit::Code)).or(v.signal.map(Exit::Signal));
                            lock(&shared)
                                .exited
                                .insert(pid, exit.unwrap_or(Exit::Code(-1)));
                        }
                        _ => {
                            first = false;
                            let _ = tx.send(v);
                        }
                    }
                }
                lock(&shared).gone = true;
            })
            .map_err(|e| format!("could not start the fork server's reader: {e}"))?;
        // Its first line, or the end of its output (it exited), or nothing within the limit.
        let first = match rx.recv_timeout(limit) {
            Ok(first) if first.ready => first,
            answer => {
                common::process::kill_group(child.id());
                let status = child.wait();
                return Err(match (answer, status) {
                    (Ok(first), _) => first.why.unwrap_or_else(|| "no reason given".into()),
                    (Err(RecvTimeoutError::Disconnected), Ok(status)) => format!(
                        "the Python parent exited ({status}) before it was ready; see {}",
                        stderr.display()
                    ),
                    _ => format!(
                        "the Python parent was not ready within {:.0} s",
                        limit.as_secs_f64()
                    ),
                });
            }
        };
        Ok(ForkServer {
            ready: first,
            program,
            server: child,
            answers: Mutex::new(rx),
            exits,
            limit,
        })
    }

    /// Fork one trial; its pid (its process group's id: it leads the group).
    fn fork(&self, s: &Spawn) -> std::io::Result<u32> {
        // The tuner's environment with the trial's on top.
        let text = |v: &std::ffi::OsStr| v.to_string_lossy().into_owned();
        let ours = s.env.iter().map(|(k, v)| (k.clone(), text(v)));
        let env: HashMap<String, String> = (std::env::vars_os())
            .map(|(k, v)| (text(&k), text(&v)))
            .chain(ours)
            .collect();
        let request = serde_json::json!({
            "argv": self.program.child_argv(s.argv),
            "env": env,
            "cwd": std::env::current_dir()?,
            "cpus": s.cpus,
            "stdout": s.stdout,
            "stderr": s.stderr,
        });
        // One request at a time: the answer that comes next is this request's.
        let answers = lock(&self.answers);
        let mut stdin = self.server.stdin.as_ref().expect("piped");
        // An answer left from a request that timed out is not this one's.
        while answers.try_recv().is_ok() {}
        writeln!(stdin, "{request}").and_then(|_| stdin.flush())?;
        // A fork takes milliseconds; running the program up to its fork_here(), a trial's time
        // at most.
        let mut answer = answers.recv_timeout(Duration::from_secs(30));
        if answer.as_ref().is_ok_and(|a| a.preparing) {
            answer = answers.recv_timeout(self.limit);
        }
        let gone = "the Python parent that forks the trials is gone";
        let answer = answer.map_or(Err(gone.to_string()), |a| {
            a.started.ok_or(a.error.unwrap_or_default())
        });
        answer.map_err(std::io::Error::other)
    }
}

impl Drop for ForkServer {
    fn drop(&mut self) {
        common::process::kill_group(self.server.id());
        let _ = self.server.wait();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    fn argv(line: &str) -> Vec<String> {
        line.split(' ').map(String::from).collect()
    }

    #[test]
    fn a_parent_that_is_not_ready_says_why_it_exited_or_that_it_was_late() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        // A stand-in interpreter that runs `body` whatever it is given.
        let start = |body: &str, limit: f64| {
            let interpreter = dir.path().join("python3");
            std::fs::write(&interpreter, format!("#!/bin/sh\n{body}\n")).unwrap();
            std::fs::set_permissions(&interpreter, std::fs::Permissions::from_mode(0o755)).unwrap();
            let program = PythonProgram {
                interpreter: interpreter.display().to_string(),
                target: vec!["train.py".into()],
            };
            let log = dir.path().join("server.log");
            ForkServer::start(program, &log, Duration::from_secs_f64(limit))
                .err()
                .unwrap()
        };
        let why = start(
            r#"echo '{"ready": false, "why": "no module named x"}'"#,
            10.0,
        );
        assert_eq!(why, "no module named x");
        let why = start("exit 3", 10.0);
        assert!(
            why.starts_with("the Python parent exited (exit status: 3) before it was ready; see "),
            "{why}"
        );
        let began = Instant::now();
        let why = start("sleep 30", 0.5);
        assert_eq!(why, "the Python parent was not ready within 0 s");
        assert!(
            began.elapsed() < Duration::from_secs(10),
            "its group killed at the limit"
        );
    }

    #[test]
    fn python_programs_the_server_can_run() {
        let p = PythonProgram::of(&argv("python3 train.py --batch-size {batch_size}")).unwrap();
        assert_eq!(p.target, ["train.py"]);
        let child = p.child_argv(&argv("python3 train.py --batch-size 8"));
        assert_eq!(child, ["train.py", "--batch-size", "8"]);
        let p = PythonProgram::of(&argv("/opt/venv/bin/python3.12 -m pkg.train x")).unwrap();
        assert_eq!(p.target, ["-m", "pkg.train"]);
        let child = p.child_argv(&argv("python3 -m pkg.train x"));
        assert_eq!(child, ["pkg.train", "x"]);
        for not in [
            "python3 -u train.py",
            "python3",
            "python3 -c print(1)",
            "pythonista train.py",
            "./train.py",
            "torchrun train.py",
            "python3 {script}",
        ] {
            assert_eq!(PythonProgram::of(&argv(not)), None, "{not}");
        }
    }
}

//! The tuner against a real Slurm: a cluster of one node (this host), Debian's munged,
//! slurmctld and slurmd started in the foreground by the test, in a process group of their own
//! and with every file of theirs in a scratch folder, stopped when the test ends however it
//! ends. The fake training program's grid goes through `tuner sweep --slurm` and must give the
//! local sweep's report; a trial that runs out of memory, one that fails, and a job cancelled
//! with scancel each end as they should; and `tuner autobatch --slurm` brings its answer back.
//!
//! Needs Debian's `slurmctld`, `slurmd`, `slurm-client` and `munge`, and root (slurmd starts
//! jobs as their user); `scripts/test` installs them as root. Without them this test fails with
//! a line saying so, unless PERF_LESSONS_SKIP_SLURM=1 says to skip it. The node has no GPU:
//! the tasks ask for none (`--sbatch=--gres=none`) and run on the stand-in GPU the submitting
//! tuner was given (Slurm passes the environment on).

mod fake;

use std::fs::File;
use std::net::TcpListener;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use fake::{argv, essentials, json, run, statuses, Out, Scratch, FINDER};
use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;

const SKIP: &str = "PERF_LESSONS_SKIP_SLURM";
const DAEMONS: [&str; 3] = ["munged", "slurmctld", "slurmd"];
const CLIENTS: [&str; 4] = ["sbatch", "squeue", "sinfo", "scancel"];

/// A program on the PATH or in the folders of system daemons (not on every user's PATH).
fn find(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/sbin", "/sbin"].map(PathBuf::from))
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

/// Whether this run can start a cluster; None when it may skip, a panic when it may not.
fn can_run() -> Option<()> {
    let missing: Vec<&str> = (DAEMONS.iter().chain(&CLIENTS).copied())
        .filter(|p| find(p).is_none())
        .collect();
    // /proc/self belongs to the process's effective user.
    use std::os::unix::fs::MetadataExt;
    let root = std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0);
    let why = match (missing.is_empty(), root) {
        (true, true) => return Some(()),
        (true, false) => "a one-node Slurm needs root (slurmd starts jobs as their user)".to_string(),
        (false, _) => format!(
            "a one-node Slurm needs {}, and root (Debian, as root: apt-get install slurmctld slurmd slurm-client munge)",
            missing.join(", ")
        ),
    };
    if std::env::var(SKIP).as_deref() == Ok("1") {
        eprintln!("skipped: {why}, and {SKIP}=1");
        return None;
    }
    panic!("{why}; set {SKIP}=1 to skip this test");
}

/// A port nobody listens on now.
fn free_port() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

fn short_hostname() -> String {
    let name = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
    name.trim().split('.').next().unwrap().to_string()
}

/// The last lines of a daemon's log.
fn tail(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(15)..].join("\n")
}

/// The three daemons of a one-node cluster, stopped (their whole process group) when dropped.
struct Cluster {
    dir: Scratch,
    conf: PathBuf,
    group: Option<Pid>,
    children: Vec<(&'static str, Child)>,
}

impl Cluster {
    fn start() -> Cluster {
        let dir = Scratch::new("slurm-real");
        let mut c = Cluster {
            conf: dir.path("slurm.conf"),
            dir,
            group: None,
            children: Vec::new(),
        };
        let munge = c.dir.path("munge");
        for d in ["munge", "state", "spool"] {
            std::fs::create_dir_all(c.dir.path(d)).unwrap();
        }
        let key = munge.join("munge.key");
        let mut bytes = vec![0u8; 1024];
        use std::io::Read;
        File::open("/dev/urandom")
            .unwrap()
            .read_exact(&mut bytes)
            .unwrap();
        std::fs::write(&key, bytes).unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o400)).unwrap();
        let socket = munge.join("munge.socket");
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        let d = |name: &str| c.dir.str(name);
        let conf = format!(
            "ClusterName=tunertest\n\
             SlurmctldHost={host}(127.0.0.1)\n\
             SlurmctldPort={ctld}\n\
             SlurmdPort={slurmd}\n\
             SlurmUser=root\n\
             SlurmdUser=root\n\
             AuthType=auth/munge\n\
             AuthInfo=socket={socket}\n\
             CredType=cred/munge\n\
             StateSaveLocation={state}\n\
             SlurmdSpoolDir={spool}\n\
             SlurmctldPidFile={ctld_pid}\n\
             SlurmdPidFile={slurmd_pid}\n\
             ProctrackType=proctrack/linuxproc\n\
             TaskPlugin=task/none\n\
             SelectType=select/cons_tres\n\
             SelectTypeParameters=CR_CPU\n\
             MpiDefault=none\n\
             SwitchType=switch/none\n\
             JobAcctGatherType=jobacct_gather/none\n\
             AccountingStorageType=accounting_storage/none\n\
             JobCompType=jobcomp/none\n\
             MailProg=/bin/true\n\
             ReturnToService=2\n\
             MinJobAge=600\n\
             SchedulerParameters=batch_sched_delay=0,sched_min_interval=0\n\
             NodeName={host} NodeAddr=127.0.0.1 CPUs={cpus} State=UNKNOWN\n\
             PartitionName=test Nodes=ALL Default=YES MaxTime=INFINITE State=UP\n",
            host = short_hostname(),
            ctld = free_port(),
            slurmd = free_port(),
            socket = socket.display(),
            state = d("state"),
            spool = d("spool"),
            ctld_pid = d("slurmctld.pid"),
            slurmd_pid = d("slurmd.pid"),
        );
        std::fs::write(&c.conf, conf).unwrap();
        c.daemon(
            "munged",
            &[
                "--foreground",
                "--force",
                &format!("--socket={}", socket.display()),
                &format!("--key-file={}", key.display()),
                &format!("--pid-file={}", munge.join("munged.pid").display()),
                &format!("--seed-file={}", munge.join("munged.seed").display()),
                &format!("--log-file={}", munge.join("munged.log").display()),
            ],
        );
        c.wait_for("munged's socket", Duration::from_secs(10), |_| {
            socket.exists()
        });
        c.daemon("slurmctld", &["-D"]);
        c.daemon("slurmd", &["-D"]);
        c.wait_for("the node to be idle", Duration::from_secs(30), |c| {
            let out = c.client("sinfo").args(["-h", "-o", "%T"]).output();
            out.is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "idle")
        });
        c
    }

    /// Start a daemon in the foreground, in the cluster's process group (the first one's),
    /// its output in DIR/NAME.log.
    fn daemon(&mut self, name: &'static str, args: &[&str]) {
        let log = File::create(self.dir.path(&format!("{name}.log"))).unwrap();
        let mut cmd = Command::new(find(name).unwrap());
        cmd.args(args)
            .env("SLURM_CONF", &self.conf)
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .process_group(self.group.map_or(0, |g| g.as_raw()));
        let child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("could not start {name}: {e}"));
        self.group.get_or_insert(Pid::from_raw(child.id() as i32));
        self.children.push((name, child));
    }

    /// Wait until `ready`, failing with the daemons' logs where one of them ended or the time
    /// ran out.
    fn wait_for(&mut self, what: &str, limit: Duration, ready: impl Fn(&Cluster) -> bool) {
        let start = Instant::now();
        loop {
            if ready(self) {
                return;
            }
            let ended: Vec<String> = (self.children.iter_mut())
                .filter_map(|(n, c)| Some(format!("{n} ended ({})", c.try_wait().ok()??)))
                .collect();
            if !ended.is_empty() || start.elapsed() > limit {
                let logs: Vec<String> = (self.children.iter())
                    .map(|(n, _)| {
                        let log = tail(&self.dir.path(&format!("{n}.log")));
                        format!("--- {n}'s log:\n{log}")
                    })
                    .collect();
                panic!(
                    "waiting for {what}: {} after {:.1} s\n{}",
                    if ended.is_empty() {
                        "no daemon ended".to_string()
                    } else {
                        ended.join(", ")
                    },
                    start.elapsed().as_secs_f64(),
                    logs.join("\n")
                );
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// A Slurm command run against this cluster.
    fn client(&self, name: &str) -> Command {
        let mut cmd = Command::new(find(name).unwrap());
        cmd.env("SLURM_CONF", &self.conf);
        cmd
    }

    /// What a Slurm command printed; a failure panics with its stderr.
    fn ask(&self, name: &str, args: &[&str]) -> String {
        let out = self.client(name).args(args).output().unwrap();
        assert!(
            out.status.success(),
            "{name} {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Each task of `job` as squeue lists it, `ID_N|STATE`, finished ones included.
    fn tasks(&self, job: &str) -> String {
        self.ask(
            "squeue",
            &["-h", "-r", "-t", "all", "-o", "%i|%T", "-j", job],
        )
    }

    /// `tuner ARGS -- fake` against this cluster, in `work`, on stand-in GPU 5.
    fn tuner(&self, args: &[&str], vars: &[(&str, &str)], work: &Path) -> Out {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_tuner"));
        cmd.args(args).arg("--").args(argv(vars));
        self.tuner_cmd(cmd, work)
    }

    fn tuner_cmd(&self, mut cmd: Command, work: &Path) -> Out {
        cmd.env("SLURM_CONF", &self.conf)
            .env("PERF_LESSONS_SLURM_POLL_S", "0.2");
        run(cmd, "5", work, &self.dir.path("tmp"))
    }

    fn gather(&self, dir: &str, json: &str, work: &Path) -> Out {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_tuner"));
        cmd.args(["gather", dir, "--json", json]);
        self.tuner_cmd(cmd, work)
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        // Jobs first, so that no job step outlives its slurmd.
        let _ = self.client("scancel").arg("--user=root").output();
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(5) {
            let out = self.client("squeue").args(["-h", "-o", "%i"]).output();
            if out.map_or(true, |o| o.stdout.is_empty()) {
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        if let Some(group) = self.group {
            let _ = killpg(group, Signal::SIGTERM);
            let start = Instant::now();
            while start.elapsed() < Duration::from_secs(5)
                && (self.children.iter_mut()).any(|(_, c)| c.try_wait().ok().flatten().is_none())
            {
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = killpg(group, Signal::SIGKILL);
        }
        for (_, c) in &mut self.children {
            let _ = c.wait();
        }
    }
}

/// A sweep's short trials, on a node with no GPU to give.
const SHORT: [&str; 8] = [
    "--workers",
    "0",
    "--steps",
    "2",
    "--warmup",
    "1",
    "--quiet",
    "--sbatch=--gres=none",
];
/// Batch 32 runs out of memory; every trial of mode `fail` fails.
const GRID: [&str; 5] = [
    "sweep",
    "--batch-sizes",
    "8,16,32",
    "--axis",
    "mode=ok,fail",
];
const FAKE: [(&str, &str); 2] = [("FAKE_OOM_ABOVE", "16"), ("FAKE_MODE", "{mode}")];

#[test]
fn a_one_node_slurm_runs_the_grid_as_a_local_sweep_does() {
    if can_run().is_none() {
        return;
    }
    let started = Instant::now();
    let cluster = Cluster::start();
    eprintln!(
        "one-node Slurm idle in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    let work = cluster.dir.path("work");
    std::fs::create_dir_all(&work).unwrap();

    // The grid locally, then as an array job.
    let local_args = [&GRID[..], &SHORT[..SHORT.len() - 1]].concat();
    let local = cluster.tuner(
        &[&local_args[..], &["--json", "local.json"]].concat(),
        &FAKE,
        &work,
    );
    assert_eq!(local.code, 0, "{}\n{}", local.stdout, local.stderr);
    let dir = cluster.dir.str("grid");
    let o = cluster.tuner(
        &[
            &GRID[..],
            &SHORT,
            &["--slurm", &dir, "--json", "slurm.json"],
        ]
        .concat(),
        &FAKE,
        &work,
    );
    assert_eq!(o.code, 0, "{}\n{}", o.stdout, o.stderr);
    let local = json(&work.join("local.json"));
    let gathered = json(&work.join("slurm.json"));
    assert_eq!(essentials(&gathered), essentials(&local));
    assert_eq!(
        statuses(&gathered),
        ["OK", "OK", "OOM", "FAILED", "FAILED", "FAILED"],
        "{}",
        o.stdout
    );
    let job = json(&Path::new(&dir).join("job.json"))["job_id"]
        .as_str()
        .unwrap()
        .to_string();
    let tasks = cluster.tasks(&job);
    assert_eq!(
        tasks.lines().filter(|l| l.ends_with("|COMPLETED")).count(),
        6,
        "every task ended well, whatever its trial did:\n{tasks}"
    );
    assert!(o.stderr.contains("6/6 trials have results"), "{}", o.stderr);
    eprintln!(
        "grid of 6 through Slurm: {:.1} s",
        started.elapsed().as_secs_f64()
    );

    // A job cancelled while its second trial runs: the first one's result stays, the second
    // is named by its Slurm state.
    let dir = cluster.dir.str("cancelled");
    let slow = [("FAKE_STEP_S", "{step}")];
    let o = cluster.tuner(
        &[
            &["sweep", "--batch-sizes", "8", "--axis", "step=0.01,30"][..],
            &SHORT,
            &["--max-parallel", "1", "--slurm", &dir, "--no-wait"],
        ]
        .concat(),
        &slow,
        &work,
    );
    assert_eq!(o.code, 0, "{}", o.stderr);
    let job = json(&Path::new(&dir).join("job.json"))["job_id"]
        .as_str()
        .unwrap()
        .to_string();
    let second_runs = || {
        cluster.tasks(&job).contains(&format!("{job}_1|RUNNING"))
            && Path::new(&dir).join("trials/001").exists()
    };
    let start = Instant::now();
    while !second_runs() {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "the second task never ran: {}",
            cluster.tasks(&job)
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    cluster.ask("scancel", &[&job]);
    let start = Instant::now();
    while !cluster.tasks(&job).contains(&format!("{job}_1|CANCELLED")) {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "{}",
            cluster.tasks(&job)
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let g = cluster.gather(&dir, "cancelled.json", &work);
    assert_eq!(g.code, 0, "{}\n{}", g.stdout, g.stderr);
    let report = json(&work.join("cancelled.json"));
    assert_eq!(statuses(&report), ["OK", "UNFINISHED"]);
    assert_eq!(
        report["trials"][1]["reason"], "no result; Slurm state CANCELLED",
        "{}",
        g.stdout
    );
    // The task's stderr keeps slurmstepd's line and the tuner's, which killed its trial before
    // it went; the report quotes whichever came last.
    let tail = report["trials"][1]["stderr_tail"].to_string();
    assert!(tail.contains("CANCELLED AT"), "slurmstepd's line: {tail}");
    assert!(tail.contains("error: interrupted by SIGTERM"), "{tail}");
    let last = g.stdout.split("stderr ended with: ").nth(1).unwrap_or("");
    assert!(
        last.contains("CANCELLED AT") || last.starts_with("error: interrupted by SIGTERM"),
        "{}",
        g.stdout
    );

    // The batch finder as one job: its answer comes back through the folder.
    let dir = cluster.dir.str("finder");
    let o = cluster.tuner(
        &[
            &FINDER[..],
            &[
                "--sbatch=--gres=none",
                "--slurm",
                &dir,
                "--json",
                "finder.json",
            ],
        ]
        .concat(),
        &[("FAKE_OOM_ABOVE", "40")],
        &work,
    );
    assert_eq!(o.code, 0, "{}\n{}", o.stdout, o.stderr);
    assert!(o.stdout.contains("**maximum 40**"), "{}", o.stdout);
    assert_eq!(json(&work.join("finder.json"))["maximum"], 40);
    let g = cluster.gather(&dir, "finder-again.json", &work);
    assert_eq!((g.code, &g.stdout), (0, &o.stdout), "{}", g.stderr);
    eprintln!("done in {:.1} s", started.elapsed().as_secs_f64());
}

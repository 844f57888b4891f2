"""The tuner's fork server for Python training programs.

Started as `python3 -c <this file> SCRIPT` (or `-m MODULE`) with the interpreter of the user's
command. It imports the modules the program imports (found in its source, and in the sources of
the program's own modules beside it) once, without touching CUDA, then forks one child per trial
on request. Each child is a process of its own: a new session and process group, its own CUDA
context (created by the program after the fork), its own environment, files and arguments; it
runs the script as `python3 SCRIPT ARGS` would, as `__main__`.

A program whose script (or module run) calls `fork_here()` (perf_lessons.fork_here, or the
same lines by hand) is run further: at the first request the server runs it as that trial
would, but with no PERF_LESSONS_ variables, up to its `fork_here()`, and forks every trial from
there. The child returns from `fork_here()` as the trial's process, with its own arguments and
environment, so what the program built above it (a model on the CPU, a dataset read) is built
once. Where the program ends or fails before it gets there, the trials run it from the top, as
above.

Protocol on stdin/stdout, one JSON object per line:
  server -> tuner: {"ready": true, "imported": [...], "failed": [...], "seconds": 9.8,
                    "fork_here": true|false}
                   or {"ready": false, "why": "..."} (then it exits)
  tuner -> server: {"argv": [...], "env": {...}, "cwd": "...", "cpus": [...] or null,
                    "stdout": "...", "stderr": "..."}
  server -> tuner: {"preparing": true} (before running the program up to fork_here())
                   {"started": PID} or {"error": "..."}
                   {"exited": PID, "code": N} or {"exited": PID, "signal": N}
The program's own output while the server runs it goes to the server's stderr.
"""

import ast
import json
import os
import select
import signal
import sys
import time
import types


PROTOCOL = None  # the file the tuner reads (stdout when the server started)
SERVER_MODULE = "_perf_lessons_fork_server"


def say(obj):
    PROTOCOL.write(json.dumps(obj) + "\n")
    PROTOCOL.flush()


def read_source(path):
    """The module names the file at `path` imports anywhere (inside functions too: a program
    often imports its framework where it builds the model), absolute ones only, and whether it
    calls `fork_here()`."""
    try:
        with open(path, "rb") as f:
            tree = ast.parse(f.read(), filename=path)
    except (OSError, SyntaxError, ValueError):
        return [], False
    names, forks = [], False
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.append(node.module)
        elif isinstance(node, ast.Call):
            called = getattr(node.func, "id", None) or getattr(node.func, "attr", None)
            forks |= called == "fork_here"
    return names, forks


def cuda_initialized():
    """Whether the CUDA driver was initialized in this process: after that, a forked child
    cannot use the GPU, so the trials must run as plain processes. A framework may load the
    driver's library when imported; only cuInit makes a fork unsafe, and before it every other
    call answers CUDA_ERROR_NOT_INITIALIZED (3) without initializing anything."""
    try:
        with open("/proc/self/maps") as f:
            if not any("libcuda.so" in line for line in f):
                return False
    except OSError:
        return False
    import ctypes

    try:
        count = ctypes.c_int()
        return ctypes.CDLL("libcuda.so.1").cuDeviceGetCount(ctypes.byref(count)) != 3
    except (OSError, AttributeError):
        return True


def preload(source, home):
    """Import what `source` imports; follow the program's own modules (files under `home`).
    Also whether `source` itself calls `fork_here()`."""
    imported, failed, seen, forks = [], [], set(), None
    queue = [source]
    while queue:
        path = queue.pop(0)
        names, calls = read_source(path)
        forks = calls if forks is None else forks  # the script's own call, not its modules'
        for name in names:
            if name in seen or name == "__main__":
                continue
            seen.add(name)
            try:
                module = __import__(name)
                for part in name.split(".")[1:]:
                    module = getattr(module, part, module)
            except BaseException as e:  # a program may import what only its trials can
                failed.append("%s (%s)" % (name, type(e).__name__))
                continue
            imported.append(name)
            origin = getattr(sys.modules.get(name), "__file__", None) or ""
            if origin.endswith(".py") and os.path.abspath(origin).startswith(home + os.sep):
                queue.append(origin)
    return imported, failed, forks


def match_threads():
    """Size PyTorch's CPU thread pool as a process spawned on this child's cores would have it.
    A spawned process's OpenMP runtime counts the cores it may run on when it loads; this one
    was loaded by the server, on all of the tuner's cores, so trials side by side on their
    shares would each run that many threads (four trials on 16 cores: 64 threads, and building
    a model on the CPU three times slower). OMP_NUM_THREADS in the trial's environment wins,
    as it does in a spawned process."""
    torch = sys.modules.get("torch")
    if not hasattr(torch, "set_num_threads"):
        return
    try:
        threads = int(os.environ.get("OMP_NUM_THREADS") or len(os.sched_getaffinity(0)))
    except ValueError:
        return
    if threads > 0:
        torch.set_num_threads(threads)


def release_openmp():
    """Stop the OpenMP runtime's threads in this process, if it started any: a child forked
    from a process whose pool is running hangs at its first parallel region (GNU libgomp waits
    for threads the child does not have). A program building its model on the CPU above its
    fork_here() starts them (PyTorch's CPU operations run in that pool); the pool starts again at
    this process's next parallel region, and in each child at its first."""
    try:
        with open("/proc/self/maps") as f:
            libraries = {line.split()[-1] for line in f
                         if ("libgomp" in line or "libiomp" in line) and ".so" in line}
    except OSError:
        return
    import ctypes

    for path in libraries:
        try:
            ctypes.CDLL(path).omp_pause_resource_all(1)  # omp_pause_soft
        except (OSError, AttributeError):
            pass


IN_CHILD = False


def become(request):
    """In a child: become the trial's process: its own session and process group, its share of
    the cores, files, environment, folder and arguments."""
    global IN_CHILD
    IN_CHILD = True
    os.setsid()
    if request.get("cpus"):  # the trial's share of the cores; its loader workers inherit it
        os.sched_setaffinity(0, request["cpus"])
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    PROTOCOL.close()
    REQUESTS.close()
    null = os.open(os.devnull, os.O_RDONLY)
    out = os.open(request["stdout"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    err = os.open(request["stderr"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    for fd, to in ((null, 0), (out, 1), (err, 2)):
        os.dup2(fd, to)
        os.close(fd)
    os.environ.clear()
    os.environ.update(request["env"])
    match_threads()
    os.chdir(request["cwd"])
    sys.argv = list(request["argv"])


def run_program(target):
    """Run the program as `__main__`, as `python3 SCRIPT` or `python3 -m MODULE` would; its exit
    status (an exception's traceback printed, 1)."""
    try:
        import runpy

        kind, name = target
        if kind == "script":
            runpy.run_path(name, run_name="__main__")
        else:
            runpy.run_module(name, run_name="__main__", alter_sys=True)
        return 0
    except SystemExit as e:
        if e.code is None:
            return 0
        if isinstance(e.code, int):
            return e.code
        sys.stderr.write("%s\n" % e.code)
        return 1
    except BaseException:
        import traceback

        traceback.print_exc()
        return 1


def exit_child(code):
    """End a child as the interpreter would: its threads joined, its exit functions run."""
    try:
        import atexit
        import threading

        threading._shutdown()
        atexit._run_exitfuncs()
        sys.stdout.flush()
        sys.stderr.flush()
    except BaseException:
        pass
    os._exit(code & 0xFF)


class Requests:
    """The tuner's requests, on a descriptor of their own (the program's stdin is /dev/null)."""

    def __init__(self):
        self.fd = os.dup(0)
        self.buffered = b""
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.close(null)

    def close(self):
        os.close(self.fd)

    def poll(self):
        """The requests that came within 50 ms. When the tuner is gone, so is the server, and
        its children with it."""
        readable, _, _ = select.select([self.fd], [], [], 0.05)
        if not readable:
            return []
        chunk = os.read(self.fd, 1 << 16)
        if not chunk:
            for pid in CHILDREN:
                try:
                    os.killpg(pid, signal.SIGKILL)
                except OSError:
                    pass
            os._exit(0)
        self.buffered += chunk
        requests = []
        while b"\n" in self.buffered:
            line, self.buffered = self.buffered.split(b"\n", 1)
            if line.strip():
                try:
                    requests.append(json.loads(line))
                except ValueError as e:
                    say({"error": "not a request: %s" % e})
        return requests


REQUESTS = None
CHILDREN = set()


def serve(target, pending, broken=None):
    """Fork a child for each request, those `pending` first, and tell the tuner of each child's
    exit, until the tuner is gone. A child runs the program (`target`); where `target` is None
    the child returns from here as the trial, at the program's fork_here(). `broken` says why
    no request can be served."""
    while True:
        for request in pending:
            if broken:
                say({"error": broken})
                continue
            sys.stdout.flush()
            sys.stderr.flush()
            release_openmp()
            pid = os.fork()
            if pid == 0:
                try:
                    become(request)
                except BaseException:
                    import traceback

                    traceback.print_exc()
                    exit_child(1)
                if target is None:
                    return
                exit_child(run_program(target))
            CHILDREN.add(pid)
            say({"started": pid})
        pending = REQUESTS.poll()
        while CHILDREN:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                CHILDREN.clear()
                break
            if pid == 0:
                break
            CHILDREN.discard(pid)
            if os.WIFSIGNALED(status):
                say({"exited": pid, "signal": os.WTERMSIG(status)})
            else:
                say({"exited": pid, "code": os.WEXITSTATUS(status)})


CUDA_BEFORE_FORK = ("the program initialized CUDA before fork_here(): build on the CPU above it, "
                    "and move to the GPU below it")


def run_to_fork_point(target):
    """Run the program up to its fork_here() as the first request's trial would (its arguments,
    environment less the PERF_LESSONS_ variables, and folder), and serve every request from
    there. Where the program ends first, serve them from the top."""
    pending = []
    while not pending:
        pending = REQUESTS.poll()
    first = pending[0]
    say({"preparing": True})
    os.environ.clear()
    os.environ.update({k: v for k, v in first["env"].items() if not k.startswith("PERF_LESSONS_")})
    os.environ["PYTORCH_NVML_BASED_CUDA_CHECK"] = "1"  # as while importing (main)
    os.chdir(first["cwd"])
    sys.argv = list(first["argv"])

    def at_fork_point():
        del sys.modules[SERVER_MODULE]  # a second call, or one in a trial, does nothing
        serve(None, pending, CUDA_BEFORE_FORK if cuda_initialized() else None)

    hook = types.ModuleType(SERVER_MODULE)
    hook.serve = at_fork_point
    sys.modules[SERVER_MODULE] = hook
    code = run_program(target)
    if IN_CHILD:  # a trial, from the fork point to its end
        exit_child(code)
    sys.modules.pop(SERVER_MODULE, None)
    sys.stderr.write("fork server: the program ended (exit status %d) before its fork_here(): "
                     "each trial runs it from the top\n" % code)
    sys.stderr.flush()
    serve(target, pending, CUDA_BEFORE_FORK if cuda_initialized() else None)


def main():
    global PROTOCOL, REQUESTS
    # The tuner's two pipes get descriptors of their own: what the program prints while it runs
    # here goes to the server's stderr, and it reads nothing from stdin.
    PROTOCOL = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    REQUESTS = Requests()
    args = sys.argv[1:]
    if len(args) == 2 and args[0] == "-m":
        import importlib.util

        spec = importlib.util.find_spec(args[1])
        source = spec.origin if spec and spec.origin else None
        if spec and spec.submodule_search_locations:  # a package: its __main__
            main_spec = importlib.util.find_spec(args[1] + ".__main__")
            source = main_spec.origin if main_spec else None
        if source is None:
            say({"ready": False, "why": "no module named %s" % args[1]})
            return
        target, home = ("module", args[1]), os.getcwd()
        sys.path.insert(0, os.getcwd())
    elif len(args) == 1:
        source = os.path.abspath(args[0])
        target, home = ("script", args[0]), os.path.dirname(source)
        sys.path[0] = home
    else:
        say({"ready": False, "why": "usage: SCRIPT or -m MODULE"})
        return
    started = time.perf_counter()
    # A framework may ask whether CUDA is there while it is imported; NVML answers that
    # without initializing CUDA (PyTorch reads this variable).
    os.environ["PYTORCH_NVML_BASED_CUDA_CHECK"] = "1"
    imported, failed, forks = preload(source, home)
    if cuda_initialized():
        say({"ready": False, "why": "importing the program's modules initialized CUDA"})
        return
    say({"ready": True, "imported": imported, "failed": failed, "fork_here": forks,
         "seconds": time.perf_counter() - started})
    if forks:
        run_to_fork_point(target)
    else:
        serve(target, [])


if __name__ == "__main__":
    main()

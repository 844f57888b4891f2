"""The tuner's fork server for Python training programs.

Started as `python3 -c <this file> SCRIPT` (or `-m MODULE`) with the interpreter of the user's
command. It imports the modules the program imports (found in its source, and in the sources of
the program's own modules beside it) once, without touching CUDA, then forks one child per trial
on request. Each child is a process of its own: a new session and process group, its own CUDA
context (created by the program after the fork), its own environment, files and arguments; it
runs the script as `python3 SCRIPT ARGS` would, as `__main__`.

Protocol on stdin/stdout, one JSON object per line:
  server -> tuner: {"ready": true, "imported": [...], "failed": [...], "seconds": 9.8}
                   or {"ready": false, "why": "..."} (then it exits)
  tuner -> server: {"argv": [...], "env": {...}, "cwd": "...", "cpus": [...] or null,
                    "stdout": "...", "stderr": "..."}
  server -> tuner: {"started": PID} or {"error": "..."}
                   {"exited": PID, "code": N} or {"exited": PID, "signal": N}
"""

import ast
import json
import os
import select
import signal
import sys
import time


def say(obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def imported_names(path):
    """Absolute module names imported anywhere in the file at `path` (inside functions too: a
    program often imports its framework where it builds the model)."""
    try:
        with open(path, "rb") as f:
            tree = ast.parse(f.read(), filename=path)
    except (OSError, SyntaxError, ValueError):
        return []
    names = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.append(node.module)
    return names


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
    """Import what `source` imports; follow the program's own modules (files under `home`)."""
    imported, failed, seen = [], [], set()
    queue = [source]
    while queue:
        path = queue.pop(0)
        for name in imported_names(path):
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
    return imported, failed


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


def run_child(request, target):
    """In the child: become the trial's process and run the program. Never returns."""
    code = 1
    try:
        os.setsid()
        if request.get("cpus"):  # the trial's share of the cores; its loader workers inherit it
            os.sched_setaffinity(0, request["cpus"])
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
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
        import runpy

        kind, name = target
        if kind == "script":
            runpy.run_path(name, run_name="__main__")
        else:
            runpy.run_module(name, run_name="__main__", alter_sys=True)
        code = 0
    except SystemExit as e:
        if e.code is None:
            code = 0
        elif isinstance(e.code, int):
            code = e.code
        else:
            sys.stderr.write("%s\n" % e.code)
            code = 1
    except BaseException:
        import traceback

        traceback.print_exc()
        code = 1
    finally:
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


def main():
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
    imported, failed = preload(source, home)
    if cuda_initialized():
        say({"ready": False, "why": "importing the program's modules initialized CUDA"})
        return
    say({"ready": True, "imported": imported, "failed": failed,
         "seconds": time.perf_counter() - started})
    children = set()
    stdin = sys.stdin.fileno()
    buffered = b""
    while True:
        readable, _, _ = select.select([stdin], [], [], 0.05)
        if readable:
            chunk = os.read(stdin, 1 << 16)
            if not chunk:  # the tuner is gone: so are we (its children die with it)
                for pid in children:
                    try:
                        os.killpg(pid, signal.SIGKILL)
                    except OSError:
                        pass
                return
            buffered += chunk
            while b"\n" in buffered:
                line, buffered = buffered.split(b"\n", 1)
                if not line.strip():
                    continue
                try:
                    request = json.loads(line)
                except ValueError as e:
                    say({"error": "not a request: %s" % e})
                    continue
                sys.stdout.flush()
                sys.stderr.flush()
                pid = os.fork()
                if pid == 0:
                    run_child(request, target)
                children.add(pid)
                say({"started": pid})
        while children:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                children.clear()
                break
            if pid == 0:
                break
            children.discard(pid)
            if os.WIFSIGNALED(status):
                say({"exited": pid, "signal": os.WTERMSIG(status)})
            else:
                say({"exited": pid, "code": os.WEXITSTATUS(status)})


if __name__ == "__main__":
    main()

"""The perf_lessons package without PyTorch, Lightning, Transformers or a GPU: stand-ins take
their places, and each report is read back line by line as the tuner would read it.

    python3 -m unittest discover -s python/tests     # the installed package
    PYTHONPATH=python python3 -m unittest discover -s python/tests   # the checkout's
"""

import contextlib
import io
import json
import os
import sys
import tempfile
import time
import types
import unittest
from pathlib import Path
from unittest import mock

import perf_lessons
from perf_lessons import hf, lightning, report

ROOT = Path(__file__).resolve().parents[2]


class FakeCuda:
    """torch.cuda as the reporter uses it, with every call counted."""

    def __init__(self, initialized=True):
        self.initialized = initialized
        self.synchronized = 0
        # NVTX ranges and the CUDA profiler's start and stop, in order: ("push", name),
        # ("pop",), ("start",), ("stop",).
        self.events = []
        self.nvtx = types.SimpleNamespace(
            range_push=lambda name: self.events.append(("push", name)),
            range_pop=lambda: self.events.append(("pop",)))
        self.profiler = types.SimpleNamespace(
            start=lambda: self.events.append(("start",)),
            stop=lambda: self.events.append(("stop",)))

    def is_initialized(self):
        return self.initialized

    def synchronize(self):
        self.synchronized += 1

    # PyTorch's peak counters: reserved and allocated, both reset by reset_peak_memory_stats().
    reserved_peak = 3_000_000
    allocated_peak = 2_000_000
    resets = 0

    def max_memory_reserved(self):
        return self.reserved_peak

    def max_memory_allocated(self):
        return self.allocated_peak

    def reset_peak_memory_stats(self):
        self.resets += 1

    def memory_reserved(self):
        return 1_000_000

    def mem_get_info(self):
        return 7_000_000, 10_000_000

    def get_device_name(self):
        return "Stand-in GPU"


class FakeTensor:
    def __init__(self, *shape, value=0.0):
        self.shape = shape
        self.value = value

    def item(self):
        return self.value


@contextlib.contextmanager
def modules(**stand_ins):
    """Put stand-in modules in sys.modules (None: a module that fails to import)."""
    saved = {name: sys.modules.get(name, mock.sentinel.absent) for name in stand_ins}
    sys.modules.update(stand_ins)
    try:
        yield
    finally:
        for name, module in saved.items():
            if module is mock.sentinel.absent:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = module


class FakeTorchProfile:
    """torch.profiler.profile as the reporter uses it: start, stop, export_chrome_trace."""

    def __init__(self, events, activities):
        self.events = events
        self.activities = activities

    def start(self):
        self.events.append(("torch profiler start", tuple(self.activities)))

    def stop(self):
        self.events.append(("torch profiler stop",))

    def export_chrome_trace(self, path):
        with open(path, "w", encoding="utf-8") as f:
            json.dump({"traceEvents": []}, f)


def torch_with(cuda):
    profiler = types.SimpleNamespace(
        ProfilerActivity=types.SimpleNamespace(CPU="CPU", CUDA="CUDA"),
        profile=lambda activities: FakeTorchProfile(cuda.events, activities))
    return types.SimpleNamespace(cuda=cuda, profiler=profiler, __version__="2.11.0+cu130",
                                 version=types.SimpleNamespace(cuda="13.0"))


class Trial(unittest.TestCase):
    """A test inside a trial: PERF_LESSONS_REPORT names a fresh file, the module's own clock is
    reset, and no PyTorch is imported unless a test puts its stand-in there."""

    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.addCleanup(self.dir.cleanup)
        self.path = os.path.join(self.dir.name, "report.jsonl")
        env = {k: v for k, v in os.environ.items() if not k.startswith("PERF_LESSONS_")}
        env[report.REPORT_ENV] = self.path
        patch = mock.patch.dict(os.environ, env, clear=True)
        patch.start()
        self.addCleanup(patch.stop)
        report._clock = None
        self.addCleanup(self.close_the_module_clock)
        no_torch = modules(torch=None)
        no_torch.__enter__()
        self.addCleanup(no_torch.__exit__, None, None, None)

    def close_the_module_clock(self):
        if report._clock is not None:
            report._clock.reporter.close()
            report._clock = None

    def lines(self):
        if not os.path.exists(self.path):
            return []
        with open(self.path, encoding="utf-8") as f:
            return [json.loads(line) for line in f]

    def steps(self):
        return [line for line in self.lines() if line.get("kind", "step") == "step"]


class ContextManager(Trial):
    def test_each_block_is_a_step_timed_end_to_end_with_the_wait_between_as_data(self):
        for _ in range(3):
            time.sleep(0.03)  # the loader's wait, outside the block
            with perf_lessons.step(samples=16) as s:
                time.sleep(0.02)
                s.forward_s = 0.005
        steps = self.steps()
        self.assertEqual([s["samples"] for s in steps], [16, 16, 16])
        self.assertGreaterEqual(steps[0]["step_s"], 0.02)
        self.assertNotIn("data_s", steps[0], "no wait before the first block is seen")
        for s in steps[1:]:
            self.assertGreaterEqual(s["step_s"], 0.05)
            self.assertGreaterEqual(s["data_s"], 0.03)
            self.assertLess(s["data_s"], s["step_s"])
            self.assertEqual(s["forward_s"], 0.005)
        self.assertNotIn("peak_memory_bytes", steps[0], "no PyTorch, no peak")

    def test_a_block_left_by_an_exception_reports_nothing(self):
        with self.assertRaises(MemoryError):
            with perf_lessons.step(samples=8):
                raise MemoryError("CUDA out of memory")
        with perf_lessons.step(samples=8) as s:
            s.samples = 4
        self.assertEqual([s["samples"] for s in self.steps()], [4])

    def test_metrics_set_in_the_block_go_with_the_step_and_a_diverged_one_is_null(self):
        with perf_lessons.step(samples=2, metrics={"accuracy": 0.5}) as s:
            s.metrics["loss"] = float("nan")
        with perf_lessons.step(samples=2) as s:
            s.metrics["loss"] = 2.5
        self.assertEqual([line["metrics"] for line in self.lines()],
                         [{"accuracy": 0.5, "loss": None}, {"loss": 2.5}])

    def test_an_unknown_field_is_refused_at_once(self):
        with self.assertRaisesRegex(TypeError, r"unknown step field\(s\) \['fwd_s'\]"):
            perf_lessons.step(samples=1, fwd_s=0.1)

    def test_with_cuda_in_use_it_waits_for_the_gpu_and_reports_memory(self):
        cuda = FakeCuda()
        with modules(torch=torch_with(cuda)):
            for _ in range(2):
                with perf_lessons.step(samples=2):
                    pass
        self.assertEqual(cuda.synchronized, 2)
        lines = self.lines()
        self.assertEqual(lines[0], {"kind": "device", "name": "Stand-in GPU",
                                    "total_bytes": 10_000_000, "free_bytes": 8_000_000,
                                    "framework": "torch 2.11.0+cu130, CUDA 13.0"})
        self.assertEqual([s.get("peak_memory_bytes") for s in lines[1:]], [3_000_000] * 2)
        self.assertEqual([s.get("peak_allocated_bytes") for s in lines[1:]], [2_000_000] * 2)

    def test_the_allocated_peak_is_the_step_s_own_and_the_reserved_the_most_so_far(self):
        cuda = FakeCuda()
        with modules(torch=torch_with(cuda)):
            # The first step: cuDNN's autotuner times its algorithms in workspaces of its own.
            with perf_lessons.step(samples=2):
                cuda.reserved_peak, cuda.allocated_peak = 9_000_000, 8_000_000
            # The counters were reset after it: this step's peaks are its own.
            with perf_lessons.step(samples=2):
                cuda.reserved_peak, cuda.allocated_peak = 5_000_000, 4_000_000
            report._clock.finish()
        steps = self.steps()
        self.assertEqual([s["peak_allocated_bytes"] for s in steps], [8_000_000, 4_000_000])
        self.assertEqual([s["peak_memory_bytes"] for s in steps], [9_000_000] * 2)
        self.assertEqual(self.lines()[-1]["peak_memory_bytes"], 9_000_000)
        self.assertEqual(cuda.resets, 2)

    def test_peaks_of_the_program_s_own_are_reported_as_given_and_nothing_is_reset(self):
        cuda = FakeCuda()
        with modules(torch=torch_with(cuda)):
            with perf_lessons.step(samples=2) as s:
                s.peak_memory_bytes, s.peak_allocated_bytes = 7, 6
        self.assertEqual([(x["peak_memory_bytes"], x["peak_allocated_bytes"]) for x in self.steps()],
                         [(7, 6)])
        self.assertEqual(cuda.resets, 0)

    def test_a_per_process_memory_fraction_caps_the_memory_it_could_have(self):
        cuda = FakeCuda()
        cuda.get_per_process_memory_fraction = lambda: 0.5
        with modules(torch=torch_with(cuda)):
            with perf_lessons.step(samples=2):
                pass
        # Half of the 10 MB GPU, though 7 MB are free and PyTorch holds 1 MB.
        self.assertEqual(self.lines()[0]["free_bytes"], 5_000_000)

    def test_pytorch_without_cuda_initialized_is_left_alone(self):
        cuda = FakeCuda(initialized=False)
        with modules(torch=torch_with(cuda)):
            with perf_lessons.step(samples=2):
                pass
        self.assertEqual(cuda.synchronized, 0)
        self.assertEqual(len(self.lines()), 1)

    def test_the_lines_are_the_protocol(self):
        with perf_lessons.step(samples=3, gpu_busy=0.5, data_s=float("nan")):
            pass
        (line,) = self.lines()
        self.assertEqual(set(line), {"step", "samples", "step_s", "gpu_busy"})
        self.assertGreater(line["step_s"], 0)


class Ranks(Trial):
    def test_every_line_of_a_rank_in_a_group_carries_its_rank(self):
        with mock.patch.dict(os.environ, {"WORLD_SIZE": "2", "RANK": "1", "LOCAL_RANK": "1"}):
            self.assertEqual(perf_lessons.rank(), 1)
            with report.Reporter() as r:
                r.device(name="Fake GPU")
                r.step(samples=8, step_s=0.1)
                r.end(samples_per_s=80.0)
        self.assertEqual([line["rank"] for line in self.lines()], [1, 1, 1])

    def test_a_process_alone_writes_no_rank(self):
        for env in ({}, {"WORLD_SIZE": "1", "RANK": "0"}, {"WORLD_SIZE": "2", "RANK": "x"}):
            with mock.patch.dict(os.environ, env):
                self.assertIsNone(perf_lessons.rank())
                with report.Reporter() as r:
                    r.step(samples=8, step_s=0.1)
        self.assertTrue(all("rank" not in line for line in self.lines()))


class ForkHere(unittest.TestCase):
    def test_it_hands_over_to_the_tuner_s_fork_server_where_there_is_one(self):
        self.assertFalse(perf_lessons.fork_here())  # a normal run: nothing
        served = []
        server = types.SimpleNamespace(serve=lambda: served.append(True))
        with mock.patch.dict(sys.modules, {"_perf_lessons_fork_server": server}):
            self.assertTrue(perf_lessons.fork_here())
        self.assertEqual(served, [True])


class FakeParameter:
    """A tensor as the model line asks it: numel, element_size, device, requires_grad, grad."""

    def __init__(self, numel, element_size=4, device="cuda", requires_grad=True, grad=None):
        self._numel, self._size = numel, element_size
        self.device = types.SimpleNamespace(type=device)
        self.requires_grad = requires_grad
        self.grad = grad

    def numel(self):
        return self._numel

    def element_size(self):
        return self._size


class FakeModel:
    def __init__(self, *parameters):
        self._parameters = parameters

    def parameters(self):
        return iter(self._parameters)


class ModelLine(Trial):
    def adam(self):
        """A bf16 weight with an fp32 gradient, an fp32 weight before its first backward, a frozen
        one; Adam's two moments each, one shared, and host step counts."""
        weight = FakeParameter(1000, 2, grad=FakeParameter(1000, 4))
        bias = FakeParameter(10)
        frozen = FakeParameter(500, requires_grad=False)
        shared = FakeParameter(10)
        state = {
            weight: {"step": FakeParameter(1, device="cpu"), "exp_avg": FakeParameter(1000),
                     "exp_avg_sq": FakeParameter(1000)},
            bias: {"step": 3, "exp_avg": shared, "exp_avg_sq": shared},
        }
        return FakeModel(weight, bias, frozen), types.SimpleNamespace(state=state)

    def test_parameters_gradients_and_the_optimizer_s_state_on_the_device(self):
        parts = perf_lessons.model(*self.adam())
        self.assertEqual(parts, {"parameter_bytes": 2000 + 40 + 2000,
                                 "gradient_bytes": 4000 + 40,
                                 "optimizer_state_bytes": 8000 + 40})
        self.assertEqual(self.lines(), [dict({"kind": "model"}, **parts)])

    def test_on_the_host_the_host_state_counts_and_no_optimizer_has_none(self):
        on_host = FakeParameter(4, device="cpu")
        state = {on_host: {"momentum_buffer": FakeParameter(4, device="cpu")}}
        r = report.Reporter()
        self.assertEqual(r.model(FakeModel(on_host), types.SimpleNamespace(state=state)),
                         {"parameter_bytes": 16, "gradient_bytes": 16,
                          "optimizer_state_bytes": 16})
        self.assertEqual(r.model(FakeModel(on_host), None)["optimizer_state_bytes"], 0)
        r.close()
        self.assertEqual([line["kind"] for line in self.lines()], ["model", "model"])

    def test_it_goes_into_the_report_of_the_steps(self):
        with perf_lessons.step(samples=2):
            pass
        perf_lessons.model(*self.adam())
        with perf_lessons.step(samples=2):
            pass
        self.assertEqual([line.get("kind", "step") for line in self.lines()],
                         ["step", "model", "step"])


class OutsideTheTuner(Trial):
    def setUp(self):
        super().setUp()
        del os.environ[report.REPORT_ENV]

    def test_nothing_is_written_timed_or_synchronized(self):
        cuda = FakeCuda()
        trainer = types.SimpleNamespace(global_step=0)
        with modules(torch=torch_with(cuda), **fake_lightning()), \
                modules(**fake_transformers()):
            with perf_lessons.step(samples=1):
                pass
            callback = lightning.ReportCallback()
            callback.on_train_batch_start(trainer, None, FakeTensor(4), 0)
            trainer.global_step = 1
            callback.on_train_batch_end(trainer, None, None, FakeTensor(4), 0)
            callback.on_train_end(trainer, None)
            args = types.SimpleNamespace(train_batch_size=4, gradient_accumulation_steps=1)
            callback = hf.ReportCallback()
            callback.on_step_begin(args, None, None)
            callback.on_step_end(args, None, None)
            callback.on_train_end(args, None, None)
            perf_lessons.Reporter().step(samples=1)
            counted = perf_lessons.model(FakeModel(FakeParameter(3)), None)
        self.assertEqual(counted["parameter_bytes"], 12, "counted, only not written")
        self.assertEqual(cuda.synchronized, 0)
        self.assertEqual(os.listdir(self.dir.name), [])


def fake_lightning():
    class Callback:
        pass

    pytorch = types.ModuleType("lightning.pytorch")
    pytorch.Callback = Callback
    package = types.ModuleType("lightning")
    package.pytorch = pytorch
    return {"lightning": package, "lightning.pytorch": pytorch}


def fake_transformers():
    class TrainerCallback:
        pass

    package = types.ModuleType("transformers")
    package.TrainerCallback = TrainerCallback
    return {"transformers": package}


class Lightning(Trial):
    def setUp(self):
        super().setUp()
        stand_in = modules(**fake_lightning())
        stand_in.__enter__()
        self.addCleanup(stand_in.__exit__, None, None, None)
        lightning.__getattr__.made.clear()
        self.addCleanup(lightning.__getattr__.made.clear)

    def fit(self, callback, batches, accumulate=1):
        """Lightning's order of hooks over `batches`, global_step moving once per
        `accumulate` batches."""
        trainer = types.SimpleNamespace(global_step=0)
        for i, batch in enumerate(batches):
            callback.on_train_batch_start(trainer, None, batch, i)
            time.sleep(0.005)
            if (i + 1) % accumulate == 0:
                trainer.global_step += 1
            callback.on_train_batch_end(trainer, None, {"loss": FakeTensor(value=i / 2)}, batch, i)
        callback.on_train_end(trainer, None)

    def test_it_is_a_lightning_callback(self):
        from lightning.pytorch import Callback

        callback = lightning.ReportCallback()
        self.assertIsInstance(callback, Callback)
        callback.on_train_end(None, None)
        self.assertIs(perf_lessons.lightning.ReportCallback, lightning.ReportCallback)

    def test_each_optimizer_step_with_the_batch_size_it_saw(self):
        batches = [FakeTensor(32, 3), (FakeTensor(16, 3), FakeTensor(16)),
                   {"input_ids": FakeTensor(8, 128), "labels": FakeTensor(8)}]
        self.fit(lightning.ReportCallback(), batches)
        steps = self.steps()
        self.assertEqual([s["samples"] for s in steps], [32, 16, 8])
        self.assertEqual([s["metrics"] for s in steps], [{"loss": 0.0}, {"loss": 0.5}, {"loss": 1.0}])
        self.assertTrue(all(s["step_s"] >= 0.005 for s in steps))
        self.assertEqual(self.lines()[-1], {"kind": "end"})

    def test_micro_batches_of_one_optimizer_step_report_once(self):
        self.fit(lightning.ReportCallback(), [FakeTensor(4)] * 6, accumulate=3)
        steps = self.steps()
        self.assertEqual([s["samples"] for s in steps], [12, 12])
        self.assertEqual([s["metrics"]["loss"] for s in steps], [1.0, 2.5], "the last micro-batch's")
        self.assertTrue(all(s["step_s"] >= 0.015 for s in steps))

    def test_samples_it_cannot_see_come_from_the_argument_or_the_tuner(self):
        self.fit(lightning.ReportCallback(samples_per_batch=5), [object()])
        os.environ["PERF_LESSONS_BATCH_SIZE"] = "64"
        self.fit(lightning.ReportCallback(), [object()])
        self.assertEqual([s["samples"] for s in self.steps()], [5, 64])

    def test_cuda_in_use_gives_the_device_and_the_peaks(self):
        cuda = FakeCuda()
        with modules(torch=torch_with(cuda)):
            self.fit(lightning.ReportCallback(), [FakeTensor(2)] * 2)
        lines = self.lines()
        self.assertEqual([line.get("kind", "step") for line in lines],
                         ["device", "step", "step", "end"])
        self.assertEqual(lines[-1]["peak_memory_bytes"], 3_000_000)
        self.assertEqual(cuda.synchronized, 2)

    def test_without_lightning_one_line_says_what_to_install(self):
        lightning.__getattr__.made.clear()
        with modules(**{"lightning": None, "lightning.pytorch": None,
                        "pytorch_lightning": None}):
            with self.assertRaisesRegex(ImportError, "pip install lightning"):
                lightning.ReportCallback


class HuggingFace(Trial):
    def setUp(self):
        super().setUp()
        stand_in = modules(**fake_transformers())
        stand_in.__enter__()
        self.addCleanup(stand_in.__exit__, None, None, None)
        hf.__getattr__.made.clear()
        self.addCleanup(hf.__getattr__.made.clear)

    def train(self, callback, args, steps):
        for _ in range(steps):
            callback.on_step_begin(args, None, None)
            time.sleep(0.005)
            callback.on_step_end(args, None, None)
        callback.on_train_end(args, None, None)

    def test_it_is_a_trainer_callback(self):
        from transformers import TrainerCallback

        callback = hf.ReportCallback()
        self.assertIsInstance(callback, TrainerCallback)
        callback.on_train_end(None, None, None)

    def test_each_step_is_batch_times_accumulation(self):
        args = types.SimpleNamespace(train_batch_size=8, gradient_accumulation_steps=4)
        self.train(hf.ReportCallback(), args, 3)
        args = types.SimpleNamespace(per_device_train_batch_size=2)
        self.train(hf.ReportCallback(), args, 1)
        self.train(hf.ReportCallback(samples_per_step=7), args, 1)
        steps = self.steps()
        self.assertEqual([s["samples"] for s in steps], [32, 32, 32, 2, 7])
        self.assertTrue(all(s["step_s"] >= 0.005 for s in steps))
        self.assertEqual(sum(line.get("kind") == "end" for line in self.lines()), 3)

    def test_without_transformers_one_line_says_what_to_install(self):
        hf.__getattr__.made.clear()
        with modules(transformers=None):
            with self.assertRaisesRegex(ImportError, "pip install transformers"):
                hf.ReportCallback


def ranges(events):
    """The NVTX events as text: "+step 1", "-"."""
    return ["+" + e[1] if e[0] == "push" else "-" for e in events if e[0] in ("push", "pop")]


class NvtxRanges(Trial):
    def test_each_step_and_the_wait_between_are_ranges(self):
        cuda = FakeCuda()
        with modules(torch=torch_with(cuda)):
            for _ in range(2):
                with perf_lessons.step(samples=2):
                    pass
        self.assertEqual(ranges(cuda.events), ["+step 1", "-", "+data", "-", "+step 2", "-",
                                               "+data"])

    def test_lightning_s_hooks_mark_forward_backward_and_optimizer(self):
        cuda = FakeCuda()
        trainer = types.SimpleNamespace(global_step=0)
        with modules(torch=torch_with(cuda), **fake_lightning()):
            lightning.__getattr__.made.clear()
            callback = lightning.ReportCallback()
            for i in range(2):  # two micro-batches of one optimizer step
                callback.on_train_batch_start(trainer, None, FakeTensor(4), i)
                callback.on_before_backward(trainer, None, None)
                callback.on_after_backward(trainer, None)
                if i == 1:
                    callback.on_before_optimizer_step(trainer, None, None)
                    trainer.global_step = 1
                callback.on_train_batch_end(trainer, None, None, FakeTensor(4), i)
            callback.on_train_end(trainer, None)
            lightning.__getattr__.made.clear()
        self.assertEqual(ranges(cuda.events), [
            "+step 1", "+forward", "-", "+backward", "-", "+data",
            "-", "+forward", "-", "+backward", "-", "+optimizer", "-", "-",
            "+data", "-"])

    def test_none_without_cuda_in_use(self):
        cuda = FakeCuda(initialized=False)
        with modules(torch=torch_with(cuda)):
            with perf_lessons.step(samples=2):
                pass
        self.assertEqual(cuda.events, [])


class Profiling(Trial):
    def setUp(self):
        super().setUp()
        os.environ["PERF_LESSONS_WARMUP_STEPS"] = "2"
        os.environ["PERF_LESSONS_STEPS"] = "3"
        self.trace = os.path.join(self.dir.name, "trace.json")

    def run_steps(self, cuda, steps=7):
        stderr = io.StringIO()
        with modules(torch=torch_with(cuda)), contextlib.redirect_stderr(stderr):
            for _ in range(steps):
                with perf_lessons.step(samples=2):
                    cuda.events.append(("work",))
            report._clock.reporter.close()
        return stderr.getvalue()

    def test_the_cuda_profiler_brackets_the_measured_steps(self):
        os.environ["PERF_LESSONS_PROFILE"] = "cuda-api"
        cuda = FakeCuda()
        self.run_steps(cuda)
        work = [e[0] for e in cuda.events if e[0] in ("work", "start", "stop")]
        self.assertEqual(work, ["work", "work", "start", "work", "work", "work", "stop",
                                "work", "work"])

    def test_pytorch_s_profiler_records_the_measured_steps_into_a_chrome_trace(self):
        os.environ["PERF_LESSONS_PROFILE"] = "torch"
        os.environ["PERF_LESSONS_PROFILE_OUT"] = self.trace
        cuda = FakeCuda()
        said = self.run_steps(cuda)
        work = [e for e in cuda.events if e[0] != "push" and e[0] != "pop"]
        self.assertEqual(work[2], ("torch profiler start", ("CPU", "CUDA")))
        self.assertEqual(work[6], ("torch profiler stop",))
        self.assertEqual(sum(e == ("work",) for e in work[2:6]), 3)
        with open(self.trace, encoding="utf-8") as f:
            self.assertEqual(json.load(f), {"traceEvents": []})
        self.assertIn("steps 3 to 5 recorded by PyTorch's profiler: " + self.trace, said)

    def test_a_run_cut_short_still_writes_what_it_recorded(self):
        os.environ["PERF_LESSONS_PROFILE"] = "torch"
        os.environ["PERF_LESSONS_PROFILE_OUT"] = self.trace
        self.run_steps(FakeCuda(), steps=4)
        self.assertTrue(os.path.exists(self.trace))

    def test_what_cannot_be_profiled_is_said_and_the_training_goes_on(self):
        cases = [
            ({"PERF_LESSONS_PROFILE": "nsys"}, "is not one of cuda-api, torch"),
            ({"PERF_LESSONS_PROFILE": "torch"}, "needs PERF_LESSONS_PROFILE_OUT"),
            ({"PERF_LESSONS_PROFILE": "cuda-api", "PERF_LESSONS_WARMUP_STEPS": "0"},
             "at least one warmup step"),
        ]
        for env, says in cases:
            with mock.patch.dict(os.environ, env):
                report._clock = None
                cuda = FakeCuda()
                said = self.run_steps(cuda)
                self.assertIn(says, said)
                self.assertNotIn(("start",), cuda.events)
                self.assertEqual(len(self.steps()) % 7, 0)
        os.environ["PERF_LESSONS_PROFILE"] = "torch"
        os.environ["PERF_LESSONS_PROFILE_OUT"] = self.trace
        report._clock = None
        stderr = io.StringIO()
        with contextlib.redirect_stderr(stderr):
            for _ in range(7):
                with perf_lessons.step(samples=1):
                    pass
        self.assertIn("PyTorch is not imported", stderr.getvalue())
        self.assertFalse(os.path.exists(self.trace))

    def test_nothing_outside_the_tuner(self):
        del os.environ[report.REPORT_ENV]
        os.environ["PERF_LESSONS_PROFILE"] = "cuda-api"
        cuda = FakeCuda()
        self.run_steps(cuda)
        self.assertEqual([e for e in cuda.events if e != ("work",)], [])


class TheOneFileCopy(unittest.TestCase):
    def test_the_example_file_is_the_package_module(self):
        # A link, so the examples import the one module (and `cp` copies its text).
        copy = ROOT / "examples" / "pytorch" / "perf_lessons_report.py"
        module = ROOT / "python" / "perf_lessons" / "report.py"
        self.assertTrue(copy.is_symlink(), "%s should link to %s" % (copy, module))
        self.assertEqual(copy.resolve(), module.resolve())

    def test_it_imports_nothing_but_the_standard_library(self):
        source = (ROOT / "python" / "perf_lessons" / "report.py").read_text()
        imports = {line.split()[1] for line in source.splitlines()
                   if line.startswith(("import ", "from "))}
        self.assertEqual(imports, {"json", "math", "os", "sys", "time"})


if __name__ == "__main__":
    unittest.main()

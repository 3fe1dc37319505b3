"""Processes that stay up for a test module: `world` ranks in one gloo process group,
each running the case functions it is sent (module name, function name, keyword
arguments) and sending back what rank 0 returns. Every wait has a deadline: a case that
hangs fails its test, and the pool is torn down, instead of hanging CI."""
import multiprocessing
import os
import queue
import tempfile
import time
import traceback
from datetime import timedelta

# gloo's own timeout for one collective or point-to-point op; the harness's deadline per
# case (below) is what a test waits at most.
OP_TIMEOUT_S = 60
CASE_TIMEOUT_S = 120


def _worker(rank, world, init_file, jobs, results):
    import importlib

    import torch
    import torch.distributed as dist
    torch.set_num_threads(1)
    try:
        dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank,
                                world_size=world, timeout=timedelta(seconds=OP_TIMEOUT_S))
    except Exception:  # noqa: BLE001 -- reported to the parent, which fails the test
        results.put((rank, False, traceback.format_exc()))
        return
    results.put((rank, True, "ready"))
    while True:
        job = jobs.get()
        if job is None:
            break
        module, function, kwargs = job
        try:
            value = getattr(importlib.import_module(module), function)(rank, world, **kwargs)
            results.put((rank, True, value if rank == 0 else None))
        except Exception:  # noqa: BLE001 -- reported to the parent, which fails the test
            results.put((rank, False, traceback.format_exc()))
    dist.destroy_process_group()


class RankPool:
    def __init__(self, world):
        self.world = world
        self._processes = None
        self._start()

    def _start(self):
        world = self.world
        context = multiprocessing.get_context("spawn")
        self._dir = tempfile.TemporaryDirectory()
        self._jobs = [context.Queue() for _ in range(world)]
        self._results = context.Queue()
        saved = os.environ.get("OMP_NUM_THREADS")
        os.environ["OMP_NUM_THREADS"] = "1"  # `world` ranks share the machine's cores
        try:
            self._processes = [
                context.Process(target=_worker, daemon=True,
                                args=(r, world, os.path.join(self._dir.name, "init"),
                                      self._jobs[r], self._results))
                for r in range(world)]
            for p in self._processes:
                p.start()
        finally:
            if saved is None:
                del os.environ["OMP_NUM_THREADS"]
            else:
                os.environ["OMP_NUM_THREADS"] = saved
        self._collect(CASE_TIMEOUT_S)

    def run(self, module, function, timeout=CASE_TIMEOUT_S, **kwargs):
        """Runs function(rank, world, **kwargs) on every rank; rank 0's return value.
        A case that failed on some rank may have left the others mid-exchange, so the
        pool is restarted after any failure."""
        if self._processes is None:
            self._start()
        for jobs in self._jobs:
            jobs.put((module, function, kwargs))
        return self._collect(timeout)

    def _collect(self, timeout):
        answers = {}
        deadline = time.monotonic() + timeout
        while len(answers) < self.world:
            try:
                rank, ok, value = self._results.get(timeout=1)
                answers[rank] = (ok, value)
                continue
            except queue.Empty:
                pass
            missing = sorted(set(range(self.world)) - set(answers))
            dead = [r for r in missing if not self._processes[r].is_alive()]
            if dead or time.monotonic() > deadline:
                codes = [self._processes[r].exitcode for r in dead]
                self.close()
                why = f"died (exit codes {codes})" if dead else f"did not answer within {timeout} s"
                raise TimeoutError(f"ranks {dead or missing} of {self.world} {why}")
        failed = [(r, v) for r, (ok, v) in sorted(answers.items()) if not ok]
        if failed:
            self.close()
            raise AssertionError("\n".join(f"rank {r}:\n{v}" for r, v in failed))
        return answers[0][1]

    def close(self):
        if self._processes is None:
            return
        for jobs in self._jobs:
            try:
                jobs.put(None)
            except (ValueError, OSError):
                pass
        for p in self._processes:
            p.join(timeout=10)
            if p.is_alive():
                p.kill()
        self._dir.cleanup()
        self._processes = None

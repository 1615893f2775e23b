"""Run independent tasks in this process, in spawned worker processes, or as Ray tasks, with the same results.

A task is a picklable argument for a top-level function that returns JSON text; the function does all its work
from that argument alone (it downloads what it needs), so it can run anywhere: here, in a ``spawn`` worker (no
forked torch thread pools), or on a Ray cluster. Results come back as they complete and are handed to ``on_result``
in the main process, which journals them; their order never affects their content.

>>> results = {}
>>> run_tasks(len, ["a", "bb"], executor="local", workers=1, on_result=lambda i, r: results.update({i: r}))
>>> results
{0: 1, 1: 2}
"""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from typing import Any, Literal, TypeAlias, TypeVar

from bnconvention.errors import UsageError

ExecutorKind: TypeAlias = Literal["local", "process", "ray"]
EXECUTORS: tuple[ExecutorKind, ...] = ("local", "process", "ray")
RAY_ADDRESS_ENV = "RAY_ADDRESS"  # read as Ray's own tools read it (ray job submit sets it for the job's driver)

T = TypeVar("T")
R = TypeVar("R")


def resolve_executor(executor: str | None, workers: int) -> ExecutorKind:
    """The executor to use: the one named, else ``process`` for more than one worker, else ``local``."""
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise UsageError(f"--workers must be a positive integer, got {workers!r}")
    if executor is None:
        return "process" if workers > 1 else "local"
    if executor not in EXECUTORS:
        raise UsageError(f"--executor {executor!r} is not one of {', '.join(EXECUTORS)}")
    return executor


def check_ray_address(executor: str, address: str | None) -> None:
    """A cluster address is only for Ray tasks."""
    if address is not None and executor != "ray":
        raise UsageError(f"--ray-address needs --executor ray (got --executor {executor})")


def ray_cluster_address(flag: str | None) -> str | None:
    """The Ray cluster ``--executor ray`` connects to: ``--ray-address`` when given, else ``RAY_ADDRESS`` when set
    and not empty (as ``ray.init`` and Ray's CLI read it; a job started by ``ray job submit`` has it set to its
    cluster), else ``None``: a local instance of ``--workers`` CPUs is started."""
    if flag is not None:
        return flag
    return os.environ.get(RAY_ADDRESS_ENV) or None


def ray_available() -> bool:
    try:
        import ray  # noqa: F401
    except ImportError:
        return False
    return True


def run_tasks(fn: Callable[[T], R], tasks: Sequence[T], *, executor: ExecutorKind, workers: int,
              on_result: Callable[[int, R], None], ray_address: str | None = None) -> None:
    """Run ``fn(task)`` for every task and call ``on_result(index, result)`` in this process as each finishes.

    ``ray_address`` (``--executor ray`` only) connects to an existing cluster (``ray://host:10001``, ``host:6379``
    or ``auto``) instead of starting a local instance of ``workers`` CPUs; without it, ``RAY_ADDRESS`` does the
    same (:func:`ray_cluster_address`).

    An exception raised by ``fn`` propagates (after the pool is shut down); task functions that must not stop the
    others catch their own failures and return them as results.
    """
    check_ray_address(executor, ray_address)
    if not tasks:
        return
    if executor == "local":
        for index, task in enumerate(tasks):
            on_result(index, fn(task))
    elif executor == "process":
        _run_processes(fn, tasks, workers=workers, on_result=on_result)
    elif executor == "ray":
        _run_ray(fn, tasks, workers=workers, on_result=on_result, address=ray_address)
    else:
        raise UsageError(f"executor {executor!r} is not one of {', '.join(EXECUTORS)}")


def _run_processes(fn: Callable[[T], R], tasks: Sequence[T], *, workers: int,
                   on_result: Callable[[int, R], None]) -> None:
    context = multiprocessing.get_context("spawn")
    pool = ProcessPoolExecutor(max_workers=min(workers, len(tasks)), mp_context=context)
    try:
        pending = {pool.submit(fn, task): index for index, task in enumerate(tasks)}
        while pending:
            done, _ = wait(pending, return_when=FIRST_COMPLETED)
            for future in done:
                index = pending.pop(future)
                on_result(index, future.result())
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def _run_ray(fn: Callable[[T], R], tasks: Sequence[T], *, workers: int, on_result: Callable[[int, R], None],
             address: str | None = None) -> None:
    try:
        import ray
    except ImportError as exc:
        raise UsageError("--executor ray needs Ray: pip install 'bnconvention[ray]' (or ray==2.60.0)") from exc
    started = False
    address = ray_cluster_address(address)
    if not ray.is_initialized():
        started = True
        if address is not None:  # an existing cluster: its own CPUs; this process only submits and collects
            ray.init(address=address, log_to_driver=False)
        else:  # a local instance sized to --workers
            ray.init(num_cpus=workers, include_dashboard=False, log_to_driver=False, ignore_reinit_error=True)
    try:
        remote = ray.remote(num_cpus=1, max_retries=0)(fn)
        pending: dict[Any, int] = {remote.remote(task): index for index, task in enumerate(tasks)}
        while pending:
            done, _ = ray.wait(list(pending), num_returns=1)
            for ref in done:
                index = pending.pop(ref)
                on_result(index, ray.get(ref))
    finally:
        if started:
            ray.shutdown()


__all__ = ["EXECUTORS", "RAY_ADDRESS_ENV", "ExecutorKind", "check_ray_address", "ray_available", "ray_cluster_address",
           "resolve_executor", "run_tasks"]

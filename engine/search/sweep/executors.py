"""Where a sweep's points run: in this process, on a local process pool, or as Ray tasks. Each executor is
an iterator of ``(key, overrides, row)`` in the order points finish; closing it early (a cancel, Ctrl-C, a
full disk) stops the work in flight — pool workers are terminated, Ray tasks cancelled — so nothing keeps
computing points nobody will record.

Executors wait in short slices and call ``check()`` between them, which raises ``Cancelled`` when the
caller asked to stop: a cancel is noticed within ``POLL_S`` even while a long point runs elsewhere.

Pool workers and Ray tasks call ``run_point`` by reference (this module's global, looked up when the
executor starts), so every worker needs tilewright importable; nothing is uploaded with a ``runtime_env``.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from typing import Any

from tilewright.engine.errors import InputError, Problem
from tilewright.engine.jobs import CancelFn
from tilewright.engine.results.text import counted
from tilewright.engine.search.sweep.point import run_point

Task = tuple[str, dict[str, Any]]  # (key, overrides)
Finished = Iterator[tuple[str, dict[str, Any], dict[str, Any]]]
Say = Callable[[str], None]
Check = Callable[[], None]
POLL_S = 0.2

# Ray resolves a local cluster's address to the machine's network address and listens on every
# interface, unless this (misnamed) switch is off, which it is by default only on macOS and Windows.
# A sweep's private cluster needs no peers, so it is kept on loopback. Read once, when Ray is imported.
RAY_LOOPBACK_SWITCH = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"


def run_local(
    todo: list[Task], base: dict, constants: dict, source: str, workers: int | None, check: Check,
    cancel: CancelFn | None = None,
) -> Finished:
    """A process pool, one worker per core by default; with one worker (or one point) in this process,
    where ``cancel`` also reaches into the point's simulation."""
    n = workers or os.cpu_count() or 1
    if n == 1 or len(todo) <= 1:
        for key, overrides in todo:
            check()
            yield key, overrides, run_point(base, {**constants, **overrides}, source, cancel=cancel)
        return
    pool = ProcessPoolExecutor(
        min(n, len(todo)), initializer=_pool_init, initargs=(base, constants, source, run_point, os.getpid())
    )
    pending = {pool.submit(_pool_task, task) for task in todo}
    try:
        while pending:
            check()
            done, pending = wait(pending, timeout=POLL_S, return_when=FIRST_COMPLETED)
            for fut in done:
                yield fut.result()
    finally:
        if pending:  # stopped early: queued points never start, running ones are killed
            _terminate(pool)
        pool.shutdown(wait=True, cancel_futures=True)


def _terminate(pool: ProcessPoolExecutor) -> None:
    """Kill the pool's workers: ``shutdown`` alone would wait for every running point to finish."""
    stop = getattr(pool, "terminate_workers", None)  # Python 3.14+
    if stop is not None:
        stop()
        return
    for proc in list((getattr(pool, "_processes", None) or {}).values()):  # before 3.14, no public way
        with contextlib.suppress(Exception):
            proc.terminate()


_WORKER: dict[str, Any] = {}


ORPHAN_CHECK_S = 1.0


def _pool_init(base: dict, constants: dict, source: str, fn: Callable[..., dict[str, Any]], parent: int) -> None:
    """Each pool worker receives the base project once, not with every point, and dies with its sweep: a
    sweep killed outright (kill -9, a closed terminal) cannot stop its pool, so each worker watches for
    its parent to go and exits then, instead of computing points nobody will record."""
    _WORKER.update(base=base, constants=constants, source=source, fn=fn)
    threading.Thread(target=_exit_when_orphaned, args=(parent,), daemon=True, name="orphan-watch").start()


def _exit_when_orphaned(parent: int) -> None:
    while os.getppid() == parent:
        time.sleep(ORPHAN_CHECK_S)
    os._exit(1)


def _pool_task(task: Task) -> tuple[str, dict[str, Any], dict[str, Any]]:
    key, overrides = task
    w = _WORKER
    return key, overrides, w["fn"](w["base"], {**w["constants"], **overrides}, w["source"])


def run_ray(
    todo: list[Task], base: dict, constants: dict, source: str, workers: int | None, check: Check, *,
    address: str | None = None, say: Say = lambda _t: None,
) -> Finished:
    """The points as Ray tasks, yielded as they finish. Not a generator itself, so that a missing Ray is
    an error at once; the cluster is joined or started on the first ``next``, and none at all when
    every point is already done (a resume of a finished sweep must not pay for a cluster start).

    With Ray, a sweep uses the cluster its process is already connected to (a notebook's, a test's) and
    leaves it running; otherwise it connects to ``address`` (or ``RAY_ADDRESS``, as ``ray job submit`` sets
    it), or else starts a private local cluster on loopback and shuts it down at the end."""
    address = address or os.environ.get("RAY_ADDRESS") or None
    ray = _import_ray(local=address is None)
    return _ray_tasks(ray, todo, base, constants, source, workers, check, address, say)


def _import_ray(local: bool):
    if local and "ray" not in sys.modules:
        os.environ.setdefault(RAY_LOOPBACK_SWITCH, "0")  # see RAY_LOOPBACK_SWITCH
    try:
        import ray  # type: ignore[import-not-found]
    except ImportError:
        raise InputError(
            "command line", Problem("--executor", "Ray is not installed: pip install 'tilewright[ray]'")
        ) from None
    return ray


def _ray_connect(ray, address: str | None, workers: int | None, say: Say) -> bool:
    """Join or start a cluster. True when this sweep connected, and so must disconnect with
    ``ray.shutdown()``: that stops a cluster it started and only detaches from one it joined."""
    if ray.is_initialized():
        say("sweep: on the Ray cluster this process is already connected to")
        return False
    quiet = {"log_to_driver": False, "logging_level": logging.WARNING}  # progress below replaces Ray's banner
    if address:
        ctx = ray.init(address=address, **quiet)  # a running cluster's size is its own: no num_cpus
    else:
        # "local", not None: None joins a cluster `ray start` left running on this machine (perhaps someone
        # else's), where num_cpus is then an error.
        ctx = ray.init(address="local", num_cpus=workers, include_dashboard=False, **quiet)
    gcs = getattr(ctx, "address_info", {}).get("gcs_address", address)  # a ray:// client has no address_info
    how = "joined" if address else "started for this sweep"
    say(f"sweep: Ray cluster at {gcs} ({how}), {ray.cluster_resources().get('CPU', 0):g} CPUs")
    return True


def _ray_tasks(
    ray, todo: list[Task], base: dict, constants: dict, source: str, workers: int | None, check: Check,
    address: str | None, say: Say,
) -> Finished:
    if not todo:
        return
    connected = _ray_connect(ray, address, workers, say)
    pending: dict[Any, Task] = {}
    try:
        task = ray.remote(run_point)  # by reference: workers import tilewright.engine.search.sweep.point
        base_ref = ray.put(base)  # stored once, not pickled into every task
        queue = iter(todo)
        limit = workers or len(todo)  # on a shared cluster --workers caps this sweep's share

        def submit() -> None:
            for key, ov in itertools.islice(queue, limit - len(pending)):
                pending[task.remote(base_ref, {**constants, **ov}, source)] = (key, ov)

        submit()
        while pending:
            check()
            ready, rest = ray.wait(list(pending), num_returns=1, timeout=POLL_S)
            if ready and rest:  # take every finished point at once: one wait per point over thousands is slow
                ready += ray.wait(rest, num_returns=len(rest), timeout=0)[0]
            for ref in ready:
                key, ov = pending.pop(ref)
                row = ray.get(ref)
                submit()
                yield key, ov, row
    finally:
        for ref in pending:  # queued tasks never start; running ones get a KeyboardInterrupt
            with contextlib.suppress(Exception):  # a task that just finished or a cluster already gone
                ray.cancel(ref)
        if connected:
            ray.shutdown()
        if pending:
            say(f"sweep: stopped, {counted(len(pending), 'point')} in flight cancelled")

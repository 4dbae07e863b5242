"""Sweeps: run a spec's points on a local process pool (one worker per core) or on Ray, stream each
finished point to a CSV, resume without redoing finished points, and compute the Pareto front.

The CSV is the sweep's state: one row per finished point, keyed by the hash of its overrides, appended
and flushed as each result arrives (a crash loses at most the points in flight). Restarting reads the
keys already there and submits only the rest. Ray is optional (``pip install 'tilewright[ray]'``) and
imported only when asked for, so the engine imports fast and works without it.

With Ray, a sweep uses the cluster its process is already connected to (a notebook's, a test's) and leaves
it running; otherwise it connects to ``ray_address`` (or ``RAY_ADDRESS``, as ``ray job submit`` sets it),
or else starts a private local cluster on loopback and shuts it down at the end. Tasks run ``run_point``
by reference, so every node needs tilewright importable (installed, or an editable install on this
machine); nothing is uploaded with a ``runtime_env``.
"""

from __future__ import annotations

import contextlib
import csv
import itertools
import logging
import os
import sys
import time
from collections.abc import Callable, Iterator
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from tilewright.engine.errors import InputError, Problem
from tilewright.engine.search.pareto import pareto_front
from tilewright.engine.search.sweep_point import COST_FIELDS, METRICS, run_point
from tilewright.engine.search.sweep_spec import SweepSpec, point_key, points

Progress = Callable[[str], None]
Task = tuple[str, dict[str, Any]]  # (key, overrides)

# Ray resolves a local cluster's address to the machine's network address and listens on every
# interface, unless this (misnamed) switch is off, which it is by default only on macOS and Windows.
# A sweep's private cluster needs no peers, so it is kept on loopback. Read once, when Ray is imported.
RAY_LOOPBACK_SWITCH = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"


@dataclass
class SweepResult:
    csv_path: str
    total: int
    ran: int = 0
    skipped: int = 0  # finished in an earlier run
    counts: dict[str, int] = field(default_factory=dict)  # by status, over the whole CSV
    pareto: list[dict[str, Any]] = field(default_factory=list)
    wall_time_s: float = 0.0


def load_spec(path: str) -> tuple[SweepSpec, dict[str, Any], str]:
    """The spec, the base project's raw data and the name errors should cite for it."""
    from tilewright.engine.io.json_file import read_json, require_object, validate_as
    from tilewright.engine.io.migrate import migrate
    from tilewright.engine.presets import resolve

    spec = validate_as(SweepSpec, require_object(read_json(path), path), path)
    if isinstance(spec.base, dict):
        return spec, migrate(dict(spec.base), f"{path}: base"), f"{path}: base"
    base_path = Path(spec.base)
    if not base_path.is_absolute() and (Path(path).parent / base_path).is_file():
        base_path = Path(path).parent / base_path  # relative to the spec
    source = str(resolve("projects", str(base_path) if base_path.is_file() else spec.base))
    return spec, migrate(require_object(read_json(source), source), source), source


def columns(spec: SweepSpec) -> list[str]:
    return ["key", "status", *(p.path for p in spec.parameters), *METRICS, *COST_FIELDS, "error"]


def finished_keys(path: Path) -> set[str]:
    if not path.is_file():
        return set()
    with path.open(newline="", encoding="utf-8") as fh:
        return {row["key"] for row in csv.DictReader(fh) if row.get("key")}


def read_rows(path: Path) -> list[dict[str, Any]]:
    with path.open(newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def run_sweep(
    spec: SweepSpec, base: dict[str, Any], source: str, out: str, *, executor: str = "local",
    workers: int | None = None, progress: Progress | None = None, ray_address: str | None = None,
) -> SweepResult:
    """Run the points not yet in ``out``, appending each to it as it finishes, then read the whole CSV back
    for the counts and the Pareto front. ``workers`` caps the points in flight (default: one per core, or
    the whole Ray cluster); ``ray_address`` is a Ray cluster to connect to (see the module docstring)."""
    say = progress or (lambda _m: None)
    start = time.perf_counter()
    todo_all = [(point_key(p), p) for p in points(spec)]
    path = Path(out)
    cols = columns(spec)
    _check_header(path, cols)
    done = finished_keys(path)
    seen: set[str] = set()
    todo = []
    for key, p in todo_all:
        if key not in done and key not in seen:
            seen.add(key)
            todo.append((key, p))
    result = SweepResult(str(path), len(todo_all), skipped=len(todo_all) - len(todo))
    say(f"sweep: {len(todo_all)} points, {result.skipped} already in {path}, {len(todo)} to run")
    constants = dict(spec.set)
    runner = partial(_run_ray, address=ray_address, say=say) if executor == "ray" else _run_local
    finished = runner(todo, base, constants, source, workers)  # a missing Ray is reported before the CSV is touched
    path.parent.mkdir(parents=True, exist_ok=True)
    new_file = not path.is_file() or path.stat().st_size == 0
    try:
        with path.open("a", newline="", encoding="utf-8") as fh:
            writer = csv.DictWriter(fh, fieldnames=cols, extrasaction="ignore")
            if new_file:
                writer.writeheader()
                fh.flush()
            for key, overrides, row in finished:
                writer.writerow({"key": key, **overrides, **row})
                fh.flush()  # each finished point is on disk before the next is awaited
                result.ran += 1
                say(f"sweep: {result.ran}/{len(todo)} {row['status']} {key}")
    finally:
        # Stopped here (Ctrl-C in a progress callback, a full disk), the runner would otherwise keep its
        # pool or cluster busy until garbage collection; closing it cancels what is in flight now.
        finished.close()
    rows = read_rows(path)
    for row in rows:
        result.counts[row["status"]] = result.counts.get(row["status"], 0) + 1
    ok = [_numeric(r) for r in rows if r["status"] == "ok"]
    objectives = [(o.metric, o.sense) for o in spec.objectives]
    result.pareto = [ok[i] for i in pareto_front(ok, objectives)]
    result.wall_time_s = time.perf_counter() - start
    return result


def _check_header(path: Path, cols: list[str]) -> None:
    if not path.is_file() or path.stat().st_size == 0:
        return
    with path.open(newline="", encoding="utf-8") as fh:
        header = next(csv.reader(fh), [])
    if header != cols:
        raise InputError(str(path), Problem("", "holds another sweep's columns; use a new --out to start afresh"))


def _numeric(row: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in row.items():
        try:
            out[k] = float(v) if v not in ("", None) and k not in ("key", "status", "error") else v
        except ValueError:
            out[k] = v
    return out


def _run_local(todo: list[Task], base: dict, constants: dict, source: str, workers: int | None) -> Iterator:
    """A process pool, one worker per core by default; one worker runs in this process."""
    n = workers or os.cpu_count() or 1
    if n == 1 or len(todo) <= 1:
        for key, overrides in todo:
            yield key, overrides, run_point(base, {**constants, **overrides}, source)
        return
    pool = ProcessPoolExecutor(max_workers=n)
    try:
        pending = {pool.submit(run_point, base, {**constants, **ov}, source): (key, ov) for key, ov in todo}
        while pending:
            done, _ = wait(pending, return_when=FIRST_COMPLETED)
            for fut in done:
                key, ov = pending.pop(fut)
                yield key, ov, fut.result()
    finally:
        pool.shutdown(wait=True, cancel_futures=True)  # when stopped early, queued points never start


def _run_ray(
    todo: list[Task], base: dict, constants: dict, source: str, workers: int | None, *,
    address: str | None = None, say: Progress = lambda _m: None,
) -> Iterator:
    """The points as Ray tasks, yielded as they finish. Not a generator itself, so that a missing Ray is
    an error at once; the cluster is joined or started on the first ``next``, and none at all when
    every point is already done (a resume of a finished sweep must not pay for a cluster start)."""
    address = address or os.environ.get("RAY_ADDRESS") or None
    ray = _import_ray(local=address is None)
    return _ray_tasks(ray, todo, base, constants, source, workers, address, say)


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


def _ray_connect(ray, address: str | None, workers: int | None, say: Progress) -> bool:
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
    ray, todo: list[Task], base: dict, constants: dict, source: str, workers: int | None, address: str | None,
    say: Progress,
) -> Iterator:
    if not todo:
        return
    connected = _ray_connect(ray, address, workers, say)
    pending: dict[Any, Task] = {}
    try:
        task = ray.remote(run_point)  # by reference: workers import tilewright.engine.search.sweep_point themselves
        base_ref = ray.put(base)  # stored once, not pickled into every task
        queue = iter(todo)
        limit = workers or len(todo)  # on a shared cluster --workers caps this sweep's share

        def submit() -> None:
            for key, ov in itertools.islice(queue, limit - len(pending)):
                pending[task.remote(base_ref, {**constants, **ov}, source)] = (key, ov)

        submit()
        while pending:
            ready, rest = ray.wait(list(pending), num_returns=1)
            if rest:  # take every finished point at once: one wait per point over thousands of refs is slow
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
        if pending:  # last: the studio's progress callback raises on every call once cancelled
            say(f"sweep: stopped, {len(pending)} points in flight cancelled")


def sweep_json(result: SweepResult) -> dict[str, Any]:
    return {
        "csv": result.csv_path,
        "points": result.total,
        "ran": result.ran,
        "skipped": result.skipped,
        "counts": result.counts,
        "pareto": result.pareto,
        "wall_time_s": result.wall_time_s,
    }


def sweep_text(result: SweepResult, spec: SweepSpec) -> str:
    lines = [
        f"sweep: {result.total} points, {result.ran} run now, {result.skipped} from earlier; "
        f"{', '.join(f'{k} {v}' for k, v in sorted(result.counts.items()))}; {result.wall_time_s:.1f} s",
        f"  results: {result.csv_path}",
        f"  Pareto front ({', '.join(f'{o.sense} {o.metric}' for o in spec.objectives)}): {len(result.pareto)} points",
    ]
    keys = [p.path for p in spec.parameters] + [o.metric for o in spec.objectives]
    for row in result.pareto:
        lines.append("    " + ", ".join(f"{k}={_fmt(row.get(k))}" for k in keys))
    return "\n".join(lines)


def _fmt(v: Any) -> str:
    return f"{v:.4g}" if isinstance(v, float) else str(v)

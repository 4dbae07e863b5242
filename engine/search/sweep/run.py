"""Sweeps: run a spec's points (``executors``: this process, a local process pool, or Ray), stream each
finished point to a CSV, resume without redoing finished points, and compute the Pareto front.

The CSV is the sweep's state: one row per finished point, keyed by the hash of its overrides, appended
and flushed as each result arrives (a crash or a cancel loses at most the points in flight). Restarting
reads the keys already there and submits only the rest. Ray is optional (``pip install 'tilewright[ray]'``)
and imported only when asked for, so the engine imports fast and works without it.
"""

from __future__ import annotations

import csv
import errno
import io
import os
import time
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from tilewright.engine.errors import InputError, Problem
from tilewright.engine.jobs import CancelFn, ProgressFn, Reporter
from tilewright.engine.results.text import counted, quantity
from tilewright.engine.search.pareto import pareto_front
from tilewright.engine.search.sweep.executors import Task, run_local, run_ray
from tilewright.engine.search.sweep.point import COLUMN_DOCS, COST_FIELDS, LABELS, METRICS
from tilewright.engine.search.sweep.spec import SweepSpec, point_key, points


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
    from tilewright.engine.io.presets import resolve

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
    workers: int | None = None, ray_address: str | None = None, progress: ProgressFn | None = None,
    cancel: CancelFn | None = None,
) -> SweepResult:
    """Run the points not yet in ``out``, appending each to it as it finishes, then read the whole CSV back
    for the counts and the Pareto front. ``workers`` caps the points in flight (default: one per core, or
    the whole Ray cluster); ``ray_address`` is a Ray cluster to connect to (``executors.run_ray``).

    ``progress(fraction, text)`` follows the points finished; ``cancel()`` stops the sweep within a fraction
    of a second with ``Cancelled``, its workers stopped and every finished point in ``out``, so running the
    same sweep again resumes it."""
    start = time.perf_counter()
    todo_all = [(point_key(p), p) for p in points(spec)]
    path = Path(out)
    cols = columns(spec)
    refuse_foreign_out(path, cols)
    drop_partial_row(path)
    done = finished_keys(path)
    seen: set[str] = set()
    todo: list[Task] = []
    for key, p in todo_all:
        if key not in done and key not in seen:
            seen.add(key)
            todo.append((key, p))
    result = SweepResult(str(path), len(todo_all), skipped=len(todo_all) - len(todo))
    report = Reporter(progress, cancel)
    report(0.0, f"sweep: {counted(len(todo_all), 'point')}, {result.skipped} already in {path}, {len(todo)} to run")

    def say(text: str) -> None:  # news that must not raise (it may come while stopping)
        if progress is not None:
            progress(result.ran / max(len(todo), 1), text)

    constants = dict(spec.set)
    if executor == "ray":
        runner = partial(run_ray, address=ray_address, say=say)
    else:
        runner = partial(run_local, cancel=cancel)
    # a missing Ray is reported before the CSV is touched
    finished = runner(todo, base, constants, source, workers, report.check)
    path.parent.mkdir(parents=True, exist_ok=True)
    new_file = not path.is_file() or path.stat().st_size == 0
    try:
        with RowAppender(path, cols) as rows_out:
            if new_file:
                rows_out.header()
            for key, overrides, row in finished:
                rows_out.append({"key": key, **overrides, **row})  # on disk before the next is awaited
                result.ran += 1
                report(result.ran / len(todo), f"sweep: {result.ran}/{len(todo)} {row['status']} {key}")
    finally:
        # Stopped here (a cancel, Ctrl-C, a full disk), the runner would otherwise keep its pool or
        # cluster busy until garbage collection; closing it stops what is in flight now.
        finished.close()
    rows = read_rows(path)
    for row in rows:
        result.counts[row["status"]] = result.counts.get(row["status"], 0) + 1
    ok = [_numeric(r) for r in rows if r["status"] == "ok"]
    objectives = [(o.metric, o.sense) for o in spec.objectives]
    result.pareto = [ok[i] for i in pareto_front(ok, objectives)]
    result.wall_time_s = time.perf_counter() - start
    return result


class RowAppender:
    """Appends whole CSV rows: each row is one line (newlines inside values are folded) written with one
    ``write`` on an append-only descriptor and fsynced. A write cut short (a full disk, a kill) can only
    leave a last line without its newline, which ``drop_partial_row`` removes before the next run — so a
    resumed sweep equals an uninterrupted one. OS errors name the file (exit 2), never a traceback."""

    def __init__(self, path: Path, cols: list[str]) -> None:
        self.path, self.cols = path, cols
        self.fd = -1

    def __enter__(self) -> RowAppender:
        try:
            self.fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)
        except OSError as exc:
            raise InputError(str(self.path), f"cannot write the results: {exc.strerror}") from None
        return self

    def __exit__(self, *_exc: object) -> None:
        os.close(self.fd)

    def header(self) -> None:
        self._write(self.cols)

    def append(self, row: dict[str, Any]) -> None:
        self._write([row.get(c, "") for c in self.cols])

    def _write(self, values: list[Any]) -> None:
        buf = io.StringIO()
        folded = [" | ".join(str(v).splitlines()) if isinstance(v, str) else v for v in values]
        csv.writer(buf, lineterminator="\n").writerow(folded)
        data = buf.getvalue().encode("utf-8")
        try:
            written = os.write(self.fd, data)
            while written < len(data):  # a short write: the next one raises the reason (disk full, too large)
                more = os.write(self.fd, data[written:])
                if more <= 0:
                    raise OSError(errno.ENOSPC, "short write (disk full?)")
                written += more
            os.fsync(self.fd)
        except OSError as exc:
            raise InputError(str(self.path), f"cannot write the results: {exc.strerror}") from None


def refuse_foreign_out(path: Path, cols: list[str]) -> None:
    """Refuse an output that is not this sweep's CSV before the sweep touches it: resuming cuts a last line
    without its newline (a row a kill cut short), which in any other file — a note, a one-line JSON project —
    would delete the user's data. This sweep's CSV starts with its header line, or, killed while writing it,
    a part of that line."""
    if not path.is_file():
        return
    with path.open("rb") as fh:
        head = fh.read(1 << 16)
    if not head:
        return
    line, complete = head.split(b"\n", 1)[0].rstrip(b"\r"), b"\n" in head
    buf = io.StringIO()
    csv.writer(buf, lineterminator="").writerow(cols)
    ours = buf.getvalue().encode("utf-8")
    if line == ours if complete else ours.startswith(line):
        return
    raise InputError(str(path), Problem("--out", "holds something other than this sweep's results (not a sweep's "
                                                 "CSV, or another sweep's columns); name a new file, or the CSV an "
                                                 "earlier run of this sweep wrote"))


def drop_partial_row(path: Path) -> None:
    """Cut a last line that lacks its newline (a row whose write was interrupted): that point runs again."""
    if not path.is_file():
        return
    with path.open("rb+") as fh:
        size = fh.seek(0, os.SEEK_END)
        if size == 0:
            return
        fh.seek(size - 1)
        if fh.read(1) == b"\n":
            return
        back = min(size, 1 << 20)
        fh.seek(size - back)
        tail = fh.read(back)
        cut = tail.rfind(b"\n")
        fh.truncate(size - back + cut + 1 if cut >= 0 else 0)


def _numeric(row: dict[str, Any]) -> dict[str, Any]:
    """A CSV row's values as the types they were written from: an empty cell (a metric the point has not,
    e.g. ``ttft_s`` of a training run) is None, a whole number an int (``mapping.dp`` 4, not 4.0), other
    numbers floats, ``True``/``False`` booleans; text columns and text values stay text."""
    out: dict[str, Any] = {}
    for k, v in row.items():
        out[k] = v if k in ("key", "status", "error") else _cell(v)
    return out


def _cell(text: Any) -> Any:
    if text in ("", None):
        return None
    if not isinstance(text, str):
        return text
    if text in ("True", "False"):
        return text == "True"
    try:
        return int(text)
    except ValueError:
        pass
    try:
        return float(text)
    except ValueError:
        return text


def sweep_json(result: SweepResult) -> dict[str, Any]:
    return {
        "csv": result.csv_path,
        "points": result.total,
        "ran": result.ran,
        "skipped": result.skipped,
        "counts": result.counts,
        "pareto": result.pareto,
        "wall_time_s": result.wall_time_s,
        "columns": dict(COLUMN_DOCS),  # what the power, area and cost columns hold (rated vs simulated)
    }


def sweep_text(result: SweepResult, spec: SweepSpec) -> str:
    lines = [
        f"sweep: {counted(result.total, 'point')}, {result.ran} run now, {result.skipped} from earlier; "
        f"{', '.join(f'{k} {v}' for k, v in sorted(result.counts.items()))}; {result.wall_time_s:.1f} s",
        f"  results: {result.csv_path}",
        f"  Pareto front ({', '.join(f'{o.sense} {_label(o.metric)}' for o in spec.objectives)}): "
        f"{counted(len(result.pareto), 'point')}",
    ]
    keys = [p.path for p in spec.parameters] + [o.metric for o in spec.objectives]
    if "power_w" in keys and "average_power_w" not in keys:
        keys.append("average_power_w")  # the rated power beside what the run drew
    for row in result.pareto:
        lines.append("    " + ", ".join(f"{_label(k)}={_shown(k, row.get(k))}" for k in keys))
    if "power_w" in keys:
        lines.append(f"  rated power: {COLUMN_DOCS['power_w']}; simulated power: {COLUMN_DOCS['average_power_w']}")
    return "\n".join(lines)


def _label(name: str) -> str:
    """A column as the text report names it: "rated power (power_w)", else the column itself."""
    return f"{LABELS[name]} ({name})" if name in LABELS else name


def _shown(name: str, value: Any) -> str:
    """A value with its unit, "—" for a metric the point has not."""
    return "—" if value is None else quantity(name, value)

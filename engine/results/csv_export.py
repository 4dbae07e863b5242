"""CSV exports of a result: metrics (with units, energy included), timeline slices, link utilisation (every
link that carried traffic, inference included), memory occupancy. UTF-8 text.

The four files belong to one run, so the folder is replaced whole (``engine.io.atomic.atomic_folder``): a
writer killed mid-export leaves the earlier export complete, never a mix of two runs' files. For the same
reason a folder holding anything but an earlier export is refused rather than replaced."""

from __future__ import annotations

import csv
import io
from pathlib import Path

from tilewright.engine.io.atomic import atomic_folder, check_replaceable_folder, write_atomic
from tilewright.engine.results.result import Result
from tilewright.engine.results.timeline import CATEGORIES

METRIC_UNITS = {
    "iteration_time_s": "s",
    "samples_per_s": "samples/s",
    "tokens_per_s": "tokens/s",
    "model_flops_per_iteration": "FLOP",
    "mfu": "fraction",
    "hfu": "fraction",
    "devices": "count",
    "peak_memory_bytes": "bytes",
    "host_peak_memory_bytes": "bytes",
    "host_memory_capacity_bytes": "bytes",
    "events": "count",
    "wall_time_s": "s",
    "ttft_s": "s",
    "tpot_s": "s",
    "prefill_s": "s",
    "e2e_s": "s",
    "tokens_per_s_per_user": "tokens/s",
    "tokens_per_s_per_device": "tokens/s",
    "energy_j": "J",
    "average_power_w": "W",
    "average_power_per_device_w": "W",
    "energy_per_token_j": "J/token",
    "energy_per_sample_j": "J/sample",
    "energy_per_request_j": "J/request",
    "host_energy_upper_bound_j": "J",
    "energy_sources": "",
}
SUFFIX_UNITS = (("bytes", "bytes"), ("_s", "s"), ("_j", "J"))
CSV_FILES = ("metrics.csv", "timeline.csv", "links.csv", "memory.csv")


def _write_rows(path: Path, header: list[str], rows) -> None:
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(header)
    writer.writerows(rows)
    write_atomic(path, buf.getvalue())


def metrics_rows(result: Result) -> list[tuple[str, object, str]]:
    rows: list[tuple[str, object, str]] = []
    for key, value in result.metrics_json().items():
        if isinstance(value, dict):
            unit = next((u for suffix, u in SUFFIX_UNITS if key.endswith(suffix)), "")
            rows += [(f"{key}.{k}", "" if v is None else v, unit) for k, v in value.items()]
        elif isinstance(value, list):
            rows += [(f"{key}.{i}", v, "") for i, v in enumerate(value)]
        else:
            rows.append((key, value, METRIC_UNITS.get(key, "")))
    return rows


def check_csv_folder(folder: str | Path) -> None:
    """Raise ``InputError`` when ``write_csv`` would refuse ``folder`` (a file, or a folder holding other
    files): a command checks before its run, not after."""
    check_replaceable_folder(folder, CSV_FILES)


def write_csv(result: Result, folder: str | Path) -> list[Path]:
    """The four CSV files into ``folder``, replacing an earlier export there as one step."""
    with atomic_folder(folder, allowed=CSV_FILES) as tmp:
        _write_files(result, [tmp / n for n in CSV_FILES])
    return [Path(folder) / n for n in CSV_FILES]


def _write_files(result: Result, paths: list[Path]) -> None:
    _write_rows(paths[0], ["metric", "value", "unit"], metrics_rows(result))
    tl = result.timeline
    a = tl.arrays()
    _write_rows(
        paths[1],
        ["lane", "category", "label", "start_s", "duration_s", "stage", "micro_batch", "layer"],
        (
            (
                tl.lanes[a["lane"][i]].name,
                CATEGORIES[a["category"][i]],
                tl.labels[a["label"][i]],
                f"{a['start'][i]:.9g}",
                f"{a['dur'][i]:.9g}",
                a["stage"][i],
                a["micro_batch"][i],
                a["layer"][i],
            )
            for i in range(len(a["lane"]))
        ),
    )
    _write_rows(
        paths[2],
        ["link", "time_s", "utilisation"],
        (
            (s.name, f"{t:.9g}", f"{v:.6g}")
            for s in result.link_utilisation
            for t, v in zip(s.times, s.values, strict=True)
        ),
    )
    _write_rows(
        paths[3],
        ["device", "time_s", "category", "bytes", "capacity_bytes"],
        (
            (tr.device, f"{t:.9g}", cat, f"{vals[i]:.6g}", f"{tr.capacity_bytes:.6g}")
            for tr in result.memory
            for i, t in enumerate(tr.times)
            for cat, vals in tr.by_category.items()
        ),
    )

"""The Ray executor for real: a local Ray cluster on loopback runs a small sweep, and its CSV, its resume and
its Pareto front must match the process pool's. Skipped only when Ray is missing (the test extra has it).

One cluster serves the module (starting one costs seconds on two cores). The command-line tests run
``tilewright sweep`` in a subprocess, as a user does: one joins that cluster with ``--ray-address``, one
starts its own, and every process a cluster starts is found afterwards by an environment marker it
inherits, so a stray is caught without mistaking other Ray processes on the machine for ours.
"""

from __future__ import annotations

import contextlib
import csv
import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from tilewright.engine.io import save_project
from tilewright.engine.jobs import Cancelled
from tilewright.engine.search.sweep import executors as sweep_mod
from tilewright.engine.search.sweep.executors import RAY_LOOPBACK_SWITCH
from tilewright.engine.search.sweep.point import COST_FIELDS, METRICS
from tilewright.engine.search.sweep.run import load_spec, run_sweep
from tilewright.engine.search.sweep.spec import point_key

from tests.factories import small_project

if importlib.util.find_spec("ray") is None:
    pytest.skip("Ray is not installed: pip install -e '.[test]'", allow_module_level=True)

pytestmark = pytest.mark.slow  # a local Ray cluster: seconds to start on two cores

MARK = "TILEWRIGHT_RAY_TEST_MARK"
REPO = Path(__file__).resolve().parent.parent
# Four points of about 0.05 s each; recompute=full is slower on the same devices, so two points are dominated.
SPEC = {
    "base": "base.json",
    "set": {"run.engine": "analytic"},
    "parameters": [{"path": "mapping.dp", "values": [1, 4]}, {"path": "mapping.recompute", "values": ["none", "full"]}],
    "objectives": [{"metric": "iteration_time_s"}, {"metric": "devices"}],
}
PARAMS = [p["path"] for p in SPEC["parameters"]]


@pytest.fixture(scope="module")
def spec_file(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("ray-sweep")
    save_project(small_project(), folder / "base.json")
    (folder / "spec.json").write_text(json.dumps(SPEC))
    return folder / "spec.json"


@pytest.fixture(scope="module")
def local_run(spec_file: Path, tmp_path_factory):
    """The reference: the same sweep on the process pool. Requested by ``ray_cluster`` so that the pool
    forks this process before Ray's threads exist in it."""
    spec, base, source = load_spec(str(spec_file))
    out = tmp_path_factory.mktemp("local") / "local.csv"
    result = run_sweep(spec, base, source, str(out), workers=2)
    assert result.counts.get("ok", 0) >= 3, result.counts  # a front needs points that can dominate
    return result, _rows(out)


@pytest.fixture(scope="module")
def ray_cluster(local_run):
    """A local cluster of 2 CPUs on loopback for the whole module, shut down and checked for strays after."""
    marker = uuid.uuid4().hex
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(RAY_LOOPBACK_SWITCH, "0")  # read when Ray is imported, just below
        mp.setenv(MARK, marker)  # inherited by every process the cluster starts
        mp.delenv("RAY_ADDRESS", raising=False)
        import ray

        ctx = ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        assert ctx.address_info["node_ip_address"] == "127.0.0.1", "the test cluster must stay on loopback"
        yield ctx.address_info
    finally:
        ray.shutdown()
    assert _strays(marker) == []


def _rows(path: Path) -> dict[str, dict[str, str]]:
    with path.open(newline="") as fh:
        return {row["key"]: row for row in csv.DictReader(fh)}


def _assert_same_rows(got: dict[str, dict], want: dict[str, dict]) -> None:
    assert got.keys() == want.keys()
    for key, w in want.items():
        g = got[key]
        assert [g["status"], *(g[p] for p in PARAMS)] == [w["status"], *(w[p] for p in PARAMS)]
        for col in (*METRICS, *COST_FIELDS):
            if w[col] == "":
                assert g[col] == "", (key, col)
            else:
                assert float(g[col]) == pytest.approx(float(w[col]), rel=1e-12), (key, col)


def _assert_same_front(got: list[dict], want: list[dict]) -> None:
    objectives = [o["metric"] for o in SPEC["objectives"]]
    by_key = lambda front: {r["key"]: [float(r[m]) for m in objectives] for r in front}  # noqa: E731
    g, w = by_key(got), by_key(want)
    assert g.keys() == w.keys() and g
    for key in w:
        assert g[key] == pytest.approx(w[key], rel=1e-12)


def _counting_run_point(log: Path):
    """``run_point`` that first appends its overrides to ``log``. Defined in a function, so Ray pickles
    it by value and it runs in the workers; appends of one short line from several processes don't mix."""
    real = sweep_mod.run_point
    log_path = str(log)

    def run_point(base, overrides, source):
        with open(log_path, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(overrides, sort_keys=True) + "\n")
        return real(base, overrides, source)

    return run_point


def _evaluated_keys(log: Path) -> list[str]:
    if not log.is_file():
        return []
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    return [point_key({p: o[p] for p in PARAMS}) for o in lines]


def _strays(marker: str, wait_s: float = 10.0) -> list[str]:
    """Live processes (not this one) whose environment carries ``marker``, after up to ``wait_s`` for
    them to exit; those still there are killed, so a failing run leaves nothing behind either. Zombies
    have an empty environment and are not counted: they hold no resources."""
    needle = f"{MARK}={marker}".encode()
    deadline = time.monotonic() + wait_s
    while True:
        found: dict[int, str] = {}
        for proc in Path("/proc").glob("[0-9]*"):
            try:
                if int(proc.name) != os.getpid() and needle in (proc / "environ").read_bytes().split(b"\0"):
                    cmd = (proc / "cmdline").read_bytes().replace(b"\0", b" ")
                    found[int(proc.name)] = cmd.decode(errors="replace")[:80].strip()
            except (OSError, ValueError):
                continue  # exited while we looked
        if not found or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    for pid in found:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    return [f"{pid} {cmd}" for pid, cmd in found.items()]


def _cli(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    """``tilewright sweep`` in a subprocess, through ``entry`` (which ends with ``os._exit``, skipping
    atexit handlers: Ray must be shut down by the sweep itself)."""
    return subprocess.run(
        [sys.executable, "-m", "tilewright.engine.cli", "sweep", *args], cwd=REPO, env=env,
        capture_output=True, text=True, timeout=60,
    )


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", RAY_LOOPBACK_SWITCH)}
    return env | extra


def test_ray_sweep_streams_the_same_rows_and_front_as_the_process_pool(ray_cluster, spec_file, local_run, tmp_path):
    import ray

    spec, base, source = load_spec(str(spec_file))
    out = tmp_path / "ray.csv"
    on_disk: list[tuple[int, int]] = []
    said: list[str] = []

    def progress(_fraction: float, message: str) -> None:
        said.append(message)
        if message.startswith("sweep: ") and "/" in message.split()[1]:  # "sweep: 3/4 ok <key>"
            on_disk.append((int(message.split()[1].split("/")[0]), len(_rows(out))))

    result = run_sweep(spec, base, source, str(out), executor="ray", progress=progress)
    assert (result.ran, result.skipped) == (4, 0)
    assert on_disk == [(i, i) for i in range(1, 5)]  # each point is in the CSV when it is reported
    assert any("already connected" in m for m in said)  # it used this process's cluster…
    assert ray.is_initialized()  # …and left it running for its owner
    _assert_same_rows(_rows(out), local_run[1])
    _assert_same_front(result.pareto, local_run[0].pareto)


def test_interrupted_ray_sweep_resumes_without_rerunning_finished_points(
    ray_cluster, spec_file, local_run, tmp_path, monkeypatch
):
    spec, base, source = load_spec(str(spec_file))
    out = tmp_path / "ray.csv"

    said: list[str] = []

    def stop_after_two() -> bool:  # the studio's cancel, once two points are written
        return any(m.startswith("sweep: 2/") for m in said)

    with pytest.raises(Cancelled):
        run_sweep(spec, base, source, str(out), executor="ray", progress=lambda _f, m: said.append(m),
                  cancel=stop_after_two)
    first = _rows(out)
    assert len(first) == 2

    # Tag the finished rows: recomputing a point would add a second, untagged row for its key.
    with out.open(newline="") as fh:
        header = next(csv.reader(fh))
    with out.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=header)
        writer.writeheader()
        writer.writerows(r | {"error": "kept from the first run"} for r in first.values())
    log = tmp_path / "evaluated.jsonl"
    monkeypatch.setattr(sweep_mod, "run_point", _counting_run_point(log))
    result = run_sweep(spec, base, source, str(out), executor="ray")

    assert (result.skipped, result.ran) == (2, 2)
    assert sorted(_evaluated_keys(log)) == sorted(local_run[1].keys() - first.keys())
    rows = _rows(out)
    assert len(out.read_text().splitlines()) == 1 + 4  # no key twice
    assert {k for k, r in rows.items() if r["error"] == "kept from the first run"} == first.keys()
    _assert_same_rows(rows, local_run[1])
    _assert_same_front(result.pareto, local_run[0].pareto)

    said.clear()
    again = run_sweep(spec, base, source, str(out), executor="ray", progress=lambda _f, m: said.append(m))
    assert (again.skipped, again.ran) == (4, 0)
    assert not any("Ray" in m for m in said)  # nothing to run: no cluster joined (nor, from the CLI, started)


def test_cli_joins_a_running_cluster_and_leaves_it_running(ray_cluster, spec_file, local_run, tmp_path):
    import ray

    address = ray_cluster["gcs_address"]
    # A driver joining a loopback-only cluster must be on loopback too: else Ray rewrites 127.0.0.1 to the
    # machine's address and retries for minutes. A real cluster (`ray start`) needs no such setting.
    proc = _cli(str(spec_file), "--executor", "ray", "--ray-address", address, "--out", str(tmp_path / "r.csv"),
                "--json", env=_env(**{RAY_LOOPBACK_SWITCH: "0"}))
    assert proc.returncode == 0, proc.stderr
    assert f"Ray cluster at {address} (joined)" in proc.stderr
    data = json.loads(proc.stdout)
    assert (data["ran"], data["counts"]) == (4, local_run[0].counts)
    _assert_same_front(data["pareto"], local_run[0].pareto)
    assert ray.cluster_resources().get("CPU") == 2  # the CLI only disconnected


def test_cli_starts_its_own_loopback_cluster_and_stops_it(ray_cluster, spec_file, local_run, tmp_path):
    """With no address the CLI starts a cluster of its own, even while another runs on the machine (this
    module's), keeps it on loopback, and leaves no process behind."""
    marker = uuid.uuid4().hex
    proc = _cli(str(spec_file), "--executor", "ray", "--workers", "2", "--out", str(tmp_path / "r.csv"), "--json",
                env=_env(**{MARK: marker}))
    assert proc.returncode == 0, proc.stderr
    assert "Ray cluster at 127.0.0.1:" in proc.stderr and "(started for this sweep), 2 CPUs" in proc.stderr
    assert ray_cluster["gcs_address"] not in proc.stderr
    _assert_same_front(json.loads(proc.stdout)["pareto"], local_run[0].pareto)
    assert _strays(marker) == []

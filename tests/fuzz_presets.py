"""Mutate preset projects and run each mutant through ``tilewright run``: the exit-code contract says 0 (ran),
2 (bad input, with file, field and reason) or 3 (out of memory) — never 1 (an internal error).

Each mutant runs in a forked child, so its time and peak memory are its own (a hang is killed at the time
limit and reported). Run by tests/test_fuzz_presets.py in a subprocess; also usable by hand:
``python tests/fuzz_presets.py 500 --seed 7`` prints one JSON line per mutant that broke the contract.
Mutations are seeded, so a failure is reproducible from its seed and index.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import random
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from tilewright.engine.cli import main
from tilewright.engine.io.presets import list_presets, preset_path

ODD_VALUES: list[Any] = [
    None, True, False, 0, -1, 1, 2**31, 10**9, 10**15, 1e308, -1e-9, 0.5, "", "x", "1e9", [], {}, [1, 2], {"a": 1},
]


def _paths(node: Any, prefix: tuple = ()) -> list[tuple]:
    out = [prefix] if prefix else []
    if isinstance(node, dict):
        for k, v in node.items():
            out += _paths(v, (*prefix, k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            out += _paths(v, (*prefix, i))
    return out


def _get(node: Any, path: tuple) -> Any:
    for p in path:
        node = node[p]
    return node


def mutate(data: dict, rng: random.Random) -> tuple[dict, str]:
    """One to three random edits of ``data``; returns the mutant and a description of the edits."""
    out = copy.deepcopy(data)
    said = []
    for _ in range(rng.randint(1, 3)):
        paths = _paths(out)
        if not paths:
            break
        path = rng.choice(paths)
        parent, key = _get(out, path[:-1]), path[-1]
        old = parent[key]
        roll = rng.random()
        if roll < 0.15 and isinstance(parent, dict):
            del parent[key]
            said.append(f"del {'.'.join(map(str, path))}")
            continue
        if isinstance(old, bool) or not isinstance(old, int | float) or roll < 0.45:
            new = rng.choice(ODD_VALUES)
        else:  # a number: scale it far up or down, or flip its sign
            new = rng.choice([old * 10 ** rng.randint(1, 9), -old, old // 7 if isinstance(old, int) else old / 7])
        parent[key] = new
        said.append(f"{'.'.join(map(str, path))}={json.dumps(new)[:40]}")
    return out, "; ".join(said)


MAX_RSS_KIB = 2 * 1024 * 1024  # no process over 2 GiB


def run_one(argv: list[str], seconds: float) -> tuple[int | None, float, int, str]:
    """``tilewright argv`` in a forked child (the engine already imported, so it starts in milliseconds):
    its exit status (None when killed for running past ``seconds``), wall time, peak RSS in KiB — of that
    run alone, not the corpus so far — and the end of its stderr."""
    with tempfile.TemporaryFile() as err:
        start = time.perf_counter()
        pid = os.fork()
        if pid == 0:  # the child: run, then leave without tearing the interpreter down
            code = 1
            try:
                os.dup2(os.open(os.devnull, os.O_WRONLY), 1)
                os.dup2(err.fileno(), 2)
                code = main(argv)
            finally:
                os._exit(code)
        code: int | None = None
        while True:
            done, status, usage = os.wait4(pid, os.WNOHANG)
            if done:
                code = os.waitstatus_to_exitcode(status) if code is None else code
                break
            if time.perf_counter() - start > seconds and code is None:
                os.kill(pid, signal.SIGKILL)  # a hang: stop it, report it, go on with the corpus
                code = -9
            time.sleep(0.005)
        took = time.perf_counter() - start
        err.seek(0)
        tail = err.read().decode("utf-8", "replace")[-300:]
    return (None if code == -9 else code), took, usage.ru_maxrss, tail


def run_mutants(count: int, seed: int, seconds_each: float) -> list[dict]:
    """Run ``count`` mutants; return those that broke the contract: exit 1 (or anything but 0, 2, 3),
    slower than ``seconds_each``, or a process past 2 GiB."""
    rng = random.Random(seed)
    presets = {n: json.loads(preset_path("projects", n).read_text()) for n in list_presets("projects")}
    bad = []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(count):
            name = rng.choice(sorted(presets))
            mutant, edits = mutate(presets[name], rng)
            path = Path(tmp) / f"mutant-{i}.json"
            path.write_text(json.dumps(mutant))
            engine = rng.choice(["analytic", "event"])
            code, took, peak_kib, err = run_one(["run", str(path), "--engine", engine, "--json"], seconds_each)
            if code not in (0, 2, 3) or took > seconds_each or peak_kib > MAX_RSS_KIB:
                bad.append({"seed": seed, "index": i, "preset": name, "engine": engine, "edits": edits,
                            "exit": code, "seconds": round(took, 2), "peak_mib": peak_kib // 1024,
                            "stderr": err})
    return bad


def cli() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("count", type=int)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--seconds-each", type=float, default=60.0)
    args = parser.parse_args()
    bad = run_mutants(args.count, args.seed, args.seconds_each)
    for b in bad:
        print(json.dumps(b))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(cli())

"""Model presets load, build and match their sources; the builders are fast and Qt-free."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import TypeAdapter
from tilewright.engine.ir import WorkloadSpec
from tilewright.engine.workloads import build_workload
from tilewright.engine.workloads.presets import MODEL_PRESETS_DIR, model_preset_specs, preset_json

REPO = Path(__file__).resolve().parents[1]
MEGATRON_CSV = REPO.parent / "shared" / "reference" / "megatron_sc21_table1.csv"
GPT_NAMES = ["gpt-1.7b", "gpt-3.6b", "gpt-7.5b", "gpt-18.4b", "gpt-39.1b", "gpt-76.1b", "gpt-145.6b",
             "gpt-310.1b", "gpt-529.6b", "gpt-1008b"]
REQUIRED = GPT_NAMES + ["gpt3-175b", "t-18b", "llama2-7b", "llama2-70b", "bert-large", "vgg-a", "vgg-b",
                        "vgg-c", "vgg-d", "vgg-e", "resnet50", "alexnet", "lenet", "mlp-mnist"]
ADAPTER: TypeAdapter[WorkloadSpec] = TypeAdapter(WorkloadSpec)
PRESET_FILES = sorted(MODEL_PRESETS_DIR.glob("*.json"))


def load(name: str) -> WorkloadSpec:
    return ADAPTER.validate_json((MODEL_PRESETS_DIR / f"{name}.json").read_bytes())


def test_every_required_preset_exists() -> None:
    assert set(REQUIRED) <= {p.stem for p in PRESET_FILES}


@pytest.mark.parametrize("path", PRESET_FILES, ids=lambda p: p.stem)
def test_preset_loads_and_builds(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    spec = ADAPTER.validate_json(text)
    assert spec.name == path.stem
    assert len(spec.comment) > 20, "a preset names its source"
    assert list(json.loads(text)) == sorted(json.loads(text)), "keys sorted"
    graph = build_workload(spec)
    assert graph.params > 0 and graph.flops_per_sample > 0


def test_preset_files_are_what_the_generator_writes() -> None:
    """Edit ``model_preset_specs`` and run ``python -m tilewright.engine.workloads.presets``, not the JSON by hand."""
    for spec in model_preset_specs():
        assert (MODEL_PRESETS_DIR / f"{spec.name}.json").read_text(encoding="utf-8") == preset_json(spec)


@pytest.mark.skipif(not MEGATRON_CSV.exists(), reason=f"reference table not found at {MEGATRON_CSV}")
def test_gpt_presets_match_megatron_table1() -> None:
    """Table 1 prints parameters to 0.1 B (1.65 B shows as 1.7), so compare at that precision."""
    with MEGATRON_CSV.open() as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == len(GPT_NAMES)
    for name, row in zip(GPT_NAMES, rows, strict=True):
        spec = load(name)
        assert (spec.heads, spec.hidden, spec.layers) == (int(row["heads"]), int(row["hidden"]),
                                                          int(row["layers"]))
        assert (spec.seq_len, spec.vocab, spec.ffn_dim) == (2048, 51200, 4 * spec.hidden)
        params_billion = build_workload(spec).params / 1e9
        assert params_billion == pytest.approx(float(row["params_billion"]), abs=0.05 + 1e-9), name
        if float(row["params_billion"]) >= 7:
            assert params_billion == pytest.approx(float(row["params_billion"]), rel=0.01), name


def test_gpt3_175b_preset() -> None:
    """Brown et al. 2020: 175 B parameters (174.6 B with the vocabulary padded to 51,200)."""
    assert build_workload(load("gpt3-175b")).params == pytest.approx(175e9, rel=5e-3)


def test_gpt_1008b_builds_its_128_layers() -> None:
    """The 1T preset builds (its < 100 ms bar is benchmarks/bench_wafer_canvas.py's)."""
    graph = build_workload(load("gpt-1008b"))
    assert len(graph.block_layers) == 128


def test_workloads_import_without_qt() -> None:
    code = (
        "import sys, engine.workloads, engine.workloads.presets; "
        "bad = [m for m in sys.modules if m.split('.')[0] in ('PySide6', 'PyQt5', 'PyQt6', 'pyqtgraph')]; "
        "sys.exit(', '.join(bad) or None)"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr

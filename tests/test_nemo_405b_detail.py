"""The per-op view of the DGX-H100 check (``calibrate_nemo_h100.py --detail``) attributes a row's error layer by
layer, so it must show a layer the row runs many of. Megatron-Bridge's FP8-CS recipe keeps the first and last
transformer layers in bf16 (``nemo_h100_recipes.FP8_BF16_LAYERS``); showing block0 of an fp8 row would price
the fp8 run's GEMMs at the bf16 rate (about twice as long) and point the attribution the wrong way.
"""

from __future__ import annotations

import contextlib
import io
import re
import sys
from dataclasses import replace
from pathlib import Path

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"
sys.path.insert(0, str(BENCH))
from nemo_h100_diagnostics import detail  # noqa: E402
from nemo_h100_published import Row, rows  # noqa: E402
from nemo_h100_recipes import FP8_BF16_LAYERS  # noqa: E402
from nemo_h100_run import project_for  # noqa: E402


def _row(label: str):
    return next(r for r in rows() if label in r.label)


def _shown(row) -> tuple[int, dict[str, float]]:
    """The block index ``detail`` prints and each op's forward device time (ms)."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        detail(row)
    text = out.getvalue()
    block = int(re.search(r"of block(\d+),", text).group(1))
    forward = {m.group(1): float(m.group(2)) for m in re.finditer(r"^\s+(\w+)\s+F\s+([\d.]+)", text, re.M)}
    return block, forward


def test_fp8_row_shows_an_fp8_layer():
    row = _row("llama3.1-405b 1024g fp8 gbs512")
    first, last = FP8_BF16_LAYERS[row.pub.run_recipe.fp8_recipe]
    layers = project_for(row).workload.layers
    bf16 = set(range(first)) | set(range(layers - last, layers))
    assert bf16, "the FP8-CS recipe keeps edge layers in bf16; this test needs one"
    block, forward = _shown(row)
    assert block not in bf16
    # the shown layer's GEMMs run on the fp8 units: a bf16 row of the same model and mapping runs them slower
    # by at least the datasheet's peak ratio times the fp8 format's efficiency (0.875 × 2 = 1.75 on H100)
    bf16_row = Row(replace(row.pub, precision="bf16"))
    _, bf16_forward = _shown(bf16_row)
    assert bf16_forward["mlp_up"] > 1.5 * forward["mlp_up"]


def test_bf16_row_keeps_the_first_block():
    """With no bf16 edge layers to skip, the view stays on stage 0's first block."""
    block, _ = _shown(_row("gpt-oss-120b 64g bf16 gbs1280"))
    assert block == 0

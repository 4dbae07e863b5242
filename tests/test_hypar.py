"""HyPar (Song et al., HPCA 2019): the paper's VGG-A figure, hand-computed cases, and brute force."""

from __future__ import annotations

import itertools
import json
import random

import pytest
from tilewright.engine.cli import main
from tilewright.engine.errors import InputError
from tilewright.engine.io.presets import load_project_preset
from tilewright.engine.ir import CNNSpec, GPTSpec, MLPSpec
from tilewright.engine.plan.checks import check_project
from tilewright.engine.search.hypar.partition import (
    HyparLayer,
    best_level,
    hypar,
    hypar_layers,
    level_cost,
    uniform,
)
from tilewright.engine.search.hypar.report import apply_partition
from tilewright.engine.workloads import build_workload

# VGG-A (Simonyan & Zisserman, Table 1) weights with biases, by hand: 3·3·c_in·c_out + c_out per conv.
VGG_A_PARAMS = (
    (3 * 3 * 3 * 64 + 64)
    + (3 * 3 * 64 * 128 + 128)
    + (3 * 3 * 128 * 256 + 256)
    + (3 * 3 * 256 * 256 + 256)
    + (3 * 3 * 256 * 512 + 512)
    + 3 * (3 * 3 * 512 * 512 + 512)
    + (7 * 7 * 512 * 4096 + 4096)
    + (4096 * 4096 + 4096)
    + (4096 * 1000 + 1000)
)


def L(weights: float, out: float, index: int = 0) -> HyparLayer:
    return HyparLayer(index=index, name=f"l{index}", weights=weights, out_elems=out)


def test_vgg_a_pure_data_parallelism_moves_15_9_gb_on_16_accelerators():
    """HyPar Fig. 8: 15.9 GB per step. Four levels weigh 1+2+4+8 = 15, both directions ×2, fp32 ×4."""
    layers = hypar_layers(build_workload(CNNSpec(arch="vgg-a")))
    assert len(layers) == 11  # 8 conv + 3 fc
    assert sum(lay.weights for lay in layers) == VGG_A_PARAMS == 132_863_336
    dp = uniform(layers, 16, 128, "fp32", "dp")
    assert dp.total_bytes == VGG_A_PARAMS * 15 * 2 * 4
    assert round(dp.total_bytes / 1e9, 1) == 15.9


def test_vgg_a_hybrid_beats_both_pure_strategies():
    layers = hypar_layers(build_workload(CNNSpec(arch="vgg-a")))
    best = hypar(layers, 16, 128)
    assert best.total_bytes < uniform(layers, 16, 128, "fp32", "dp").total_bytes
    assert best.total_bytes < uniform(layers, 16, 128, "fp32", "mp").total_bytes
    top = best.levels[0].choices
    assert top[:8] == ["dp"] * 8 and top[8:] == ["mp"] * 3  # the paper's pattern: conv dp, fc mp


def test_feature_map_is_after_pooling_and_last_layer_uses_logits():
    layers = hypar_layers(build_workload(CNNSpec(arch="vgg-a")))
    assert layers[0].out_elems == 64 * 112 * 112  # conv1 224² → max-pool → 112²
    assert layers[7].out_elems == 512 * 7 * 7
    assert layers[-1].out_elems == 1000  # logits, not the scalar loss


def test_two_layers_by_hand():
    """L0: W=100, F=10/sample; L1: W=1000, F=2/sample; batch 4.
    dd = 100+1000 = 1100; dm = 100 + 8 + ¼·40 + ¼·40 = 128; md = 40 + 1000 + ½·40 = 1060;
    mm = 40 + 8 + ½·40 = 68 → mm, 68 elements; bytes = 68·2 directions·4 B = 544."""
    layers = [L(100, 10, 0), L(1000, 2, 1)]
    cost, choices = best_level(layers, 4, [1, 1], [1, 1])
    assert (cost, choices) == (68, ["mp", "mp"])
    assert hypar(layers, 2, 4).total_bytes == 544
    # two levels: mp halves the weights (dd 550, dm 78, md 560, mm 68) → mm again; 68 + 2·68 = 204
    assert hypar(layers, 4, 4).total_bytes == 204 * 8


def test_three_layers_by_hand():
    """W = (1000, 1, 1000), F = (1, 1000, 1), batch 1. mdm: intra 1 + 1 + 1; m→d over F_1 = 1 costs ½;
    d→m over F_2 = 1000 costs ¼·1000 + ¼·1000 = 500; total 503.5, the optimum (mdd 1002.5, mmm 1502.5,
    ddd 2001)."""
    layers = [L(1000, 1, 0), L(1, 1000, 1), L(1000, 1, 2)]
    cost, choices = best_level(layers, 1, [1] * 3, [1] * 3)
    assert choices == ["mp", "dp", "mp"]
    assert cost == pytest.approx(503.5)


def test_levels_shrink_tensors_so_choices_can_flip():
    """One layer, W=300, F=100/sample, batch 4 on 8 accelerators:
    level 1 dp (300 < 400), level 2 mp (dp 300 > mp 200 after the batch halved), level 3 dp (150 < 200);
    total = 300 + 2·200 + 4·150 = 1300 elements → ×2×4 B = 10,400 bytes."""
    part = hypar([L(300, 100)], 8, 4)
    assert [lv.choices[0] for lv in part.levels] == ["dp", "mp", "dp"]
    assert [lv.comm_elems for lv in part.levels] == [300, 200, 150]
    assert part.total_bytes == 10_400


def _random_layers(rng: random.Random, n: int) -> list[HyparLayer]:
    return [L(rng.choice([1, 10, 1e3, 1e5, 3e6]) * rng.random(), rng.choice([1, 50, 4e3]) * rng.random(), i)
            for i in range(n)]


@pytest.mark.parametrize("seed", range(40))
def test_dynamic_programme_matches_brute_force(seed: int):
    rng = random.Random(seed)
    layers = _random_layers(rng, rng.randint(1, 7))
    batch = rng.choice([1, 8, 128])
    b = [rng.choice([1, 0.5, 0.25]) for _ in layers]
    w = [rng.choice([1, 0.5, 0.25]) for _ in layers]
    cost, choices = best_level(layers, batch, b, w)
    brute = min(level_cost(layers, list(c), batch, b, w) for c in itertools.product(("dp", "mp"), repeat=len(layers)))
    assert cost == pytest.approx(brute, rel=1e-12)
    assert level_cost(layers, choices, batch, b, w) == pytest.approx(cost, rel=1e-12)


@pytest.mark.parametrize("seed", range(10))
def test_every_level_is_optimal_given_the_levels_above(seed: int):
    """Brute force per level, with the tensors shrunk by the choices made above it."""
    rng = random.Random(100 + seed)
    layers = _random_layers(rng, rng.randint(2, 6))
    part = hypar(layers, 8, 32)
    b, w = [1.0] * len(layers), [1.0] * len(layers)
    for lv in part.levels:
        brute = min(level_cost(layers, list(c), 32, b, w) for c in itertools.product(("dp", "mp"), repeat=len(layers)))
        assert lv.comm_elems == pytest.approx(brute, rel=1e-12)
        for i, c in enumerate(lv.choices):
            b[i], w[i] = (b[i] / 2, w[i]) if c == "dp" else (b[i], w[i] / 2)


def test_one_accelerator_communicates_nothing():
    assert hypar([L(10, 10)], 1, 8).total_bytes == 0


def test_mlp_is_a_hypar_workload():
    layers = hypar_layers(build_workload(MLPSpec(layer_sizes=[784, 512, 10])))
    assert [lay.weights for lay in layers] == [784 * 512 + 512, 512 * 10 + 10]


def test_bad_inputs_are_input_errors():
    with pytest.raises(InputError, match="power of two"):
        hypar([L(1, 1)], 12, 8)
    with pytest.raises(InputError, match="conv and fc"):
        hypar_layers(build_workload(GPTSpec(layers=2, hidden=64, heads=4, seq_len=16, vocab=100)))


def test_partition_is_written_into_the_project():
    project = load_project_preset("hypar-vgg-a")
    layers = hypar_layers(build_workload(project.workload))
    part = hypar(layers, 16, 128)
    out = apply_partition(project, part)
    lp = out.mapping.layer_parallelism
    assert [x.layer for x in lp] == list(range(11))
    assert [x.parallelism for x in lp] == part.levels[0].choices
    assert check_project(out) == []
    assert project.mapping.layer_parallelism == []  # the input is not modified


def test_cli_json(capsys):
    assert main(["hypar", "--model", "vgg-a", "--accelerators", "16", "--batch", "128", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["dp_comm_bytes"] == VGG_A_PARAMS * 120
    assert [lv["level"] for lv in data["levels"]] == [1, 2, 3, 4]
    assert sum(lv["comm_bytes"] for lv in data["levels"]) == pytest.approx(data["total_comm_bytes"])
    assert [c["layer"] for c in data["levels"][0]["choices"]][:2] == ["conv1", "conv2"]
    assert {c["parallelism"] for lv in data["levels"] for c in lv["choices"]} <= {"dp", "mp"}


def test_cli_bad_input_exit_2(capsys):
    assert main(["hypar", "--model", "vgg-a", "--accelerators", "6", "--batch", "128"]) == 2
    assert "--accelerators" in capsys.readouterr().err
    assert main(["hypar", "--model", "no-such-model", "--accelerators", "4", "--batch", "8"]) == 2
    assert main(["hypar", "--model", "vgg-a", "--accelerators", "4", "--batch", "0"]) == 2


def test_cli_writes_project(tmp_path):
    out = tmp_path / "p.json"
    argv = ["hypar", "--model", "vgg-a", "--accelerators", "16", "--batch", "128", "--project", "hypar-vgg-a",
            "--write-project", str(out)]
    assert main(argv) == 0
    data = json.loads(out.read_text())
    assert len(data["mapping"]["layer_parallelism"]) == 11

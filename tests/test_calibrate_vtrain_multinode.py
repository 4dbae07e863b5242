"""Structure of the vTrain multi-node table (benchmarks/calibrate_vtrain_multinode.py), not its accuracy.

What could silently break the check: a row mistyped while transcribing the 108 configuration files (its
parallel sizes not multiplying to its GPUs, a batch that does not split into micro-batches per replica, a
model whose dimensions differ between rows or from the SC'21 model it names), a row that no longer maps
onto a runnable project, or a what-if that does not do what it says. No timing value is asserted.
"""

from __future__ import annotations

import csv
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"
sys.path.insert(0, str(BENCH))
from calibrate_megatron import CSV as TABLE1  # noqa: E402
from calibrate_vtrain_multinode import (  # noqa: E402
    CONFIGS,
    Config,
    groups,
    mechanisms,
    nic_gbps_per_node,
    predict,
    project_for,
    with_nic_gbps_per_node,
)
from tilewright.engine.io.presets import load_model, load_system  # noqa: E402

# the SC'21 model each vTrain label names (the presets cite Narayanan et al. Table 1 and Brown et al.)
PRESET = {"3B": "gpt-3.6b", "18B": "gpt-18.4b", "39B": "gpt-39.1b", "175B": "gpt3-175b"}
NODE_GPUS = 8  # node_size of every file


def test_every_file_is_transcribed_once():
    assert len(CONFIGS) == 108  # config/validation/multi holds 108 files at f8dda847
    assert len({c.file for c in CONFIGS}) == len(CONFIGS)
    assert {c.model for c in CONFIGS} == set(PRESET)


@pytest.mark.parametrize("c", CONFIGS, ids=lambda c: c.file)
def test_row_is_a_valid_megatron_mapping(c: Config):
    assert c.tp * c.dp * c.pp == c.gpus
    assert c.gpus % NODE_GPUS == 0
    assert c.global_batch % (c.dp * c.micro_batch) == 0  # whole micro-batches per replica
    assert c.micro_batches * c.dp * c.micro_batch == c.global_batch
    assert c.layers % c.pp == 0 and c.heads % c.tp == 0 and c.hidden % c.heads == 0


@pytest.mark.parametrize("model", sorted(PRESET))
def test_model_dimensions_match_the_sc21_model(model: str):
    spec = load_model(PRESET[model])
    dims = {(c.layers, c.hidden, c.heads) for c in CONFIGS if c.model == model}
    assert dims == {(spec.layers, spec.hidden, spec.heads)}


def test_gpus_and_batch_match_table1_where_table1_has_the_model():
    """3.6B, 18.4B and 39.1B run at SC'21 Table 1's GPU counts and global batches (175B does not: 512 GPUs)."""
    with open(TABLE1) as fh:
        table1 = {float(r["params_billion"]): (int(r["gpus"]), int(r["global_batch"])) for r in csv.DictReader(fh)}
    for model, billions in (("3B", 3.6), ("18B", 18.4), ("39B", 39.1)):
        assert {(c.gpus, c.global_batch) for c in CONFIGS if c.model == model} == {table1[billions]}


def test_groups_partition_the_rows_fastest_first():
    preds = [predict(c) for c in CONFIGS if c.model == "3B" and c.pp == 1 and c.tp in (1, 16)]
    grouped = groups(preds)
    assert sum(len(v) for v in grouped.values()) == len(preds)
    for sel in grouped.values():
        assert [p.seconds for p in sel] == sorted(p.seconds for p in sel)


@pytest.mark.parametrize("file", ["config_val_39B_4_8_16_2.json", "config_val_3B_16_4_1_2.json"])
def test_rows_predict(file: str):
    """A deep pipeline at tp 4 and a tensor group spanning two nodes (tp 16) both run."""
    c = next(c for c in CONFIGS if c.file == file)
    p = predict(c)
    peak = load_system("dgx-a100").children[0].children[0].compute.peak_flops["fp16"]
    assert p.seconds > 0
    assert 0 < p.tflops_per_gpu * 1e12 < peak
    assert all(v >= 0 for v in p.shares.values())
    assert sum(p.shares.values()) == pytest.approx(1.0, abs=0.02)


def test_nic_what_if_sets_the_per_node_bandwidth_and_only_slows():
    hw = load_system("dgx-a100")
    per_node, gbps = nic_gbps_per_node(hw)
    assert per_node == NODE_GPUS
    # the preset: one 25 GB/s HDR link per GPU (its comment), so 8 × 200 Gb/s per node
    assert gbps == pytest.approx(NODE_GPUS * 25e9 * 8 / 1e9)
    assert nic_gbps_per_node(with_nic_gbps_per_node(hw, 800.0))[1] == pytest.approx(800.0)
    c = next(c for c in CONFIGS if c.file == "config_val_39B_8_32_2_2.json")  # dp 32 across nodes
    assert project_for(c, nic_gbps=800.0).hardware.interconnect.link_bandwidth_bytes_per_s == pytest.approx(12.5e9)
    assert predict(c, nic_gbps=800.0).seconds > predict(c).seconds


def test_mechanisms_of_a_pipelined_row_are_non_negative_shares():
    c = next(c for c in CONFIGS if c.file == "config_val_39B_2_16_16_2.json")
    got = mechanisms(c)
    assert set(got) == {"sync p2p", "gather", "tied AR", "last +", "grad acc"}
    assert all(0 <= v < 1 for v in got.values())
    assert got["last +"] > 0  # the last stage also runs the logits and the loss

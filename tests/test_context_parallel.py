"""Context parallelism (``mapping.cp``, ring attention): sequence split, K/V ring, memory and placement."""

from __future__ import annotations

import subprocess
import sys

import pytest
from tilewright.engine.io.presets import load_system
from tilewright.engine.ir import GPTSpec, Mapping, Project, RunSettings
from tilewright.engine.ir.ops import OpKind
from tilewright.engine.plan.context import ContextComm
from tilewright.engine.simulate import make_plan, simulate

SEQ, HIDDEN, HEADS = 8192, 2048, 16
SPEC = GPTSpec(name="gpt-long", layers=4, hidden=HIDDEN, heads=HEADS, seq_len=SEQ, vocab=51200)


FLASH = [["attention", "softmax", "attention_dropout"]]  # what ring attention's kernels are (``plan.context``)


def _project(cp: int, engine: str = "analytic", tp: int = 2, dp: int = 1, fusion: list | None = None) -> Project:
    mapping = Mapping(tp=tp, dp=dp, cp=cp, micro_batch=1, global_batch=4 * dp, fusion=fusion or [])
    return Project(
        name="cp",
        hardware=load_system("dgx-a100"),
        workload=SPEC,
        mapping=mapping,
        run=RunSettings(dtype="bf16", engine=engine, contention=False),
    )


@pytest.mark.parametrize("cp", [2, 4])
def test_each_rank_runs_its_share_of_the_sequence(cp):
    """Every token-proportional quantity divides by cp: FLOPs (attention too: each rank's queries against
    all keys) and stored activations; the weights do not. (Against cp 1 with the same fused attention kernels,
    which ring attention always runs.)"""
    one, split = make_plan(_project(1, fusion=FLASH)), make_plan(_project(cp))
    for kind in ("F", "B"):
        assert split.stages[0].passes[(0, kind)].flops == pytest.approx(one.stages[0].passes[(0, kind)].flops / cp)
    assert split.stages[0].act_bytes[0] == pytest.approx(one.stages[0].act_bytes[0] / cp)
    assert split.stages[0].params == one.stages[0].params
    assert split.project.mapping.devices == 2 * cp


def test_ring_moves_the_other_ranks_keys_and_values_unless_attention_hides_it():
    """cp 2: the forward sends one K/V block of s/2 tokens (2·(s/2)·h elements over tp ranks), the backward
    that block and its gradient. Exposed only past the attention's time beside each step; what it hides
    stays on the links (``Segment.hidden``)."""
    plan = make_plan(_project(2))
    attn = next(op for op in plan.workload.ops() if op.kind is OpKind.attention)
    block = 2 * (SEQ // 2) * HIDDEN * 2 / 2  # K and V of half the sequence, bf16, over tp 2, one sample
    slow = ContextComm(2, lambda kind, nbytes: nbytes / 1e9)
    assert slow.exchange(attn, 0.5, 2, 2, False, 0.0) == ([("cp:ring", pytest.approx(block))], ())
    shown, hidden = slow.exchange(attn, 0.5, 2, 2, True, 0.0)
    assert shown == [("cp:ring", pytest.approx(2 * block))] and hidden == ()
    shown, hidden = slow.exchange(attn, 0.5, 2, 2, False, 2 * block / 1e9 / 2)  # hides half of its one step
    assert shown[0][1] == pytest.approx(block / 2) and hidden[0][1] == pytest.approx(block / 2)
    assert slow.exchange(attn, 0.5, 2, 2, False, 1.0) == ([], (("cp:ring", pytest.approx(block)),))


def test_cp_ranks_sit_next_to_the_tensor_ranks():
    """Megatron's order tp, cp, dp: with tp·cp = 8 a ring stays inside one DGX node."""
    plan = make_plan(_project(4, dp=2))
    groups, cp = plan.stages[0].groups, 4
    for d in range(2):
        ring = [groups[d * cp + c][0] for c in range(cp)]
        assert len({plan.hw.devices[i].node.rsplit("/", 1)[0] for i in ring}) == 1


def test_longer_context_gets_faster_with_more_ranks_and_both_engines_agree():
    times = []
    for cp in (1, 2, 4):
        a, e = simulate(_project(cp, "analytic")), simulate(_project(cp, "event"))
        assert e.iteration_time_s == pytest.approx(a.iteration_time_s, rel=1e-9)
        times.append(a.iteration_time_s)
    assert times[0] > times[1] > times[2]
    assert simulate(_project(4)).peak_memory_bytes < simulate(_project(1)).peak_memory_bytes


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "tilewright.engine.cli",
            "run",
            "--system",
            "dgx-a100",
            "--model",
            "gpt",
            "--layers",
            "2",
            "--hidden",
            "512",
            "--heads",
            "8",
            "--global-batch",
            "4",
            "--engine",
            "analytic",
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_cli_cp_counts_devices_and_refuses_an_uneven_split():
    ok = _cli("--seq-len", "1024", "--cp", "4", "--devices", "8")
    assert ok.returncode == 0, ok.stderr
    assert "8 devices" in ok.stdout
    bad = _cli("--seq-len", "1000", "--cp", "3", "--devices", "3")
    assert bad.returncode == 2
    assert "mapping.cp" in bad.stderr and "Traceback" not in bad.stderr
    # cp divides 1002 but the load-balanced ring's 2 · cp chunks do not (Megatron-Core's get_batch_on_this_cp_rank)
    odd = _cli("--seq-len", "1002", "--cp", "2", "--devices", "2")
    assert odd.returncode == 2 and "2 × cp = 4 chunks" in odd.stderr and "Traceback" not in odd.stderr


def test_search_refuses_a_cp_whose_ring_chunks_do_not_divide_the_sequence():
    """cp 8 divides 1,000 tokens, but not into the ring's 2 · cp = 16 chunks: the search refuses it by name, as
    ``run`` does, instead of dropping it from the space without a word."""
    proc = subprocess.run(
        [sys.executable, "-m", "tilewright.engine.cli", "search", "--system", "dgx-h100", "--model", "gpt",
         "--layers", "2", "--hidden", "1024", "--heads", "8", "--ffn", "4096", "--seq-len", "1000", "--vocab",
         "32000", "--devices", "8", "--global-batch", "16", "--cp", "8", "--no-simulate"],
        capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 2, proc.stdout[-2000:]
    assert "--cp" in proc.stderr and "2 × cp = 16 chunks" in proc.stderr and "Traceback" not in proc.stderr

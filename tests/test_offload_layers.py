"""Activation offload as Megatron-Core and Transformer Engine run it (``plan.activation_offload``): the first
``mapping.offload_layers`` transformer layers of a model chunk (default all but the last) copy their stored
activations to the node's host memory; the last layer, the embedding and the head keep theirs on the device.
Megatron-Core refuses it with pipeline parallelism and for all of a chunk's layers (``plan.checks``).

Expected bytes derive by hand from Korthikanti et al. 2022 ("Reducing Activation Recomputation in Large
Transformer Models", §4): a transformer layer stores s·b·h·(34 + 5·a·s/h) bytes in 16-bit training without
recomputation at tp 1; the embedding's dropout mask (s·b·h), the final norm's and the output projection's inputs
(2·s·b·h each) and the cross-entropy's fp32 logits (4·s·b·v) add s·b·(5·h + 4·v). Times derive from the dgx-a100
preset's host link (25 GB/s per GPU, per direction)."""

from __future__ import annotations

import pytest
from tilewright.engine.cli import main
from tilewright.engine.engines.event.engine import EventEngine
from tilewright.engine.io.presets import load_system
from tilewright.engine.ir import GPTSpec, Mapping, Project, RunSettings
from tilewright.engine.plan.checks import check_project
from tilewright.engine.simulate import make_plan, simulate

from tests.agreement import assert_engines_agree

L, H, A, S, V = 4, 1024, 16, 1024, 32000
B = 2  # micro-batch
SPEC = GPTSpec(name="gpt-offload", layers=L, hidden=H, heads=A, seq_len=S, vocab=V)
HOST_LINK = 25e9  # dgx-a100 preset: pinned host<->device copies over each A100's PCIe 4.0 x16, per direction
LAYER = S * B * H * (34 + 5 * A * S / H)  # Korthikanti et al. 2022, eq. (1): one layer's stored bytes
EDGES = S * B * (5 * H + 4 * V)  # embedding dropout mask, final norm and output layer inputs, fp32 logits


def _project(levels: dict[str, str] | None = None, engine: str = "analytic", **mapping) -> Project:
    fields = {"tp": 1, "pp": 1, "dp": 8, "micro_batch": B, "global_batch": 32, "zero": 1} | mapping
    return Project(name="offload", hardware=load_system("dgx-a100"), workload=SPEC,
                   mapping=Mapping(memory_levels=levels or {}, **fields),
                   run=RunSettings(dtype="bf16", engine=engine, contention=False))


HOST = {"activations": "host"}


@pytest.mark.parametrize(("asked", "k"), [(None, L - 1), (1, 1), (0, 0)])
def test_the_first_k_transformer_layers_are_offloaded(asked, k):
    """Default: all L − 1 layers but the last (Transformer Engine asserts k ≤ model_layers − 1); the stage
    stores L layers plus the edges per micro-batch, of which k layers' go to the host."""
    st = make_plan(_project(HOST, offload_layers=asked)).stages[0]
    assert st.act_bytes[0] == pytest.approx(L * LAYER + EDGES, rel=1e-12)  # the derivation holds for this model
    assert st.offloaded_bytes[0] == pytest.approx(k * LAYER, rel=1e-12)


@pytest.mark.parametrize("engine", ["analytic", "event"])
def test_the_device_keeps_the_last_layer_and_the_edges_in_its_peak(engine):
    """At pp 1 one micro-batch is in flight: the host holds k layers' activations at most, and the GPU's peak
    drops by exactly those bytes against the same run without offload (its state and workspace unchanged),
    keeping the last layer's and the edges' activations."""
    plain, off = simulate(_project(engine=engine)), simulate(_project(HOST, engine))
    offloaded = (L - 1) * LAYER
    assert plain.peak_memory_bytes - off.peak_memory_bytes == pytest.approx(offloaded, rel=1e-9)
    assert off.metrics_json()["host_peak_memory_bytes"] == pytest.approx(offloaded, rel=1e-9)
    assert off.memory_breakdown_bytes["activations"] == pytest.approx(LAYER + EDGES, rel=1e-9)


def _layer(tp: int) -> float:
    """Korthikanti et al. 2022, eq. (2): one layer's stored bytes per rank with tensor parallelism t (no sequence
    parallelism): s·b·h·(10 + 24/t + 5·a·s/(h·t)) — the norms' inputs and the dropout masks after them are
    replicated, the rest split."""
    return S * B * H * (10 + 24 / tp + 5 * A * S / (H * tp))


@pytest.mark.parametrize("tp", [1, 2])
def test_each_pass_copies_only_the_offloaded_layers(tp):
    """Each forward copies k layers' stored activations out over the host link and each backward copies them
    back. At tp 2 the collectives split the passes into segments: only those holding the first k transformer
    layers' ops carry a copy (at tp 1 one segment holds the whole pass)."""
    k = 2
    st = make_plan(_project(HOST, tp=tp, dp=8 // tp, offload_layers=k)).stages[0]
    assert _layer(1) == LAYER
    for kind in ("F", "B"):
        segs = st.passes[(0, kind)].segments
        assert sum(s.offload_s for s in segs) == pytest.approx(k * _layer(tp) / HOST_LINK, rel=1e-9)
        if tp > 1:  # a segment is named by its first op's layer; blocks are layers 1…L, after the embedding (0)
            copying = {s.layer for s in segs if s.offload_s > 0}
            # forward: a segment may open in the embedding and run into block 1; backward: open in block 3 and
            # run into block 2's last ops. Never one that lies in the last block (4) or the head (5) alone.
            assert copying <= ({0, 1, 2} if kind == "F" else {1, 2, 3}) and {1, 2} <= copying


def test_fewer_offloaded_layers_copy_less_and_the_engines_agree():
    """Offloading one layer instead of three moves a third of the bytes: with these small kernels the copies
    bound the passes, so the iteration is shorter; both engines time it alike."""
    three, one = simulate(_project(HOST)), simulate(_project(HOST, offload_layers=1))
    assert one.iteration_time_s < three.iteration_time_s
    assert_engines_agree(one, EventEngine().run(make_plan(_project(HOST, "event", offload_layers=1))))


def test_the_plan_says_what_it_offloads():
    notes = simulate(_project(HOST)).metrics_json()["notes"]
    assert any(f"{L - 1} of {L} transformer layers" in n and "cpu_offloading_num_layers" in n for n in notes)


def test_megatron_core_refuses_offload_with_pipeline_parallelism():
    """TransformerConfig: 'Currently there is no support for Pipeline parallelism with CPU offloading'."""
    problems = check_project(_project(HOST, pp=2, dp=4))
    assert [p.path for p in problems] == ["mapping.memory_levels.activations"]
    assert "Pipeline parallelism" in problems[0].reason and "pp 2" in problems[0].reason
    assert check_project(_project({"optimizer": "host"}, pp=2, dp=4)) == []  # the optimizer's offload stays
    assert check_project(_project(HOST)) == []


def test_all_of_a_chunks_layers_are_refused():
    """TransformerConfig: 'CPU offloading can be done only for layers less than {num_layers}'."""
    assert check_project(_project(HOST, offload_layers=L - 1)) == []
    problems = check_project(_project(HOST, offload_layers=L))
    assert [p.path for p in problems] == ["mapping.offload_layers"]
    assert f"less than {L}" in problems[0].reason and f"at most {L - 1}" in problems[0].reason


def test_offload_layers_without_host_activations_is_idle():
    problems = check_project(_project({"optimizer": "host"}, offload_layers=2))
    assert [p.path for p in problems] == ["mapping.offload_layers"]
    assert check_project(_project({"activations": "auto"}, offload_layers=2)) == []  # auto may pick the host


def test_auto_keeps_a_pipelines_activations_on_the_device():
    """Megatron-Core refuses offload with pp > 1, so ``auto`` does not put a pipeline's activations in host memory
    even when they fit nowhere else (``plan.residency.stage_residency``)."""
    big = {"micro_batch": 256, "global_batch": 2048}  # ~157 GB of activations per micro-batch: past the 80 GB HBM
    alone = make_plan(_project({"activations": "auto"}, **big)).stages[0]
    assert alone.residency is not None and alone.residency.placed["activations"] == "host"  # pp 1: offloaded
    st = make_plan(_project({"activations": "auto"}, pp=2, dp=4, **big)).stages[0]
    assert st.residency is not None and st.residency.placed["activations"] == "dram"  # overflows the HBM instead
    assert not st.offload_layers and not st.offloaded_bytes


def test_a_default_mapping_saves_no_offload_layers():
    """The IR field is quiet at its default: old projects save back unchanged."""
    assert "offload_layers" not in Mapping().model_dump(mode="json")
    assert Mapping(offload_layers=3).model_dump(mode="json")["offload_layers"] == 3


def test_cli_refuses_offload_with_pipeline_parallelism(capsys: pytest.CaptureFixture[str]):
    code = main(["run", "--system", "dgx-a100", "--model", "gpt", "--layers", "4", "--hidden", "1024", "--heads",
                 "16", "--seq-len", "1024", "--tp", "1", "--pp", "2", "--dp", "1", "--global-batch", "4",
                 "--micro-batch", "1", "--engine", "analytic", "--set",
                 'mapping.memory_levels={"activations": "host"}'])
    assert code == 2
    err = capsys.readouterr().err
    assert "mapping.memory_levels.activations" in err and "Pipeline parallelism" in err


def test_cli_refuses_offloading_every_layer(capsys: pytest.CaptureFixture[str]):
    code = main(["run", "--system", "dgx-a100", "--model", "gpt", "--layers", "4", "--hidden", "1024", "--heads",
                 "16", "--seq-len", "1024", "--tp", "1", "--dp", "1", "--global-batch", "2", "--micro-batch", "1",
                 "--engine", "analytic", "--set", 'mapping.memory_levels={"activations": "host"}',
                 "--set", "mapping.offload_layers=4"])
    assert code == 2
    assert "mapping.offload_layers" in capsys.readouterr().err

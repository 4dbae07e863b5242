"""One Llama 3.1 70B decoder layer at batch 32 on a Wormhole Galaxy: the engine's op times beside tt-metal's
published per-op decode targets, so that whoever reads it sees which term is off.

Published: the targets ``models/demos/llama3_70b_galaxy/tests/test_decoder_device_perf.py::test_llama_TG_perf_device``
checks its traced decode against (``decoder_perf_targets_6u.json`` and ``_4u.json``, ``TARGETS_SOURCE``): per
device, the average over decoder layers 2-9 of a 10-layer model at batch 32, decoding at position 127 (128 keys),
in ``LlamaOptimizations.performance``, of each program's device kernel duration and its op-to-op gap (the time from
the previous program's end to its start), in ns. Sixteen programs per layer; a ``Matmul_RS`` is the FF1 and FF3
matmuls of one double-matmul program fused with FF1's reduce-scatter. A check of where the model stands, never a
fit: no preset constant is derived from these rows.

Ours: each op of one layer of the ``wormhole-galaxy-llama3-70b-inference`` decode step at 128 keys, costed alone
as the plan costs it (``op`` = its kernel and the runtime's further programs, ``Compute.programs_by_op``; ``CCL`` =
the tensor-parallel collective after it, ``Plan.tp_time``), twice: with the project's runtime (models/demos/
llama3_70b_galaxy: prefetched weights, its programs per op) and as tt-transformers runs it (``Config.tt_transformers``
of ``calibrate_tiled_llm``: the system's programs, DRAM-sharded weights). The published programs are grouped into
the model's terms (``TERMS``): a collective the runtime splits into a reduce-scatter and an all-gather around
other programs (QKV's reduce before the heads, FF1/FF3's before the SiLU mul) is compared with the all-reduce the
model runs.

Usage: python benchmarks/tiled_galaxy_ops.py (also printed by benchmarks/calibrate_tiled_llm.py)
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from tilewright.engine.ir.project import Project
from tilewright.engine.perf.op_cost import runtime_programs, runtime_programs_extra
from tilewright.engine.plan.inference_phases import decode_context, prefetch_stream_s, sampling_tile, step_formats
from tilewright.engine.plan.passes import forward_pass
from tilewright.engine.simulate import make_plan
from tilewright.engine.workloads.transformer_inference import inference_graph

TARGETS_SOURCE = (
    "tenstorrent/tt-metal models/demos/llama3_70b_galaxy/tests/decoder_perf_targets_6u.json and "
    "decoder_perf_targets_4u.json @02cd859b (loaded by tests/test_decoder_device_perf.py, load_perf_targets; "
    "'decoder' section: kernel_duration and op_to_op, ns, mid-layer averages)"
)
KEYS = 128  # the targets' start_pos 127: the step attends over 128 keys
BATCH = 32


@dataclass(frozen=True)
class Target:
    """One program of the published decoder layer: its op code in the profiler log, the test's name for it,
    and (kernel, op-to-op) in ns on a 6U and on a 4U Galaxy."""

    code: str
    name: str
    six_u: tuple[float, float]
    four_u: tuple[float, float]

    def us(self, galaxy: str) -> float:
        """Kernel plus op-to-op, µs."""
        k, o = self.six_u if galaxy == "6U" else self.four_u
        return (k + o) / 1e3


# In the order the layer runs them (llama_decoder.py, llama_attention.py, llama_mlp.py). @02cd859b.
TARGETS = (
    Target("RMSAllGather_0", "RMS_0", (16719.6, 770.5), (19188.9, 853.3)),
    Target("Matmul_0", "QKV_MM", (7082.5, 758.6), (7886.7, 889.2)),
    Target("LlamaReduceScatterCreateHeadsDeviceOperation_0", "LlamaReduceScatterCreateHeads", (8010.6, 867.9),
           (9728.6, 867.5)),
    Target("RotaryEmbeddingLlamaFusedQK_0", "RotaryEmbeddingLlamaFusedQK", (2234.2, 726.8), (2492.6, 874.0)),
    Target("PagedUpdateCacheDeviceOperation_0", "PagedUpdateCache", (4451.9, 737.1), (5097.3, 853.3)),
    Target("ScaledDotProductAttentionDecode_0", "SDPA", (9183.5, 625.3), (10201.1, 679.4)),
    Target("AllGatherConcat_0", "AllGatherConcat", (8411.8, 770.5), (10079.0, 723.1)),
    Target("Matmul_1", "DO_MM", (7701.1, 598.9), (8588.2, 672.5)),
    Target("AllReduceAsync_0", "AllReduceAsync_DO", (13299.6, 706.1), (19107.1, 727.9)),
    Target("RMSAllGather_1", "RMS_1", (16346.5, 740.5), (18838.1, 828.7)),
    Target("Matmul_RS_0", "Matmul_FF3_ReduceScatter_FF1", (17497.7, 723.4), (20958.1, 768.6)),
    Target("LlamaReduceScatterDeviceOperation_0", "ReduceScatter_FF3", (7218.6, 698.4), (9457.0, 911.3)),
    Target("BinaryDeviceOperation_0", "Binary_Mult_Silu", (2374.4, 717.1), (2905.4, 768.3)),
    Target("AllGatherAsync_0", "AllGatherAsync_Binary_Mult", (7083.9, 820.4), (9380.9, 906.3)),
    Target("Matmul_2", "FF2_MM", (13973.2, 652.2), (14981.6, 726.9)),
    Target("AllReduceAsync_1", "AllReduceAsync_FF2", (13440.6, 728.6), (18900.4, 679.9)),
)


@dataclass(frozen=True)
class Term:
    """A term of the layer: the published programs that do it and the model's ops (their kernels and
    programs) and collectives (``ccl``: the ops whose collective it is)."""

    label: str
    targets: tuple[str, ...]  # Target.name
    ops: tuple[str, ...] = ()
    ccl: tuple[str, ...] = ()
    note: str = ""


TERMS = (
    Term("norms (+ residual adds)", ("RMS_0", "RMS_1"), ("norm1", "norm2", "residual1", "residual2"),
         note="the published norm takes the residual and all-gathers its statistics"),
    Term("QKV matmul", ("QKV_MM",), ("qkv",)),
    Term("attention: rotary, cache update, SDPA", ("RotaryEmbeddingLlamaFusedQK", "PagedUpdateCache", "SDPA"),
         ("attention", "softmax")),
    Term("dense out (WO) matmul", ("DO_MM",), ("out_proj",)),
    Term("FF1 + FF3 matmuls", ("Matmul_FF3_ReduceScatter_FF1",), ("mlp_up", "mlp_gate"),
         note="published: one program, FF1's reduce-scatter fused in"),
    Term("SiLU mul", ("Binary_Mult_Silu",), ("activation",)),
    Term("FF2 matmul", ("FF2_MM",), ("mlp_down",)),
    Term("CCL on the 4-chip axis (QKV, FF1, FF3)",
         ("LlamaReduceScatterCreateHeads", "AllGatherConcat", "ReduceScatter_FF3", "AllGatherAsync_Binary_Mult"),
         ccl=("qkv", "mlp_up", "mlp_gate"), note="published: reduce-scatter + all-gather; FF1's RS inside Matmul_RS"),
    Term("CCL on the 8-chip axis (WO, FF2)", ("AllReduceAsync_DO", "AllReduceAsync_FF2"),
         ccl=("out_proj", "mlp_down")),
)


@dataclass(frozen=True)
class OpRow:
    """One model op of the layer: its time (kernel and further programs), the further programs' part, the
    programs it counts, its collective, and how the grid ran it."""

    name: str
    op_s: float
    extra_s: float
    programs: int
    ccl_s: float
    ccl: str
    split: str


def layer_rows(project: Project, keys: int = KEYS, batch: int = BATCH) -> tuple[list[OpRow], float]:
    """The ops of one decoder layer of ``project``'s decode step (``batch`` sequences over ``keys`` keys),
    each costed alone as ``forward_pass`` costs it in the step, and the layer's prefetch stream (s; 0 without
    a prefetcher)."""
    inf = project.run.inference.model_copy(update={"batch": batch})
    plan = make_plan(project.model_copy(update={"run": project.run.model_copy(update={"inference": inf})}))
    dev = plan.stages[0].dev
    graph = inference_graph(project.workload, 1, keys, batch, True, sampling_tile(dev.compute))
    ctx = decode_context(plan, 0, batch)
    layer = graph.block_layers[len(graph.block_layers) // 2]
    ops = graph.layer_ops(layer)
    rows = []
    for op in ops:
        ps = forward_pass([[op]], ctx)
        busy = sum(s.busy_s for s in ps.segments)
        comms = [s.comm for s in ps.segments if s.comm]
        ccl = sum(plan.tp_time(0, 0, kind, nbytes) for kind, nbytes in comms)
        rows.append(OpRow(op.name.split(".", 1)[-1], busy, max(0.0, runtime_programs_extra(op, dev.compute)),
                          runtime_programs(op, dev.compute), ccl, ", ".join(k for k, _ in comms),
                          "; ".join(str(d).split(": ", 1)[-1] for d in ps.dataflows)))
    return rows, prefetch_stream_s(plan, 0, ops, batch, step_formats(plan))


def term_us(term: Term, rows: list[OpRow]) -> float:
    """The model's time of a term, µs: its ops' times and its collectives."""
    by = {r.name: r for r in rows}
    return 1e6 * (sum(by[o].op_s for o in term.ops if o in by) + sum(by[o].ccl_s for o in term.ccl if o in by))


def published_us(term: Term, galaxy: str) -> float:
    by = {t.name: t for t in TARGETS}
    return sum(by[n].us(galaxy) for n in term.targets)


def projects() -> list[tuple[str, Project]]:
    """The Galaxy project as its preset runs it (llama3_70b_galaxy) and as tt-transformers does."""
    from calibrate_tiled_llm import CONFIGS, configured  # the same configurations as the decode table

    galaxy = [c for c in CONFIGS if c.project.startswith("wormhole-galaxy") and c.batch == BATCH][0]
    tt = [c for c in CONFIGS if c.project.startswith("wormhole-galaxy") and c.tt_transformers][0]
    return [("llama3_70b_galaxy runtime (the preset)", configured(galaxy)),
            ("tt-transformers runtime", configured(tt, batch=BATCH))]


def report() -> None:
    """Print the published programs, each variant's ops, and the terms side by side."""
    print(f"Published decode programs of one Llama 3.1 70B layer on a Wormhole Galaxy, batch {BATCH}, {KEYS} keys")
    print("(kernel + op-to-op, us):")
    for t in TARGETS:
        print(f"  {t.name:30s} 6U {t.six_u[0] / 1e3:6.2f} + {t.six_u[1] / 1e3:4.2f}   4U {t.four_u[0] / 1e3:6.2f} + "
              f"{t.four_u[1] / 1e3:4.2f}   [{t.code}]")
    print(f"  layer: 6U {sum(t.us('6U') for t in TARGETS):.1f} us, 4U {sum(t.us('4U') for t in TARGETS):.1f} us; "
          f"source: {TARGETS_SOURCE}")
    variants = [(label, *layer_rows(p)) for label, p in projects()]
    for label, rows, stream in variants:
        print(f"\nModel ops, {label} (op = kernel + further programs; us):")
        for r in rows:
            ccl = f"  CCL {r.ccl_s * 1e6:6.2f} ({r.ccl})" if r.ccl else ""
            print(f"  {r.name:12s} op {r.op_s * 1e6:6.2f} (programs {r.programs}, further {r.extra_s * 1e6:5.2f})"
                  f"{ccl}  {r.split}")
        total = sum(r.op_s + r.ccl_s for r in rows)
        extra = f"; weights' prefetch stream {stream * 1e6:.1f} us (a floor on the layer)" if stream else ""
        print(f"  layer {total * 1e6:.1f} us{extra}")
    print(f"\n{'term':42s} {'6U':>7s} {'4U':>7s}" + "".join(f" {label.split(' runtime')[0]:>18s}"
                                                          for label, _, _ in variants) + "  (us)")
    for term in TERMS:
        cells = "".join(f" {term_us(term, rows):18.1f}" for _, rows, _ in variants)
        note = f"  {term.note}" if term.note else ""
        print(f"{term.label:42s} {published_us(term, '6U'):7.1f} {published_us(term, '4U'):7.1f}{cells}{note}")
    tot = "".join(f" {sum(r.op_s + r.ccl_s for r in rows) * 1e6:18.1f}" for _, rows, _ in variants)
    print(f"{'layer':42s} {sum(t.us('6U') for t in TARGETS):7.1f} {sum(t.us('4U') for t in TARGETS):7.1f}{tot}")


def main() -> None:
    argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args()
    report()


if __name__ == "__main__":
    main()

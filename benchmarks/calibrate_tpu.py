"""Google TPU v4: what the engine predicts for one chip's GEMMs, LLM serving on a slice and training on a cube.

Predictions only, with the physics terms that make them, so that whoever holds measurements can see which term
is off. No measured TPU figure is printed or fitted here: the preset (``presets/systems/tpu-v4-torus.json``)
is built from component facts alone (peak, MXU shape, vector unit, HBM, ICI rate and hop latency), and the
published end-to-end results (PaLM's MFU, Pope et al.'s serving latencies) are held-out checks.

1. GEMM sweep on one chip (bf16, weights K × N, activations M × K from HBM): the MXU padding of M to 8 and of N
   and K to 128 (``gemm_granule``), the systolic fill (``efficiency``), the HBM roofline, and the achieved
   TFLOP/s of the useful work.
2. LLM decode and prefill on slices: Llama-2 7B on a v4-8 (2 × 2 × 1, 4 chips) and Llama-2 70B on a 2 × 2 × 4
   slice (16 chips), tensor parallel over every chip. Slices smaller than a cube have no wrap-around links
   (the optical switches close the torus only on whole cubes; "How to Scale Your Model", TPU networking), so
   they are meshes. The decode-step breakdown is ``calibrate_tiled_llm``'s: HBM floor, ops, compute, CCL.
3. A training step on one 4 × 4 × 4 cube (torus): the ``tpu-v4-llama2-7b`` project and a GPT (Megatron's
   7.5 B shape) at tensor parallel 8 × data parallel 8, with the step's time split by kind.

Usage: python benchmarks/calibrate_tpu.py
"""

from __future__ import annotations

import argparse
import math
import sys
from dataclasses import dataclass
from pathlib import Path

from tilewright.engine.io.presets import load_model, load_project_preset, load_system
from tilewright.engine.ir import DType
from tilewright.engine.ir.hardware import Component
from tilewright.engine.ir.ops import Op, OpKind, TensorSplit
from tilewright.engine.ir.project import Project
from tilewright.engine.perf.device import DeviceModel, device_model
from tilewright.engine.perf.op_cost import op_time
from tilewright.engine.simulate import simulate

sys.path.insert(0, str(Path(__file__).resolve().parent))
from calibrate_tiled_llm import decode_breakdown, seconds  # noqa: E402  (one breakdown for every machine)

SYSTEM = "tpu-v4-torus"
BF16 = 2.0

# (M, N, K): square GEMMs, shapes that pad (not multiples of 128 or 8), and decode/prefill projections of Llama-2 7B
GEMMS = (
    (8192, 8192, 8192),
    (4096, 4096, 4096),
    (2048, 2048, 2048),
    (1024, 1024, 1024),
    (512, 512, 512),
    (256, 256, 256),
    (128, 128, 128),
    (1000, 1000, 1000),
    (4096, 4096, 4097),
    (4096, 4100, 4096),
    (2048, 11008, 4096),
    (1, 4096, 4096),
    (8, 12288, 4096),
    (9, 12288, 4096),
    (64, 11008, 4096),
    (512, 11008, 4096),
)


def chip(system: Component | None = None) -> DeviceModel:
    """The TPU v4 chip of the preset as the cost model sees it (bf16)."""
    system = system or load_system(SYSTEM)
    c = next(c for _, c in system.walk() if c.compute is not None)
    return device_model(c.compute, c.memories, None, DType.bf16)


def gemm_op(m: int, n: int, k: int) -> Op:
    """A linear layer y = x·W with W of K × N: the op a model's projection is, on one chip (no sharding)."""
    return Op(name="gemm", kind=OpKind.matmul, layer=0, flops=2.0 * m * n * k, params=float(n * k),
              gemm=(m, n, k), in_elems=float(m * k), out_elems=float(m * n), split=TensorSplit.none)


def gemm_sweep() -> None:
    dev = chip()
    peak = dev.matmul_peak(None, True)
    cols = ("M × N × K", "pad eff", "compute", "fill", "HBM", "time", "TFLOP/s", "% peak", "bound")
    widths = (22, 8, 10, 9, 10, 10, 8, 7, 7)
    _header(cols, widths)
    for m, n, k in GEMMS:
        op = gemm_op(m, n, k)
        t = op_time(op, dev, 1, 1, False, False, BF16)  # overhead_s: the fill (TPU v4 has no fixed per-op cost)
        achieved = t.flops / t.busy_s
        cells = (f"{m} × {n} × {k}", f"{dev.compute.shape_efficiency(m, n, k):.3f}", seconds(t.compute_s),
                 seconds(t.overhead_s), seconds(t.memory_s), seconds(t.busy_s), f"{achieved / 1e12:.1f}",
                 f"{100 * achieved / peak:.1f}", "MXU" if t.compute_s >= t.memory_s else "HBM")
        _row(cells, widths)
    print("\npad eff: useful / padded MXU work (M to 8, N and K to 128, 8×128×128 blocks in waves over 8 MXUs);")
    print("compute: padded FLOPs at peak; fill: the systolic bubble (0.37 µs); HBM: operands and result at")
    print("0.9 × 1.2 TB/s; time = max(compute, HBM) + fill. TFLOP/s counts the useful 2·M·N·K.")


@dataclass(frozen=True)
class Serving:
    model: str
    dims: tuple[int, int, int]  # slice shape (chips per axis)
    batch: int
    prompt: int
    output: int


SERVING = (
    Serving("llama2-7b", (2, 2, 1), 1, 128, 128),
    Serving("llama2-7b", (2, 2, 1), 1, 2048, 128),
    Serving("llama2-7b", (2, 2, 1), 16, 512, 128),
    Serving("llama2-7b", (2, 2, 1), 64, 512, 128),
    Serving("llama2-70b", (2, 2, 4), 1, 128, 128),
    Serving("llama2-70b", (2, 2, 4), 1, 2048, 128),
    Serving("llama2-70b", (2, 2, 4), 32, 512, 128),
)


def slice_of(dims: tuple[int, int, int]) -> Component:
    """The preset's chip on an a × b × c slice: a torus on whole cubes (every axis a multiple of 4), else a mesh."""
    d = load_system(SYSTEM).model_dump(mode="json")
    d["name"] = f"tpu-v4-{'x'.join(map(str, dims))}"
    d["children"][0]["cols"] = math.prod(dims)
    d["interconnect"]["dims"] = list(dims)
    d["interconnect"]["topology"] = "torus" if all(x % 4 == 0 for x in dims) else "mesh"
    return Component.model_validate(d)


def serving_project(s: Serving) -> Project:
    base = load_project_preset("tpu-v4-llama2-7b").model_dump(mode="json")
    chips = math.prod(s.dims)
    base["name"] = f"tpu-v4-{s.model}-serving"
    base["hardware"] = slice_of(s.dims).model_dump(mode="json")
    base["workload"] = load_model(s.model).model_dump(mode="json")
    base["mapping"].update(tp=chips, dp=1, pp=1, micro_batch=1, global_batch=1, zero=0, recompute="none")
    base["run"].update(mode="infer", inference={"batch": s.batch, "prompt_tokens": s.prompt, "output_tokens": s.output})
    return Project.model_validate(base)


def serving() -> None:
    cols = ("model on slice", "batch", "in/out", "TTFT", "TPOT", "t/s/u", "HBM floor", "ops", "compute", "CCL")
    widths = (26, 5, 9, 9, 9, 7, 10, 9, 9, 9)
    _header(cols, widths)
    for s in SERVING:
        p = serving_project(s)
        r = simulate(p, series=False)
        b = decode_breakdown(p)
        tpot = r.tpot_s or math.nan
        cells = (f"{s.model} {'x'.join(map(str, s.dims))}", str(s.batch), f"{s.prompt}/{s.output}", seconds(r.ttft_s),
                 seconds(tpot), f"{1 / tpot:.1f}", seconds(b.floor_s), seconds(b.ops_s), seconds(b.compute_s),
                 seconds(b.ccl_s))
        _row(cells, widths)
    print("\ntensor parallel over every chip of the slice; decode step at the middle of the generation, per chip:")
    print("HBM floor = bytes / 1.2 TB/s; ops = Σ op times (HBM at 0.9 × peak, MXU, fill); CCL = the two all-reduces")
    print("per layer over ICI (45 GB/s per link and direction, 1 µs per hop).")


def training_projects() -> list[Project]:
    llama = load_project_preset("tpu-v4-llama2-7b")
    gpt = llama.model_dump(mode="json")
    gpt["name"] = "tpu-v4-gpt-7.5b"
    gpt["workload"] = load_model("gpt-7.5b").model_dump(mode="json")
    gpt["mapping"].update(tp=8, dp=8, global_batch=128, micro_batch=1, recompute="full")
    return [llama, Project.model_validate(gpt)]


def training() -> None:
    cols = ("project", "tp×dp", "batch", "step", "MFU", "breakdown (per device, s)")
    widths = (22, 6, 6, 9, 6, 0)
    _header(cols, widths)
    for p in training_projects():
        r = simulate(p, series=False)
        mfu = r.model_flops_per_iteration / (r.iteration_time_s * r.devices * r.peak_flops_per_device)
        parts = ", ".join(f"{k} {v:.3g}" for k, v in sorted(r.time_breakdown_s.items(), key=lambda kv: -kv[1]) if v > 0)
        cells = (p.name, f"{p.mapping.tp}×{p.mapping.dp}", str(p.mapping.global_batch), seconds(r.iteration_time_s),
                 f"{100 * mfu:.1f}%", parts)
        _row(cells, widths)
    print("\none 4 × 4 × 4 cube (64 chips, 3-D torus with the optical wrap-around); MFU = model FLOPs / (step × peak).")


def _header(cols: tuple[str, ...], widths: tuple[int, ...]) -> None:
    line = " ".join(f"{c:>{w}s}" if i else f"{c:{w}s}" for i, (c, w) in enumerate(zip(cols, widths, strict=True)))
    print(line)
    print("-" * len(line))


def _row(cells: tuple[str, ...], widths: tuple[int, ...]) -> None:
    print(" ".join(f"{x:>{w}s}" if i else f"{x:{w}s}" for i, (x, w) in enumerate(zip(cells, widths, strict=True))))


def main() -> None:
    argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args()
    print("== GEMMs on one TPU v4 chip (bf16) ==")
    gemm_sweep()
    print("\n== LLM serving on TPU v4 slices ==")
    serving()
    print("\n== Training step on a 4 × 4 × 4 cube ==")
    training()


if __name__ == "__main__":
    main()

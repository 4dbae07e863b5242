"""What a run will cost, estimated from the IR alone — before the workload graph is built or the hardware
elaborated — so that a 4 KB file asking for 10⁹ devices or 10⁷ layers is refused in milliseconds with its
numbers, instead of exhausting memory or hanging.

The estimate counts what the engines' work and memory grow with: devices (graph nodes and links),
layers (the operator graph), and pipeline steps (every pass of every micro-batch through every stage, or
every prefill/decode step of an inference request — the event engine spends a few events per step). The
limits sit far above every preset (the 1 T-parameter, 3,072-GPU run has ~2·10⁴ steps) and well below
what a 2-core, 24 GiB machine finishes in a minute; ``allow_large`` lifts them for those who mean it.
"""

from __future__ import annotations

from dataclasses import dataclass

from tilewright.engine.errors import InputError, Problem
from tilewright.engine.ir.common import PrefillOrder
from tilewright.engine.ir.project import Mode, Project
from tilewright.engine.ir.workload import CNNSpec, CustomSpec, MLPSpec, TransformerDims

MAX_DEVICES = 262_144  # elaboration builds a node per device and a few links each
# each memory port is two nodes, a channel and a link per attached device (~4 KiB; a wafer's 800 k ports
# from ports_per_edge 20,000 took 3.1 GiB and 27 s); the largest preset has a few hundred
MAX_MEMORY_PORTS = 65_536
MAX_LAYERS = 100_000  # the operator graph holds ~10 ops per layer
MAX_STEPS = 2_000_000  # training pipeline steps: ~25 µs each aggregated (1 T run: 98 k steps in 2.4 s)
MAX_INFERENCE_STEPS = 200_000  # prefill/decode steps: ~0.2 ms each (a decode pass is rebuilt per context)
# each step's pass is costed, mixed and walked for energy layer by layer: ~60 µs per layer-step (a 2,000-layer
# model decoding 128 tokens on a Galaxy's 32 chips took 31 s, 8,000 layers 62 s); the largest preset has ~10⁴
MAX_INFERENCE_LAYER_STEPS = 400_000
# One-at-a-time prefill (``PrefillOrder.sequential``) plans and simulates a pass per sequence: every layer
# of every sequence is its own events (~3 KiB and ~30 µs each on the event engine: batch 4,000 of an
# 80-layer model took 0.97 GiB and 9 s, batch 32,000 6.9 GiB and 70 s)
MAX_SEQUENTIAL_PREFILL = 500_000  # sequences x layers
MAX_LAYER_WIDTH = 1 << 22  # hidden/ffn/vocab: a 4 M-wide layer is past any model and overflows the op graph
OVERRIDE = "--allow-large"


@dataclass(frozen=True)
class Estimate:
    devices: int
    layers: int
    steps: int
    inference: bool = False
    sequential_prefill: int = 0  # sequences x layers prefilled one sequence at a time
    memory_ports: int = 0

    def problems(self) -> list[Problem]:
        out = []
        if self.devices > MAX_DEVICES:
            out.append(Problem("hardware", f"{self.devices:,} devices to elaborate (limit {MAX_DEVICES:,})"))
        if self.memory_ports > MAX_MEMORY_PORTS:
            out.append(Problem("hardware", f"{self.memory_ports:,} memory ports to elaborate (limit "
                                           f"{MAX_MEMORY_PORTS:,}; see memories' ports_per_edge)"))
        if self.layers > MAX_LAYERS:
            out.append(Problem("workload", f"{self.layers:,} layers (limit {MAX_LAYERS:,})"))
        limit = MAX_INFERENCE_STEPS if self.inference else MAX_STEPS
        if self.steps > limit:
            out.append(Problem("mapping", f"{self.steps:,} pipeline steps to simulate (limit {limit:,})"))
        elif self.inference and self.steps * self.layers > MAX_INFERENCE_LAYER_STEPS:
            out.append(Problem("run.inference.output_tokens", f"{self.steps:,} prefill/decode steps × {self.layers:,} "
                               f"layers = {self.steps * self.layers:,} layer-steps to cost (limit "
                               f"{MAX_INFERENCE_LAYER_STEPS:,}); fewer output tokens or layers"))
        if self.sequential_prefill > MAX_SEQUENTIAL_PREFILL:
            out.append(Problem("run.inference.batch", f"{self.sequential_prefill:,} sequence-layers prefilled one "
                               f"sequence at a time (limit {MAX_SEQUENTIAL_PREFILL:,}); a batched prefill "
                               "(run.inference.prefill) is far cheaper"))
        return out


def layer_count(spec: object) -> int:
    """Layers of a workload spec, without building its operator graph."""
    if isinstance(spec, TransformerDims):
        return spec.layers
    if isinstance(spec, MLPSpec):
        return len(spec.layer_sizes)
    if isinstance(spec, CustomSpec):
        return len(spec.layer_names)
    if isinstance(spec, CNNSpec):
        return 60  # the deepest published architecture we build (ResNet-50: 53 weight layers)
    return 1


def estimate(project: Project) -> Estimate:
    """Devices, layers and pipeline steps of ``project``, from its IR only."""
    m = project.mapping
    hw = project.hardware
    devices = max(hw.device_count(), m.devices) if _growable(hw) else hw.device_count()
    layers = layer_count(project.workload)
    ports = memory_ports(hw) * -(-devices // max(hw.device_count(), 1))  # a grown system repeats its parts
    if project.run.mode is Mode.infer:
        inf = project.run.inference
        micro_batches = m.pp if m.pp > 1 and inf.batch % m.pp == 0 else 1
        steps = m.pp * micro_batches * (1 + inf.output_tokens)
        per_micro_batch = inf.batch // micro_batches
        sequential = (inf.prefill or _runtime_prefill(hw)) == PrefillOrder.sequential and per_micro_batch > 1
        return Estimate(devices=devices, layers=layers, steps=steps, inference=True,
                        sequential_prefill=inf.batch * layers if sequential else 0, memory_ports=ports)
    steps = m.pp * m.interleave * max(m.micro_batches, 1) * 3
    if not project.run.aggregate:
        steps *= m.tp * m.dp * m.cp
    return Estimate(devices=devices, layers=layers, steps=steps, memory_ports=ports)


def memory_ports(component, instances: int = 1) -> int:
    """Ports of ported memories that elaboration builds: ``ports_per_edge`` on each listed edge, column or
    row, one per listed cell, in every instance of the owning component."""
    here = instances * component.count
    own = 0
    for m in component.memories:
        lines = len(m.attach)
        cells = 0
        if m.placement is not None:
            lines += len(m.placement.columns) + len(m.placement.rows)
            cells = len(m.placement.cells)
        own += lines * m.ports_per_edge + cells
    return here * own + sum(memory_ports(c, here) for c in component.children)


def _runtime_prefill(component) -> PrefillOrder:
    """The prefill order of the devices' runtime (``compute.runtime_prefill``): sequential when any computing
    component says so (the estimate errs towards the larger cost)."""
    if component.compute is not None and component.compute.runtime_prefill == PrefillOrder.sequential:
        return PrefillOrder.sequential
    if any(_runtime_prefill(c) == PrefillOrder.sequential for c in component.children):
        return PrefillOrder.sequential
    return PrefillOrder.batched


def _growable(component) -> bool:
    return component.growable or any(_growable(c) for c in component.children)


def check_widths(spec: object, source: str) -> None:
    """Widths past any model are refused always (they overflow, they are not just slow)."""
    if isinstance(spec, TransformerDims):
        for field in ("hidden", "ffn", "vocab", "seq_len"):
            value = getattr(spec, field)
            if value is not None and value > MAX_LAYER_WIDTH:
                raise InputError(source, Problem(f"workload.{field}", f"{value:,} is past any model (limit "
                                                 f"{MAX_LAYER_WIDTH:,})"))


def check_search_budget(project: Project, devices: int, source: str, *, command: str,
                        allow_large: bool = False) -> None:
    """Refuse a mapping search (``search``, ``import-hf --system``) over more devices or layers than a run
    may have: every candidate it times walks the devices' rings and the model's layers, so 10⁹ devices or
    10⁷ layers never finish. ``allow_large`` lifts the limits, not the width check."""
    check_widths(project.workload, source)
    problems = []
    if devices > MAX_DEVICES:
        problems.append(Problem("--devices", f"{devices:,} devices to search over (limit {MAX_DEVICES:,})"))
    layers = layer_count(project.workload)
    if layers > MAX_LAYERS:
        problems.append(Problem("workload", f"{layers:,} layers (limit {MAX_LAYERS:,})"))
    if problems and not allow_large:
        problems.append(Problem("", f"past the size limits; `tilewright {command} {OVERRIDE}` searches anyway"))
        raise InputError(source, problems)


def check_budget(project: Project, source: str, *, allow_large: bool = False) -> Estimate:
    """Raise ``InputError`` naming ``source`` and the estimate when the run is past the limits (unless
    ``allow_large``); widths past any model are refused always (they overflow, they are not just slow)."""
    check_widths(project.workload, source)
    est = estimate(project)
    problems = est.problems()
    if problems and not allow_large:
        problems.append(Problem("", f"past the size limits; `tilewright run {OVERRIDE}` simulates it anyway"))
        raise InputError(source, problems)
    return est

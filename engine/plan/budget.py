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
from tilewright.engine.ir.project import Mode, Project
from tilewright.engine.ir.workload import CNNSpec, CustomSpec, MLPSpec, TransformerDims

MAX_DEVICES = 262_144  # elaboration builds a node per device and a few links each
MAX_LAYERS = 100_000  # the operator graph holds ~10 ops per layer
MAX_STEPS = 2_000_000  # training pipeline steps: ~25 µs each aggregated (1 T run: 98 k steps in 2.4 s)
MAX_INFERENCE_STEPS = 200_000  # prefill/decode steps: ~0.2 ms each (a decode pass is rebuilt per context)
MAX_LAYER_WIDTH = 1 << 22  # hidden/ffn/vocab: a 4 M-wide layer is past any model and overflows the op graph
OVERRIDE = "--allow-large"


@dataclass(frozen=True)
class Estimate:
    devices: int
    layers: int
    steps: int
    inference: bool = False

    def problems(self) -> list[Problem]:
        out = []
        if self.devices > MAX_DEVICES:
            out.append(Problem("hardware", f"{self.devices:,} devices to elaborate (limit {MAX_DEVICES:,})"))
        if self.layers > MAX_LAYERS:
            out.append(Problem("workload", f"{self.layers:,} layers (limit {MAX_LAYERS:,})"))
        limit = MAX_INFERENCE_STEPS if self.inference else MAX_STEPS
        if self.steps > limit:
            out.append(Problem("mapping", f"{self.steps:,} pipeline steps to simulate (limit {limit:,})"))
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
    if project.run.mode is Mode.infer:
        inf = project.run.inference
        micro_batches = m.pp if m.pp > 1 and inf.batch % m.pp == 0 else 1
        steps = m.pp * micro_batches * (1 + inf.output_tokens)
        return Estimate(devices=devices, layers=layers, steps=steps, inference=True)
    steps = m.pp * m.interleave * max(m.micro_batches, 1) * 3
    if not project.run.aggregate:
        steps *= m.tp * m.dp * m.cp
    return Estimate(devices=devices, layers=layers, steps=steps)


def _growable(component) -> bool:
    return component.growable or any(_growable(c) for c in component.children)


def check_budget(project: Project, source: str, *, allow_large: bool = False) -> Estimate:
    """Raise ``InputError`` naming ``source`` and the estimate when the run is past the limits (unless
    ``allow_large``); widths past any model are refused always (they overflow, they are not just slow)."""
    spec = project.workload
    if isinstance(spec, TransformerDims):
        for field in ("hidden", "ffn", "vocab", "seq_len"):
            value = getattr(spec, field)
            if value is not None and value > MAX_LAYER_WIDTH:
                raise InputError(source, Problem(f"workload.{field}", f"{value:,} is past any model (limit "
                                                 f"{MAX_LAYER_WIDTH:,})"))
    est = estimate(project)
    problems = est.problems()
    if problems and not allow_large:
        problems.append(Problem("", f"past the size limits; `tilewright run {OVERRIDE}` simulates it anyway"))
        raise InputError(source, problems)
    return est

"""A project: hardware + workload + mapping + run settings + canvas layout, versioned."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated

from pydantic import Field, field_validator
from tilewright.engine.ir.common import DType, PrefillOrder, QuietDefaultsModel, StrictModel
from tilewright.engine.ir.hardware import Component
from tilewright.engine.ir.mapping import Mapping
from tilewright.engine.ir.workload import WorkloadSpec

SCHEMA_VERSION = 1


class Mode(StrEnum):
    train = "train"
    infer = "infer"


class EngineKind(StrEnum):
    event = "event"
    analytic = "analytic"


class Optimizer(StrEnum):
    adam = "adam"
    sgd = "sgd"


class AttentionKind(StrEnum):
    """How inference computes attention. ``fused``: one flash-style kernel — causal FLOPs in the prefill
    (each token attends to the tokens before it), the scores stay on chip, the KV cache is read once per
    decode step. ``materialised``: separate QKᵀ, softmax and AV — full s² FLOPs, the score tensor stored
    and moved through memory (what the engine did before fused attention)."""

    fused = "fused"
    materialised = "materialised"


class InferenceSettings(QuietDefaultsModel):
    """One batch of requests served together (every sequence arrives at time 0). The KV cache's format is
    ``mapping.formats.kv_cache`` (default: the activations' format)."""

    _quiet = ("attention", "kv_block_tokens", "prefill")

    prompt_tokens: Annotated[int, Field(ge=1)] = 512
    output_tokens: Annotated[int, Field(ge=1)] = 128
    batch: Annotated[int, Field(ge=1)] = 1
    attention: AttentionKind = Field(AttentionKind.fused, description="fused (flash-style, causal) or materialised")
    kv_block_tokens: Annotated[int, Field(ge=1)] = Field(
        16, description="tokens per KV-cache page (vLLM's block size): each sequence's cache is whole pages"
    )
    prefill: PrefillOrder | None = Field(
        None, description="batched or sequential prefill; default: the device's runtime (compute.runtime_prefill)"
    )


class RunSettings(StrictModel):
    mode: Mode = Mode.train
    dtype: DType = DType.bf16
    engine: EngineKind = EngineKind.event
    aggregate: bool = Field(True, description="simulate symmetric device groups once and replicate")
    contention: bool = Field(True, description="links and memory ports shared max-min fairly")
    optimizer: Optimizer = Optimizer.adam
    master_weights_fp32: bool = Field(True, description="mixed precision keeps fp32 master weights")
    inference: InferenceSettings = Field(default_factory=InferenceSettings)


class CanvasLayout(StrictModel):
    """Where the studio draws each component, keyed by component path; purely visual."""

    positions: dict[str, tuple[float, float]] = Field(default_factory=dict)
    notes: str = ""


class Project(StrictModel):
    schema_version: Annotated[int, Field(ge=0)] = SCHEMA_VERSION
    name: str = "untitled"
    description: str = ""
    hardware: Component
    workload: WorkloadSpec
    mapping: Mapping = Field(default_factory=Mapping)
    run: RunSettings = Field(default_factory=RunSettings)
    canvas: CanvasLayout = Field(default_factory=CanvasLayout)

    @field_validator("hardware")
    @classmethod
    def _single_root(cls, hw: Component) -> Component:
        if hw.rows * hw.cols != 1:
            raise ValueError(f"rows: the root '{hw.name}' must be one instance (got {hw.rows} × {hw.cols})")
        return hw

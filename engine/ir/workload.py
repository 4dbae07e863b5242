"""Workload specifications: what a project file says about the model.

A spec is small and readable (a GPT is its dimensions, not 1,500 ops); ``engine.workloads.build``
turns it into the operator graph. ``custom`` holds an explicit op list for models no builder covers.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator
from tilewright.engine.ir.common import StrictModel
from tilewright.engine.ir.ops import Op

PosInt = Annotated[int, Field(ge=1)]


class TransformerDims(StrictModel):
    name: str = ""
    comment: str = Field("", description="sources and notes")
    layers: PosInt
    hidden: PosInt
    heads: PosInt
    ffn: PosInt | None = Field(None, description="feed-forward width; default 4·hidden")
    seq_len: PosInt = 2048
    vocab: PosInt = 51200

    @property
    def ffn_dim(self) -> int:
        return self.ffn if self.ffn is not None else 4 * self.hidden

    @model_validator(mode="after")
    def _heads_divide_hidden(self) -> TransformerDims:
        if self.hidden % self.heads:
            raise ValueError(f"heads: {self.heads} does not divide hidden ({self.hidden})")
        return self


class GPTSpec(TransformerDims):
    """Megatron-style GPT: learned positions, LayerNorm, GeLU MLP, tied embedding/logits."""

    kind: Literal["gpt"] = "gpt"


class LlamaSpec(TransformerDims):
    """LLaMA-style decoder: RMSNorm, rotary positions, SwiGLU MLP, grouped-query attention."""

    kind: Literal["llama"] = "llama"
    kv_heads: PosInt | None = Field(None, description="key/value heads (GQA); default = heads")
    vocab: PosInt = 32000
    seq_len: PosInt = 4096
    tie_embeddings: bool = False

    @property
    def kv_heads_n(self) -> int:
        return self.kv_heads if self.kv_heads is not None else self.heads

    @model_validator(mode="after")
    def _gqa(self) -> LlamaSpec:
        if self.heads % self.kv_heads_n:
            raise ValueError(f"kv_heads: {self.kv_heads_n} does not divide heads ({self.heads})")
        return self


class BertSpec(TransformerDims):
    """BERT encoder with masked-LM head."""

    kind: Literal["bert"] = "bert"
    seq_len: PosInt = 512
    vocab: PosInt = 30522


CNNArch = Literal["alexnet", "lenet", "resnet50", "vgg-a", "vgg-b", "vgg-c", "vgg-d", "vgg-e"]


class CNNSpec(StrictModel):
    """Convolutional networks at their published shapes (ImageNet 224² unless changed; LeNet 32²)."""

    kind: Literal["cnn"] = "cnn"
    name: str = ""
    comment: str = ""
    arch: CNNArch
    image_size: PosInt | None = Field(None, description="input height = width; default the paper's")
    channels: PosInt = 3
    classes: PosInt = 1000


class MLPSpec(StrictModel):
    kind: Literal["mlp"] = "mlp"
    name: str = ""
    comment: str = ""
    layer_sizes: list[PosInt] = Field(min_length=2, description="widths from input to output")


class CustomSpec(StrictModel):
    """An explicit operator list; layer names index ``Op.layer``."""

    kind: Literal["custom"] = "custom"
    name: str = ""
    comment: str = ""
    layer_names: list[str] = Field(min_length=1)
    ops: list[Op] = Field(min_length=1)

    @model_validator(mode="after")
    def _refs(self) -> CustomSpec:
        names = {o.name for o in self.ops}
        if len(names) != len(self.ops):
            raise ValueError("ops: duplicate op names")
        for i, op in enumerate(self.ops):
            if op.layer >= len(self.layer_names):
                raise ValueError(f"ops.{i}.layer: {op.layer} has no entry in layer_names")
            for src in op.inputs:
                if src not in names:
                    raise ValueError(f"ops.{i}.inputs: unknown op '{src}'")
        return self


WorkloadSpec = Annotated[GPTSpec | LlamaSpec | BertSpec | CNNSpec | MLPSpec | CustomSpec, Field(discriminator="kind")]
TRANSFORMER_SPECS = (GPTSpec, LlamaSpec, BertSpec)

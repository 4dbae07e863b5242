"""Workload builders: a ``WorkloadSpec`` becomes a ``WorkloadGraph`` of per-sample ops.

``build_workload`` dispatches on ``spec.kind``; ``import_hf_config`` reads a Hugging Face ``config.json``;
``import_onnx_model`` an ONNX graph (with the optional ``onnx`` package).
Conventions shared by every builder are in ``engine.workloads.builder``.
"""

from __future__ import annotations

from tilewright.engine.ir.workload import BertSpec, CNNSpec, CustomSpec, GPTSpec, LlamaSpec, MLPSpec, WorkloadSpec
from tilewright.engine.workloads.cnn import build_cnn
from tilewright.engine.workloads.graph import LayerInfo, WorkloadGraph
from tilewright.engine.workloads.hf_import import ConfigError, import_hf_config
from tilewright.engine.workloads.mlp import build_custom, build_mlp
from tilewright.engine.workloads.onnx_import import import_onnx_model
from tilewright.engine.workloads.transformer import build_bert, build_gpt, build_llama

__all__ = ["ConfigError", "LayerInfo", "WorkloadGraph", "build_workload", "import_hf_config", "import_onnx_model"]


def build_workload(spec: WorkloadSpec) -> WorkloadGraph:
    """The operator graph of ``spec``."""
    match spec:
        case GPTSpec():
            return build_gpt(spec)
        case LlamaSpec():
            return build_llama(spec)
        case BertSpec():
            return build_bert(spec)
        case CNNSpec():
            return build_cnn(spec)
        case MLPSpec():
            return build_mlp(spec)
        case CustomSpec():
            return build_custom(spec)
    raise TypeError(f"kind: no builder for {type(spec).__name__}")

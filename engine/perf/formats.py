"""The storage format of each tensor kind an op moves, and the math fidelity of its matrix products.

``mapping.formats`` may give weights, activations and the KV cache different formats (bfp8 weights with
bf16 activations, a bfp8 cache); unset kinds take the run's data type. Bytes per element come from the one
table in ``ir.common``; the fidelity defaults by the weights' format (``DEFAULT_FIDELITY``).
"""

from __future__ import annotations

from dataclasses import dataclass

from tilewright.engine.ir.common import DEFAULT_FIDELITY, DType, MathFidelity, dtype_bytes
from tilewright.engine.ir.mapping import TensorFormats


@dataclass(frozen=True, slots=True)
class OpFormats:
    weights: DType
    activations: DType
    kv_cache: DType
    fidelity: MathFidelity

    @property
    def uniform(self) -> bool:
        """Every tensor in one format: byte counts are elements × one size, exactly as before formats."""
        return self.weights == self.activations == self.kv_cache

    @property
    def weight_bytes(self) -> float:
        return dtype_bytes(self.weights)

    @property
    def activation_bytes(self) -> float:
        return dtype_bytes(self.activations)

    @property
    def kv_bytes(self) -> float:
        return dtype_bytes(self.kv_cache)


def resolve_formats(run_dtype: DType, formats: TensorFormats, fidelity: MathFidelity | None) -> OpFormats:
    weights = formats.weights or run_dtype
    return OpFormats(
        weights=weights,
        activations=formats.activations or run_dtype,
        kv_cache=formats.kv_cache or run_dtype,
        fidelity=fidelity or DEFAULT_FIDELITY[weights],
    )

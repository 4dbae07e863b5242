"""The storage format of each tensor kind an op moves, and the math fidelity of its matrix products.

``mapping.formats`` may give weights, activations and the KV cache different formats (bfp8 weights with
bf16 activations, a bfp8 cache); unset kinds take the run's data type. Bytes per element come from the one
table in ``ir.common``; the fidelity defaults by the weights' format (``DEFAULT_FIDELITY``).

Per op, ``formats.weights_by_op`` and ``formats.fidelity_by_op`` override the weights' format and the
fidelity of the ops whose name within their layer ("mlp_up" of "block3.mlp_up") matches a glob pattern —
tt-transformers' performance mode keeps attention weights in bfp8 and stores the MLP's FF1/FF3 in bfp4 at
LoFi. ``OpFormats.for_op`` resolves them; the op cost (``op_cost.op_time``) and the weights' memory
(``mean_weight_bytes``) read the resolved formats, so one op's override changes that op only.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace
from fnmatch import fnmatchcase
from functools import lru_cache

from tilewright.engine.errors import Problem
from tilewright.engine.ir.common import DEFAULT_FIDELITY, DType, MathFidelity, dtype_bytes
from tilewright.engine.ir.hardware import Compute
from tilewright.engine.ir.mapping import Fp8Scaling, TensorFormats


@dataclass(frozen=True, slots=True)
class OpFormats:
    weights: DType
    activations: DType
    kv_cache: DType
    fidelity: MathFidelity
    weights_by_op: tuple[tuple[str, DType], ...] = ()  # (glob pattern, format), first match wins
    fidelity_by_op: tuple[tuple[str, MathFidelity], ...] = ()
    explicit_fidelity: MathFidelity | None = None  # mapping.fidelity: else the default of each op's weights
    fp8_scaling: Fp8Scaling = Fp8Scaling.tensor  # mapping.formats.fp8_scaling: the quantization of fp8 GEMMs

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

    @property
    def per_op(self) -> bool:
        return bool(self.weights_by_op or self.fidelity_by_op)

    def for_op(self, name: str) -> OpFormats:
        """The formats of the op called ``name`` ("block3.mlp_up" or "mlp_up"): itself without per-op
        overrides, else the weights' format and fidelity its first matching patterns give."""
        if not self.per_op:
            return self
        return _for_local(self, local_name(name))


def local_name(name: str) -> str:
    """An op's name within its layer ("block3.mlp_up" → "mlp_up"), what the per-op patterns match."""
    return name.split(".", 1)[-1]


def _first(patterns: tuple[tuple[str, object], ...], name: str) -> object | None:
    return next((value for pattern, value in patterns if fnmatchcase(name, pattern)), None)


@lru_cache(maxsize=4096)
def _for_local(f: OpFormats, name: str) -> OpFormats:
    weights = _first(f.weights_by_op, name) or f.weights
    fidelity = _first(f.fidelity_by_op, name) or f.explicit_fidelity or DEFAULT_FIDELITY[weights]  # type: ignore[index]
    return replace(f, weights=weights, fidelity=fidelity, weights_by_op=(), fidelity_by_op=())  # type: ignore[arg-type]


FP8_RECIPE_REST = DType.bf16  # what ``--dtype fp8`` keeps outside the weighted GEMMs


def resolve_formats(run_dtype: DType, formats: TensorFormats, fidelity: MathFidelity | None) -> OpFormats:
    """Each tensor kind's format: ``mapping.formats``, else the run's data type — except under ``--dtype
    fp8``, which is the fp8 recipe of Transformer Engine, TensorRT-LLM and vLLM (W8A8), not "every byte
    fp8": weights are fp8 and the weighted GEMMs run on the fp8 tensor cores (their input activation is
    quantised on the fly, ``gemm_dtype``), while activations between ops, attention, norms and the KV
    cache stay bf16 unless ``mapping.formats`` (``--kv-dtype fp8``) says otherwise."""
    weights = formats.weights or run_dtype
    rest = FP8_RECIPE_REST if run_dtype is DType.fp8 else run_dtype
    return OpFormats(
        weights=weights,
        activations=formats.activations or rest,
        kv_cache=formats.kv_cache or rest,
        fidelity=fidelity or DEFAULT_FIDELITY[weights],
        weights_by_op=tuple(formats.weights_by_op.items()),
        fidelity_by_op=tuple(formats.fidelity_by_op.items()),
        explicit_fidelity=fidelity,
        fp8_scaling=formats.fp8_scaling or Fp8Scaling.tensor,
    )


def gemm_dtype(formats: OpFormats, weighted: bool) -> DType:
    """The format a matrix op computes in: a weighted GEMM with fp8 weights is an fp8 GEMM (W8A8, the
    activation quantised on the fly by the GEMM's prologue, as fp8 serving and training recipes run it);
    every other matrix op (attention's QKᵀ and PV, weight-only formats such as int8 or bfp8 weights that
    are widened before the multiply) computes in the activations' format."""
    if weighted and formats.weights is DType.fp8:
        return DType.fp8
    return formats.activations


def mean_weight_bytes(formats: OpFormats, params: Iterable[tuple[str, float]]) -> float:
    """Bytes per weight element over ops given as (name, parameters held): each op's weights in its own
    format, so the weights' memory is Σ params × bytes exactly. Without per-op overrides (or parameters)
    the weights' format."""
    if not formats.weights_by_op:
        return formats.weight_bytes
    total = held = 0.0
    for name, n in params:
        total += n * formats.for_op(name).weight_bytes
        held += n
    return total / held if held > 0 else formats.weight_bytes


def per_op_problems(formats: TensorFormats, op_names: Iterable[str]) -> list[Problem]:
    """A per-op pattern that matches no op of the workload is a typo, not a no-op: refused, by field."""
    names = {local_name(n) for n in op_names}
    out = []
    for field, patterns in (("weights_by_op", formats.weights_by_op), ("fidelity_by_op", formats.fidelity_by_op)):
        for pattern in patterns:
            if not any(fnmatchcase(n, pattern) for n in names):
                known = ", ".join(sorted(names))
                out.append(
                    Problem(f"mapping.formats.{field}.{pattern}", f"matches no op of the workload (ops: {known})")
                )
    return out


def _weight_formats(run_dtype: DType, formats: TensorFormats) -> set[DType]:
    return {formats.weights or run_dtype, *formats.weights_by_op.values()}


def has_fp8_gemms(run_dtype: DType, formats: TensorFormats) -> bool:
    """Whether any weighted GEMM runs in fp8 (``gemm_dtype``: fp8 weights make an fp8 GEMM), so that an fp8
    scaling recipe has something to scale."""
    return DType.fp8 in _weight_formats(run_dtype, formats)


def fp8_scaling_problems(
    run_dtype: DType, formats: TensorFormats, devices: Iterable[tuple[str, Compute]]
) -> list[Problem]:
    """A scaling recipe needs fp8 GEMMs to scale (else it is a setting that silently does nothing), and
    'mxfp8' needs matrix units that apply the 1×32 block scales themselves (``Compute.microscaling``):
    Transformer Engine refuses MXFP8BlockScaling before Blackwell, and so do we. ``devices``: (name, compute)
    of every computing component of the system."""
    recipe = formats.fp8_scaling
    if recipe is None:
        return []
    field = "mapping.formats.fp8_scaling"
    if not has_fp8_gemms(run_dtype, formats):
        weights = ", ".join(sorted(w.value for w in _weight_formats(run_dtype, formats)))
        return [Problem(field, f"'{recipe.value}' but no tensor runs in fp8 (run.dtype {run_dtype.value}, weights "
                               f"{weights}): set --dtype fp8 or mapping.formats.weights fp8, or drop fp8_scaling")]
    if recipe is Fp8Scaling.mxfp8:
        lacking = sorted({name for name, c in devices if not c.microscaling})
        if lacking:
            return [Problem(field, f"'mxfp8' needs hardware microscaling (Blackwell's 1×32 E8M0 block scales, "
                                   f"compute.microscaling); {', '.join(lacking)} has none: use 'block', 'tensor' "
                                   "or 'delayed'")]
    return []


def per_op_notes(formats: OpFormats, op_names: Iterable[str]) -> list[str]:
    """One note saying which ops the per-op overrides reach and what they give them."""
    if not formats.per_op:
        return []
    groups: dict[tuple[DType, MathFidelity], list[str]] = {}
    for name in dict.fromkeys(local_name(n) for n in op_names):
        f = formats.for_op(name)
        if (f.weights, f.fidelity) != (formats.weights, formats.fidelity):
            groups.setdefault((f.weights, f.fidelity), []).append(name)
    parts = [f"{', '.join(ops)}: weights {w.value} at {fid.value}" for (w, fid), ops in groups.items()]
    rest = f"other ops: weights {formats.weights.value} at {formats.fidelity.value}"
    return [f"formats per op (mapping.formats.*_by_op): {'; '.join(parts) or 'none differ'}; {rest}"]

"""The storage format of each tensor kind an op moves, and the math fidelity of its matrix products.

``mapping.formats`` may give weights, activations and the KV cache different formats (bfp8 weights with
bf16 activations, a bfp8 cache); unset kinds take the run's data type. Bytes per element come from the one
table in ``ir.common``; the fidelity defaults by the weights' format (``DEFAULT_FIDELITY``).

Per op, ``formats.weights_by_op`` and ``formats.fidelity_by_op`` override the weights' format and the
fidelity of the ops whose name within their layer ("mlp_up" of "block3.mlp_up") matches a glob pattern —
tt-transformers' performance mode keeps attention weights in bfp8 and stores the MLP's FF1/FF3 in bfp4 at
LoFi. ``OpFormats.for_op`` resolves them; the op cost (``op_cost.op_time``) and the weights' memory
(``mean_weight_bytes``) read the resolved formats, so one op's override changes that op only.

Per layer, ``formats.bf16_first_layers`` / ``bf16_last_layers`` take the first and last transformer layers of
an fp8 training run out of fp8, as Megatron-Core's ``--first-last-layers-bf16`` does (Megatron-Bridge's FP8-CS
recipe, ``bf16_with_fp8_current_scaling_mixed``, keeps one at each end): ``megatron/core/fp8_utils.py``
``is_first_last_bf16_layer(config, layer_no)`` tests the *global* layer index against ``num_layers``
(the main decoder's, whatever the pipeline stage) and ``get_fp8_context`` returns a ``nullcontext`` for those
layers — no fp8 autocast, so their GEMMs run in bf16 with no quantization kernels and save bf16 inputs — and
for their ``fp8_model_init`` too, so their weights are ordinary bf16 parameters (gathered at 2 B even with
``--fp8-param-gather``, no fp8 copy beside them). Multi-token-prediction layers are asked with layer_no −1
(``transformer/cuda_graphs.py``: ``callable.layer_number - 1 if not is_mtp else -1``), which is never bf16:
they stay fp8. ``OpFormats.for_op`` gives such a layer's ops bf16 weights, so every per-op decision that
reads the weights' format (``gemm_dtype``: the GEMM's rate and its quantization passes, ``perf.memory.
fp8_saved``, ``plan.moe_host``'s fp8 GroupedLinear, the weights' bytes) follows the layer.

Per collective, ``formats.collectives`` and ``collectives_by_op`` give the format the tensor-parallel collective
after an op sends (``OpFormats.message_bytes``; unset: the activations'): tt-metal's llama3_70b_galaxy writes the
WO, FF1, FF3 and FF2 matmul outputs as bfloat8_b and reduces them in that format (``llama_attention.py``,
``llama_mlp.py``: ``dtype=ttnn.bfloat8_b``), its QKV output and attention output as bfloat16.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
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
    # names of the layers run outside fp8 ("block0"): mapping.formats.bf16_first_layers / bf16_last_layers
    bf16_layers: frozenset[str] = frozenset()
    # mapping.formats.collectives / collectives_by_op: what the tensor-parallel collectives send (None: activations)
    collectives: DType | None = None
    collectives_by_op: tuple[tuple[str, DType], ...] = ()  # (glob pattern, format), first match wins

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
        overrides, else the weights' format and fidelity its first matching patterns give; in a layer run
        outside fp8 (``bf16_layers``, matched by the full name's layer) fp8 weights become bf16."""
        if self.bf16_layers and layer_name(name) in self.bf16_layers:
            return _outside_fp8(self, local_name(name))
        if not self.per_op:
            return self
        return _for_local(self, local_name(name))

    def message_bytes(self, name: str, default: float) -> float:
        """Bytes per element of the tensor-parallel collective after the op called ``name`` ("block3.mlp_up"):
        its first matching ``collectives_by_op`` pattern, else ``collectives``, else ``default`` (the bytes the
        pass counts activations in). Why a format of its own: a runtime may write a matmul's partial sums
        narrower than it keeps activations and reduce them in that format (llama3_70b_galaxy's WO, FF1, FF3
        and FF2 outputs are bfloat8_b, its QKV output bfloat16), so the messages are not the activations' bytes."""
        fmt = _first(self.collectives_by_op, local_name(name)) if self.collectives_by_op else None
        fmt = fmt or self.collectives
        return dtype_bytes(fmt) if fmt is not None else default  # type: ignore[arg-type]

    def without_edge_layers(self) -> OpFormats:
        """These formats with every layer in fp8 as the run's recipe says (no ``bf16_layers``)."""
        return replace(self, bf16_layers=frozenset()) if self.bf16_layers else self


def message_bytes(formats: OpFormats | None, name: str, default: float) -> float:
    """Bytes per element of the tensor-parallel collective after op ``name`` (``OpFormats.message_bytes``);
    ``default`` (the pass's activation bytes) without formats."""
    return formats.message_bytes(name, default) if formats is not None else default


def local_name(name: str) -> str:
    """An op's name within its layer ("block3.mlp_up" → "mlp_up"), what the per-op patterns match."""
    return name.split(".", 1)[-1]


def layer_name(name: str) -> str:
    """The layer of an op's full name ("block3.mlp_up" → "block3"; "" for a name without a layer)."""
    layer, dot, _ = name.partition(".")
    return layer if dot else ""


def _first(patterns: tuple[tuple[str, object], ...], name: str) -> object | None:
    return next((value for pattern, value in patterns if fnmatchcase(name, pattern)), None)


@lru_cache(maxsize=4096)
def _for_local(f: OpFormats, name: str) -> OpFormats:
    weights = _first(f.weights_by_op, name) or f.weights
    fidelity = _first(f.fidelity_by_op, name) or f.explicit_fidelity or DEFAULT_FIDELITY[weights]  # type: ignore[index]
    return replace(f, weights=weights, fidelity=fidelity, weights_by_op=(), fidelity_by_op=())  # type: ignore[arg-type]


@lru_cache(maxsize=4096)
def _outside_fp8(f: OpFormats, name: str) -> OpFormats:
    """An op of a bf16 edge layer: its formats as ``for_op`` resolves them, fp8 weights made bf16 (the
    layer's GEMMs then compute in bf16: ``gemm_dtype``) at the fidelity bf16 takes unless one is set."""
    g = _for_local(f, name) if f.per_op else f
    g = replace(g, bf16_layers=frozenset())
    if g.weights is not DType.fp8:
        return g
    fidelity = _first(f.fidelity_by_op, name) or f.explicit_fidelity or DEFAULT_FIDELITY[FP8_RECIPE_REST]
    return replace(g, weights=FP8_RECIPE_REST, fidelity=fidelity)  # type: ignore[arg-type]


FP8_RECIPE_REST = DType.bf16  # what ``--dtype fp8`` keeps outside the weighted GEMMs


def resolve_formats(
    run_dtype: DType, formats: TensorFormats, fidelity: MathFidelity | None, blocks: Sequence[str] = (),
    train: bool = True, vocab: Sequence[str] = (),
) -> OpFormats:
    """Each tensor kind's format: ``mapping.formats``, else the run's data type — except under ``--dtype
    fp8``, which is the fp8 recipe of Transformer Engine, TensorRT-LLM and vLLM (W8A8), not "every byte
    fp8": weights are fp8 and the weighted GEMMs run on the fp8 tensor cores (their input activation is
    quantised on the fly, ``gemm_dtype``), while activations between ops, attention, norms and the KV
    cache stay bf16 unless ``mapping.formats`` (``--kv-dtype fp8``) says otherwise. ``blocks``: the names
    of the workload's transformer layers in order, of which ``formats.bf16_first_layers`` and
    ``bf16_last_layers`` leave the ends outside fp8 in training (``edge_layers``); ``vocab``: the names of the
    layers around the vocabulary, which training frameworks build outside fp8 whatever the recipe (the word
    embedding and the output layer: ``plan.device_layers.vocab_layers``), run and held in bf16 alike."""
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
        # the vocabulary's layers leave fp8 only where the weighted GEMMs are fp8 at all
        bf16_layers=(edge_layers(formats, blocks) | frozenset(vocab if weights is DType.fp8 else ())
                     if train else frozenset()),
        collectives=formats.collectives,
        collectives_by_op=tuple(formats.collectives_by_op.items()),
    )


def edge_layers(formats: TensorFormats, blocks: Sequence[str]) -> frozenset[str]:
    """The names of the transformer layers ``formats.bf16_first_layers`` / ``bf16_last_layers`` run in bf16:
    the first N and the last M of ``blocks`` (the model's transformer layers in order, Megatron-Core's global
    layer numbers; multi-token-prediction layers are not blocks)."""
    first, last = formats.bf16_first_layers, formats.bf16_last_layers
    return frozenset(blocks[:first]) | frozenset(blocks[len(blocks) - last:] if last else ())


def gemm_dtype(formats: OpFormats, weighted: bool) -> DType:
    """The format a matrix op computes in: a weighted GEMM with fp8 weights is an fp8 GEMM (W8A8, the
    activation quantised on the fly by the GEMM's prologue, as fp8 serving and training recipes run it);
    every other matrix op (attention's QKᵀ and PV, weight-only formats such as int8 or bfp8 weights that
    are widened before the multiply) computes in the activations' format."""
    if weighted and formats.weights is DType.fp8:
        return DType.fp8
    return formats.activations


def _weight_bytes(f: OpFormats) -> float:
    return f.weight_bytes


def mean_weight_bytes(
    formats: OpFormats, params: Iterable[tuple[str, float]], bytes_of: Callable[[OpFormats], float] = _weight_bytes
) -> float:
    """Bytes per weight element over ops given as (name, parameters held): each op's weights in its own
    format (per-op overrides, bf16 edge layers), so the weights' memory is Σ params × bytes exactly. Without
    per-op formats (or parameters) the weights' format. ``bytes_of``: bytes per parameter of an op's
    resolved formats (default its weights' format; ``perf.memory.held_weight_bytes`` adds the bf16 copy of
    an fp8 training run's weights)."""
    if not (formats.weights_by_op or formats.bf16_layers):
        return bytes_of(formats)
    total = held = 0.0
    for name, n in params:
        total += n * bytes_of(formats.for_op(name))
        held += n
    return total / held if held > 0 else bytes_of(formats)


def per_op_problems(formats: TensorFormats, op_names: Iterable[str]) -> list[Problem]:
    """A per-op pattern that matches no op of the workload is a typo, not a no-op: refused, by field."""
    names = {local_name(n) for n in op_names}
    out = []
    for field, patterns in (("weights_by_op", formats.weights_by_op), ("fidelity_by_op", formats.fidelity_by_op),
                            ("collectives_by_op", formats.collectives_by_op)):
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


def edge_layer_problems(run_dtype: DType, formats: TensorFormats, blocks: int, train: bool) -> list[Problem]:
    """``bf16_first_layers`` / ``bf16_last_layers`` take layers out of an fp8 training run: refused without fp8
    GEMMs (nothing to take out) or training (Megatron-Core's training option), past the model's ``blocks``
    transformer layers, and with delayed scaling, which Megatron-Core refuses ("Delayed scaling does not
    support first / last layer in BF16": ``fp8_utils.get_fp8_context``, the amax reduction runs per autocast)."""
    counts = {"bf16_first_layers": formats.bf16_first_layers, "bf16_last_layers": formats.bf16_last_layers}
    named = [k for k, n in counts.items() if n]
    if not named:
        return []
    field = f"mapping.formats.{named[0]}"
    if not has_fp8_gemms(run_dtype, formats):
        return [Problem(field, f"layers kept out of fp8, but no tensor runs in fp8 (run.dtype {run_dtype.value}): "
                               "set --dtype fp8 or drop the bf16 layers")]
    out = []
    if not train:
        out.append(Problem(field, "layers kept in bf16 by the fp8 training recipe (Megatron-Core "
                                  "--first-last-layers-bf16): training only"))
    if sum(counts.values()) > blocks:
        out.append(Problem(field, f"bf16_first_layers + bf16_last_layers = {sum(counts.values())} exceeds the "
                                  f"model's {blocks} transformer layers"))
    if formats.fp8_scaling is Fp8Scaling.delayed:
        out.append(Problem(field, "not with 'delayed' scaling: Megatron-Core refuses first / last layers in bf16 "
                                  "under delayed scaling (its amax reduction runs per autocast); use 'tensor' or "
                                  "'block'"))
    return out


def per_op_notes(formats: OpFormats, op_names: Iterable[str]) -> list[str]:
    """One note saying which ops the per-op overrides reach and what they give them (and one naming the
    layers run outside fp8)."""
    edge = []
    if formats.bf16_layers:
        names = sorted(formats.bf16_layers, key=lambda n: (len(n), n))
        edge = [f"fp8 training with {', '.join(names)} in bf16 (the embedding and output layers, which the "
                "frameworks build outside fp8: plan.device_layers.vocab_layers; transformer layers: "
                "mapping.formats.bf16_first_layers / bf16_last_layers): their GEMMs, saved inputs and weights "
                "bf16, no quantization kernels"]
    if not formats.per_op:
        return edge
    groups: dict[tuple[DType, MathFidelity], list[str]] = {}
    for name in dict.fromkeys(local_name(n) for n in op_names):
        f = formats.for_op(name)
        if (f.weights, f.fidelity) != (formats.weights, formats.fidelity):
            groups.setdefault((f.weights, f.fidelity), []).append(name)
    parts = [f"{', '.join(ops)}: weights {w.value} at {fid.value}" for (w, fid), ops in groups.items()]
    rest = f"other ops: weights {formats.weights.value} at {formats.fidelity.value}"
    return [*edge, f"formats per op (mapping.formats.*_by_op): {'; '.join(parts) or 'none differ'}; {rest}"]

"""A memo of ``op_time`` over one search or one plan: the same op shape costed again returns the same ``OpTime``.

A transformer's blocks are identical, and a search builds the passes of one layer for many tensor groups
that differ only in their collectives (``search.layer_table``): on a grid device every one of those op
costs runs the spatial split model again (``perf.spatial_op``), the larger part of a tiled search. ``op_time``
is a pure function of its arguments, so its answer is kept under their values: the op's fields (its name
only within its layer, and the formats its full name resolves to: ``OpFormats.for_op``; its layer index and
producers it never reads), the device model, the pass's micro-batch, tp, sequence parallelism, element
bytes, split policy, residency and 2-D axes, and the op's pass, fusion flags and attention scores. Values
an object carries are read once per object (``_Values``) and the object is held, so its id stays its own;
a memo therefore lives only as long as the search or plan whose ops and devices do not change under it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tilewright.engine.perf.op_cost import OpTime, op_time

if TYPE_CHECKING:
    from tilewright.engine.ir.ops import Op
    from tilewright.engine.plan.pass_records import PassContext

# fields an op's cost never reads: its full name (its name within the layer and its formats stand in for
# it), its layer's index and its producers' names
_IGNORED = frozenset({"name", "layer", "inputs"})


class _Values:
    """An object's value (``repr``, which spells every field of a dataclass or pydantic model) by its id,
    computed once; the object is kept so that no other object takes its id while the memo lives."""

    def __init__(self) -> None:
        self._by_id: dict[int, tuple[Any, str]] = {}

    def of(self, obj: Any) -> str | None:
        if obj is None:
            return None
        hit = self._by_id.get(id(obj))
        if hit is None:
            hit = self._by_id[id(obj)] = (obj, repr(obj))
        return hit[1]


class OpTimes:
    """``op_time`` of the ops a pass builder adds (``plan.passes``), each distinct one computed once."""

    def __init__(self) -> None:
        self._values = _Values()
        self._ops: dict[int, tuple[Op, Any, tuple]] = {}  # id(op) → (op, formats it was resolved with, its key)
        self._times: dict[tuple, OpTime] = {}

    def _op_key(self, op: Op, c: PassContext) -> tuple:
        hit = self._ops.get(id(op))
        if hit is None or hit[1] is not c.formats:
            fields = tuple((k, type(v), v if isinstance(v, (int, float, str, bool, tuple, type(None))) else repr(v))
                           for k, v in op.__dict__.items() if k not in _IGNORED)
            formats = c.formats.for_op(op.name) if c.formats is not None else None
            hit = self._ops[id(op)] = (op, c.formats, (op.name.split(".", 1)[-1], fields, formats))
        return hit[2]

    def time(
        self, costed: Op, op: Op, c: PassContext, backward: bool, fused: tuple[bool, bool], scores: float,
        tp_axes: tuple[int, int] | None,
    ) -> OpTime:
        """``op_time`` of ``costed`` (``op`` as the cost model sees it, made from ``op``, the device, ``scores``
        and ``fused``: ``costed_op.as_costed``) in the pass of ``c``, as ``PassBuilder.add_op`` calls it."""
        mb, elem = c.micro_batch, c.elem_bytes  # with their types: 2 and 2.0 are one key but may print apart
        key = (
            self._op_key(op, c), self._values.of(c.dev), mb, type(mb), c.tp, c.sequence_parallel, backward,
            elem, type(elem), fused, scores, type(scores), self._values.of(c.spatial), c.residency, tp_axes,
            c.expert_kernels,
        )
        t = self._times.get(key)
        if t is None:
            t = self._times[key] = op_time(costed, c.dev, c.micro_batch, c.tp, c.sequence_parallel, backward,
                                           c.elem_bytes, *fused, c.formats, c.spatial, c.residency,
                                           tp_axes=tp_axes, expert_kernels=c.expert_kernels)
        return t

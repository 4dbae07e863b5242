"""Read an ONNX model graph into a ``custom`` workload: one op per compute node, FLOPs and bytes from shapes.

Shapes come from ``onnx.shape_inference``. Quantities are per sample, as ``engine.ir.ops`` wants: a
symbolic dimension (``dim_param``, e.g. the batch) counts as 1 unless ``dims`` gives its value (a symbolic
sequence length should be given: ``dims={"seq": 2048}``; a name the graph does not use is refused, as a
misspelling would leave its dimension at 1), and a model exported with a fixed batch should be
exported with batch 1. Which symbolic dimensions were taken as 1 is written in the spec's comment and
returned by ``import_onnx`` (``tilewright import-onnx`` refuses a graph input's that ``--dim`` leaves unset); a
``Reshape`` to ``-1`` makes shape inference invent dimensions (``unk__N``) that count as 1 too, so export
with static shapes (``torch.onnx.export`` without ``dynamic_axes``) when the comment lists them.

Node → op (FLOPs are 2 per multiply-accumulate, as every builder counts them):

- ``MatMul`` with a weight (an initializer) and ``Gemm``: ``matmul``, 2·M·N·K, weights = the initializers
  (Gemm's bias too), ``gemm = (M, N, K)`` with M the rows per sample;
- ``MatMul`` of two activations (attention's QKᵀ and AV): ``attention``, 2·(output elements)·K; a weight
  on the left (``W @ x``) is a GEMM too, and ``QLinearMatMul`` reads its operands a and b (inputs 0 and 3);
- ``Einsum`` of two operands: 2·(the product of every index's extent), ``matmul`` with a weight operand,
  else ``attention``; three or more operands or ellipses are left at 0 FLOPs and named in the comment;
- ``LSTM``/``GRU``/``RNN``: ``matmul``, 2·steps·batch·(|W| + |R|);
- ``Conv``: ``conv``, 2·(output elements)·(C_in / group)·kernel; ``ConvTranspose`` 2·(input elements)·
  (C_out / group)·kernel;
- fused attention (``Attention`` of opset 23, ``com.microsoft`` ``Attention``/``MultiHeadAttention``):
  ``attention``, 2·S_q·S_kv·(query width + output width; the output's, as V is weighed once per query head
  under GQA), plus the packed qkv projection's GEMM when the node carries its weights (``com.microsoft``
  Attention);
- ``Gather`` from an initializer: ``embedding``; the normalisations: ``norm``; ``Softmax``: ``softmax``;
  pooling: ``pool``; ``Dropout``: ``dropout``; any other node: ``elementwise`` (0 FLOPs, its bytes); one of
  an operator set other than ONNX's own (``com.microsoft``'s ``FusedMatMul`` or ``MatMulNBits``, which
  onnxruntime's optimizer and LLM exports write) may be a GEMM, so those are counted by name in the comment
  and in ``OnnxImport.foreign``, for a caller to warn about;
- shape-only nodes (``Reshape``, ``Shape``, ``Constant``, ``Squeeze``, ``Unsqueeze``, ``Flatten``,
  ``Identity``, ``Cast`` of shapes …) move no data in a compiled graph and are left out.

Layers: exports name nodes by module path (``/model/layers.3/self_attn/q_proj/MatMul``); the first path
part ending in ``.N`` or ``_N`` names a repeated block and becomes a layer, and the nodes between blocks form
``pre``/``post`` layers. A graph without such names gets a layer per weighted node. Ops are not split by
tensor parallelism (``split`` none): which axis a custom graph's matmul could be split on is not known.
Training reuses the graph: matrix ops, norms and softmax keep their inputs for the backward pass.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from os import PathLike
from pathlib import Path
from typing import Any

from tilewright.engine.ir.ops import Op, OpKind
from tilewright.engine.ir.workload import CustomSpec
from tilewright.engine.workloads.hf_config import ConfigError

SHAPE_ONLY = {
    "Reshape",
    "Shape",
    "Constant",
    "ConstantOfShape",
    "Squeeze",
    "Unsqueeze",
    "Flatten",
    "Identity",
    "Size",
    "Range",
}
NORMS = {
    "LayerNormalization",
    "SimplifiedLayerNormalization",
    "RMSNormalization",
    "BatchNormalization",
    "InstanceNormalization",
    "GroupNormalization",
    "SkipLayerNormalization",
    "SkipSimplifiedLayerNormalization",
}
POOLS = {"MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool", "LpPool"}
FUSED_ATTENTION = {"Attention", "MultiHeadAttention", "GroupQueryAttention"}
RECURRENT = {"LSTM", "GRU", "RNN"}
_BLOCK = re.compile(r"^(.*?[A-Za-z]\w*?[._]\d+)/")  # "model/layers.3/…" → "model/layers.3"

Shape = tuple[int, ...]


@dataclass(frozen=True)
class OnnxImport:
    """An imported workload and what its symbolic dimensions were taken as, for a caller to report or refuse:
    ``bound`` the names ``dims`` sized; ``unbound_inputs`` the graph inputs' symbolic dimensions nothing sized
    (name → "input 'x' axis 1" places; "" for a dimension with neither size nor name), which count as 1 per
    sample; ``unbound_inner`` the same for dimensions found only inside the graph (shape inference's
    ``unk__N``), also counted as 1."""

    spec: CustomSpec
    bound: dict[str, int] = field(default_factory=dict)
    unbound_inputs: dict[str, list[str]] = field(default_factory=dict)
    unbound_inner: dict[str, list[str]] = field(default_factory=dict)
    foreign: dict[str, int] = field(default_factory=dict)  # "domain.OpType" → nodes costed as elementwise


def import_onnx_model(
    path: str | PathLike[str], name: str | None = None, dims: Mapping[str, int] | None = None
) -> CustomSpec:
    """The custom workload of the ONNX model at ``path``; ``dims`` sets symbolic dimensions by name, the
    others count as 1 per sample (listed in the spec's comment; ``import_onnx`` says which and where)."""
    return import_onnx(path, name, dims).spec


def import_onnx(
    path: str | PathLike[str], name: str | None = None, dims: Mapping[str, int] | None = None
) -> OnnxImport:
    """``import_onnx_model`` with the symbolic dimensions' fate: which ``dims`` bound, which were left at 1."""
    try:
        import onnx
    except ImportError as exc:  # an optional extra
        raise ConfigError("onnx", "the onnx package is not installed (pip install 'tilewright[onnx]')") from exc
    try:
        model = onnx.load(str(path))
        onnx.checker.check_model(model)
        model = onnx.shape_inference.infer_shapes(model, strict_mode=False)
    except FileNotFoundError as exc:
        raise ConfigError(str(path), "no such file") from exc
    except Exception as exc:  # onnx raises DecodeError, ValidationError, InferenceError and others
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ConfigError("model", f"not a valid ONNX model ({reason})") from exc
    graph = _Graph(model.graph, dict(dims or {}))
    ops, layer_names = graph.ops()
    unused = sorted(set(dims or {}) - graph.symbols)
    if unused:  # a misspelt name would leave the dimension at 1 per sample without a word
        have = ", ".join(sorted(n for n in graph.symbols if n)) or "none"
        raise ConfigError("dims", f"{', '.join(unused)}: no symbolic dimension of that name (the graph has: {have})")
    if not ops:
        raise ConfigError("graph", "no compute nodes (MatMul, Gemm, Conv, attention, …) to import")
    source = name or model.graph.name or Path(path).stem
    notes = [f"{len(model.graph.node)} ONNX nodes, {len(ops)} ops"]
    if graph.assumed:
        notes.append(f"symbolic dimensions taken as 1 per sample: {', '.join(sorted(graph.assumed))}")
    if graph.unknown:
        notes.append(f"{len(graph.unknown)} node(s) with unknown shapes counted without bytes")
    if graph.uncosted:
        notes.append(f"counted without FLOPs (a form the importer does not cost): {', '.join(sorted(graph.uncosted))}")
    if graph.foreign:
        notes.append(f"counted as elementwise, 0 FLOPs (operators of another domain the importer does not know): "
                     f"{foreign_text(graph.foreign)}")
    comment = f"Imported from ONNX ({Path(path).name}, opset {_opset(model)}); " + "; ".join(notes)
    spec = CustomSpec(name=source, comment=comment, layer_names=layer_names, ops=ops)
    inputs = {k: [p for p in v if p.startswith("input ")] for k, v in graph.places.items()}
    inputs = {k: v for k, v in inputs.items() if v}
    inner = {k: v for k, v in graph.places.items() if k not in inputs}
    bound = {k: v for k, v in (dims or {}).items() if k in graph.symbols}
    return OnnxImport(spec, bound, inputs, inner, dict(graph.foreign))


def foreign_text(foreign: Mapping[str, int]) -> str:
    """``com.microsoft.FusedMatMul ×24, …``: each unknown operator of another domain and its node count."""
    return ", ".join(f"{key} ×{count}" for key, count in sorted(foreign.items()))


def _opset(model: Any) -> int:
    return next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)


class _Graph:
    """Shapes and weights of one ONNX graph, and its nodes turned into ops."""

    def __init__(self, graph: Any, dims: dict[str, int]) -> None:
        self.graph = graph
        self.dims = dims
        self.assumed: set[str] = set()
        self.places: dict[str, list[str]] = {}  # each dimension counted as 1 → where ("input 'x' axis 1")
        self.symbols: set[str] = set()  # every symbolic dimension's name the graph uses
        self.unknown: set[str] = set()
        self.uncosted: set[str] = set()  # compute nodes left at 0 FLOPs, named in the spec's comment
        # nodes of another operator set with no rule here, costed as elementwise: "domain.OpType" → count
        self.foreign: dict[str, int] = {}
        self.weights: dict[str, Shape] = {t.name: tuple(t.dims) for t in graph.initializer}
        self.shapes: dict[str, Shape] = dict(self.weights)
        self._inputs = {v.name for v in graph.input} - set(self.weights)  # old exports list weights as inputs
        for value in (*graph.input, *graph.value_info, *graph.output):
            shape = self._shape_of(value)
            if shape is not None:
                self.shapes[value.name] = shape
        for node in graph.node:  # Constant nodes are weights too (small ones: shapes, scales)
            if node.op_type == "Constant":
                for attr in node.attribute:
                    if attr.name == "value":
                        self.weights[node.output[0]] = tuple(attr.t.dims)
                        self.shapes[node.output[0]] = tuple(attr.t.dims)

    def _shape_of(self, value: Any) -> Shape | None:
        tensor = value.type.tensor_type
        if not tensor.HasField("shape"):
            return None
        out = []
        for axis, d in enumerate(tensor.shape.dim):
            if d.HasField("dim_value"):
                out.append(d.dim_value)
                continue
            self.symbols.add(d.dim_param)
            if d.dim_param in self.dims:
                out.append(self.dims[d.dim_param])
            else:
                self.assumed.add(d.dim_param or "?")
                kind = "input " if value.name in self._inputs else ""
                self.places.setdefault(d.dim_param, []).append(f"{kind}'{value.name}' axis {axis}")
                out.append(1)
        return tuple(out)

    def elems(self, names: list[str] | Any) -> float:
        return float(sum(math.prod(self.shapes[n]) for n in names if n and n in self.shapes))

    def shape(self, node: Any, name: str) -> Shape:
        if name not in self.shapes:
            raise ConfigError(
                f"node {node.name or node.op_type}",
                f"the shape of {name!r} is unknown (shape inference could not derive it)",
            )
        return self.shapes[name]

    def ops(self) -> tuple[list[Op], list[str]]:
        layers = _Layers(self.graph.node)
        producer: dict[str, str] = {}  # tensor → the op that produced it (through skipped nodes)
        ops: list[Op] = []
        used: set[str] = set()
        for i, node in enumerate(self.graph.node):
            data_inputs = [n for n in node.input if n and n not in self.weights]
            sources = list(dict.fromkeys(producer[n] for n in data_inputs if n in producer))
            if node.op_type in SHAPE_ONLY:
                for out in node.output:
                    if sources:
                        producer[out] = sources[0]
                continue
            if any(n not in self.shapes for n in (*data_inputs, *node.output) if n):
                self.unknown.add(node.name or f"{node.op_type}_{i}")
            name = _unique(node.name.strip("/").replace("/", ".") or f"{node.op_type}_{i}", used)
            try:
                fields = self._fields(node, data_inputs)
            except ConfigError:
                raise
            except (IndexError, KeyError, ValueError, TypeError) as exc:  # a node whose inputs do not fit its type
                raise ConfigError(f"node {node.name or f'{node.op_type}_{i}'}", f"unexpected inputs ({exc})") from exc
            ops.append(Op(name=name, layer=layers.index(node, fields["params"] > 0), inputs=sources, **fields))
            for out in node.output:
                producer[out] = name
        return ops, layers.names

    def _fields(self, node: Any, data_inputs: list[str]) -> dict[str, Any]:
        t = node.op_type
        weights = [n for n in node.input if n in self.weights]
        params = float(sum(math.prod(self.weights[n]) for n in weights))
        in_elems, out_elems = self.elems(data_inputs), self.elems(node.output)
        fields: dict[str, Any] = {
            "kind": OpKind.elementwise,
            "flops": 0.0,
            "params": params,
            "in_elems": in_elems,
            "out_elems": out_elems,
        }
        if t in ("MatMul", "Gemm", "MatMulInteger", "QLinearMatMul"):
            fields |= self._matmul(node, weights)
        elif t in ("Conv", "ConvTranspose", "ConvInteger", "QLinearConv"):
            fields |= self._conv(node)
        elif t in FUSED_ATTENTION:
            fields |= self._attention(node, weights)
        elif t == "Einsum":
            fields |= self._einsum(node, weights)
        elif t in RECURRENT:
            fields |= self._recurrent(node)
        elif t == "Gather" and node.input[0] in self.weights:
            fields |= {"kind": OpKind.embedding}
        elif t in NORMS:
            fields |= {"kind": OpKind.norm, "saved_elems": in_elems}
        elif t == "Softmax":
            fields |= {"kind": OpKind.softmax, "saved_elems": out_elems}
        elif t in POOLS:
            fields |= {"kind": OpKind.pool}
        elif t == "Dropout":
            fields |= {"kind": OpKind.dropout}
        if fields["kind"] in (OpKind.matmul, OpKind.attention, OpKind.conv):
            fields["saved_elems"] = in_elems
        if fields["kind"] is OpKind.elementwise and node.domain not in ("", "ai.onnx"):
            key = f"{node.domain}.{t}"  # its work is unknown here: a fused GEMM would vanish without a word
            self.foreign[key] = self.foreign.get(key, 0) + 1
        return fields

    def _matmul(self, node: Any, weights: list[str]) -> dict[str, Any]:
        """A weight on either side makes a GEMM (``W @ x`` as well as ``x @ W``); QLinearMatMul's operands are
        its inputs 0 and 3 (a, a_scale, a_zero_point, b, …), the others are scales and zero points."""
        second = 3 if node.op_type == "QLinearMatMul" else 1
        a, b = self.shape(node, node.input[0]), self.shape(node, node.input[second])
        out = self.shape(node, node.output[0])
        if node.op_type == "Gemm":
            attrs = {x.name: x.i for x in node.attribute}
            k = a[0] if attrs.get("transA") else a[-1]
        else:
            k = a[-1] if len(a) > 1 else a[0]
        n = b[0] if node.op_type == "Gemm" and {x.name: x.i for x in node.attribute}.get("transB") else b[-1]
        out_elems = math.prod(out)
        flops = 2.0 * out_elems * k
        if node.op_type == "Gemm" or node.input[0] in weights or node.input[second] in weights:
            if node.op_type != "Gemm" and node.input[0] in weights and node.input[second] not in weights:
                n = a[-2] if len(a) > 1 else 1  # W @ x: the weight's rows are the outputs, x's columns the tokens
            m = max(1, out_elems // max(n, 1))
            return {"kind": OpKind.matmul, "flops": flops, "gemm": (m, n, k)}
        return {"kind": OpKind.attention, "flops": flops}

    def _conv(self, node: Any) -> dict[str, Any]:
        w = self.shape(node, node.input[1] if node.op_type != "QLinearConv" else node.input[3])
        kernel = math.prod(w[2:])
        if node.op_type == "ConvTranspose":  # W: C_in × C_out/group × k…
            flops = 2.0 * math.prod(self.shape(node, node.input[0])) * w[1] * kernel
        else:  # W: C_out × C_in/group × k…
            flops = 2.0 * math.prod(self.shape(node, node.output[0])) * w[1] * kernel
        return {"kind": OpKind.conv, "flops": flops}

    def _attention(self, node: Any, weights: list[str]) -> dict[str, Any]:
        """Fused attention: (query, key, value) inputs of rank 3 (batch, seq, width) or 4 (batch, heads, seq,
        width); com.microsoft Attention instead packs the qkv projection (input, weights (in, 3·hidden))."""
        q = self.shape(node, node.input[0])
        if node.domain == "com.microsoft" and node.op_type == "Attention" and len(node.input) > 1:
            w = self.shape(node, node.input[1])
            s, hidden = q[-2], w[-1] // 3
            projection = 2.0 * s * w[0] * w[-1]
            return {"kind": OpKind.attention, "flops": projection + 4.0 * s * s * hidden}
        k = self.shape(node, node.input[1]) if len(node.input) > 1 and node.input[1] else q
        v = self.shape(node, node.input[2]) if len(node.input) > 2 and node.input[2] else k
        s_q, s_kv = q[-2], k[-2]
        q_width = q[-1] * (q[1] if len(q) == 4 else 1)  # rank 4: heads × head width
        # the weighted sum runs once per query head: its width is the output's (q heads × value width), which
        # with grouped KV heads (GQA/MQA) is wider than V's own
        out = self.shapes.get(node.output[0])
        if out is not None and len(out) == len(q):
            v_width = out[-1] * (out[1] if len(out) == 4 else 1)
        else:
            v_width = v[-1] * (v[1] if len(v) == 4 else 1) * _heads_ratio(node, q, k)
        return {"kind": OpKind.attention, "flops": 2.0 * s_q * s_kv * (q_width + v_width)}


    def _einsum(self, node: Any, weights: list[str]) -> dict[str, Any]:
        """Two operands: 2 FLOPs per step of the loop over every index (the product of all index extents, a
        matmul's 2·M·N·K); a weight operand makes it a GEMM (k the contracted extents, n the weight's kept
        ones), else an activation × activation ``attention`` matmul. One operand (a transpose, a sum) moves
        data only. Three or more operands and ellipses are left at 0 FLOPs and named in the comment."""
        eq = next((a.s.decode() for a in node.attribute if a.name == "equation"), "").replace(" ", "")
        lhs, arrow, out = eq.partition("->")
        terms = lhs.split(",")
        if len(terms) == 1:
            return {}
        if len(terms) != 2 or len(node.input) != 2 or "..." in eq:
            self.uncosted.add(f"Einsum {eq!r}")
            return {}
        if not arrow:  # implicit output: the indices that appear once, in alphabetical order (numpy's rule)
            out = "".join(sorted(c for c in set(lhs) - {","} if lhs.count(c) == 1))
        extents: dict[str, int] = {}
        for term, name in zip(terms, node.input, strict=True):
            shape = self.shape(node, name)
            if len(shape) != len(term):
                raise ConfigError(f"node {node.name or 'Einsum'}",
                                  f"equation {eq!r}: {term!r} does not match the shape {shape} of {name!r}")
            for letter, size in zip(term, shape, strict=True):
                extents[letter] = max(extents.get(letter, 1), size)  # an extent of 1 broadcasts
        flops = 2.0 * math.prod(extents.values())
        weight = next((term for term, name in zip(terms, node.input, strict=True) if name in weights), None)
        if weight is None:
            return {"kind": OpKind.attention, "flops": flops}
        k = math.prod(extents[c] for c in extents if c not in out)
        n = math.prod(extents[c] for c in dict.fromkeys(weight) if c in out)
        return {"kind": OpKind.matmul, "flops": flops, "gemm": (max(1, round(flops / (2 * n * k))), n, k)}

    def _recurrent(self, node: Any) -> dict[str, Any]:
        """LSTM/GRU/RNN (X, W, R, …): every step multiplies its input by W (directions × gates·hidden ×
        input) and its state by R (… × hidden): 2·steps·batch·(|W| + |R|) FLOPs, steps × batch the first two
        axes of X in either layout. The gates' elementwise work is not counted, as no builder counts it; no
        single GEMM shape (the state's product is one small GEMM per step)."""
        x = self.shape(node, node.input[0])
        w, r = self.shape(node, node.input[1]), self.shape(node, node.input[2])
        return {"kind": OpKind.matmul, "flops": 2.0 * x[0] * x[1] * (math.prod(w) + math.prod(r))}


def _heads_ratio(node: Any, q: Shape, k: Shape) -> int:
    """Query heads per key/value head of a fused attention node (1 without grouping): rank-4 inputs carry the
    heads on axis 1, rank-3 ones in the q_num_heads / kv_num_heads attributes (opset 23)."""
    if len(q) == 4 and len(k) == 4:
        return max(1, q[1] // max(k[1], 1))
    attrs = {a.name: a.i for a in node.attribute}
    return max(1, attrs.get("q_num_heads", attrs.get("num_heads", 1)) // max(attrs.get("kv_num_heads", 1), 1))


class _Layers:
    """Layer of each node: its repeated block (by module path), else a run of nodes between blocks."""

    def __init__(self, nodes: Any) -> None:
        self.keys = [_block_key(n.name) for n in nodes]
        self.by_block = any(self.keys)
        self.names: list[str] = []
        self._block_index: dict[str, int] = {}
        self._current: int | None = None
        self._current_is_block = False

    def _open(self, name: str) -> int:
        self.names.append(_unique(name, set(self.names)))
        return len(self.names) - 1

    def index(self, node: Any, weighted: bool) -> int:
        if self.by_block:
            key = _block_key(node.name)
            if key is not None:
                if key not in self._block_index:
                    self._block_index[key] = self._open(key)
                self._current, self._current_is_block = self._block_index[key], True
            elif self._current is None or self._current_is_block:
                self._current = self._open("pre" if self._current is None else "post")
                self._current_is_block = False
            return self._current
        if self._current is None or weighted:
            self._current = self._open(node.name.strip("/").replace("/", ".") or node.op_type if weighted else "input")
        return self._current


def _block_key(name: str) -> str | None:
    match = _BLOCK.match(name.lstrip("/"))
    return match.group(1).replace("/", ".") if match else None


def _unique(name: str, used: set[str]) -> str:
    out, n = name, 1
    while out in used:
        n += 1
        out = f"{name}_{n}"
    used.add(out)
    return out

"""The ops of one transformer block, with the activation memory of Korthikanti et al. (2022).

"Reducing Activation Recomputation in Large Transformer Models" (arXiv 2205.05198) counts, per block and
per sample at 16 bits, 34·s·h + 5·a·s² bytes. Each stored tensor is put on exactly one op:

- norms store their input and their output (the output is the input of the next linear): 2·(2sh) each;
- qkv stores its output (Q, K, V: 6sh); the output projection its input (2sh); the MLP activation its
  input (8sh) and the down projection its input (8sh);
- dropouts store a 1-byte mask (``saved_bytes_fixed``): sh each;
- softmax stores its output (2as²); attention dropout its mask (as²) and output (2as²).

So the replicated ops (norms, dropouts, residual adds) hold exactly 10sh bytes, the tensor-split ones 24sh
and the ``selective`` ones 5as², giving sh·(10 + 24/t + 5as/(ht)) with tensor parallelism t.

The ``attention`` op (QKᵀ and the context matmul, 4·s²·h FLOPs) is marked ``selective`` too although it
stores nothing: Megatron's selective recomputation re-runs the whole core attention, so recomputing the
selective ops must also pay for those two matmuls.
"""

from __future__ import annotations

from dataclasses import dataclass

from tilewright.engine.ir.ops import OpKind, TensorSplit
from tilewright.engine.workloads.builder import OpList

COL, ROW, HEADS, REP = TensorSplit.column, TensorSplit.row, TensorSplit.heads, TensorSplit.replicated


@dataclass(frozen=True)
class BlockShape:
    """What differs between GPT, LLaMA and BERT blocks."""

    seq: int
    hidden: int
    heads: int
    kv_heads: int
    ffn: int
    gated_mlp: bool  # SwiGLU: up and gate projections, activation multiplies them
    bias: bool  # linear layers have biases
    dropout: bool
    norm_params: int  # 2h for LayerNorm (gain, bias), h for RMSNorm (gain)
    pre_norm: bool  # GPT/LLaMA normalise before each sub-block; BERT after the residual add

    @property
    def qkv_width(self) -> int:
        return self.hidden + 2 * self.kv_heads * (self.hidden // self.heads)

    def linear(self, fan_in: int, fan_out: int) -> int:
        return fan_in * fan_out + (fan_out if self.bias else 0)


def add_norm(ops: OpList, name: str, sh: int, params: int, split: TensorSplit = REP, **fields: object) -> str:
    """A LayerNorm/RMSNorm storing its input and its output (the output feeds a linear layer)."""
    return ops.add(
        name, OpKind.norm, split, params=params, in_elems=sh, out_elems=sh, saved_elems=2 * sh, **fields
    )


def add_matmul(
    ops: OpList, name: str, split: TensorSplit, m: int, n: int, k: int, params: int, saved: int = 0,
    **fields: object,
) -> str:
    """A linear layer y = x·W (+b) over m = seq tokens: W is k × n."""
    return ops.add(
        name, OpKind.matmul, split, flops=2.0 * m * n * k, params=params, gemm=(m, n, k),
        in_elems=m * k, out_elems=m * n, saved_elems=saved, **fields,
    )


def add_dropout(ops: OpList, name: str, elems: int, split: TensorSplit = REP, **fields: object) -> str:
    """Dropout keeps a 1-byte mask whatever the data type."""
    return ops.add(
        name, OpKind.dropout, split, in_elems=elems, out_elems=elems, saved_bytes_fixed=elems, **fields
    )


def add_block(ops: OpList, b: BlockShape, block_input: str) -> str:
    """Append one block's ops to the current layer; returns the name of its last op."""
    s, h, a = b.seq, b.hidden, b.heads
    sh, as2 = s * h, a * s * s
    norm_first = b.pre_norm
    if norm_first:
        add_norm(ops, "norm1", sh, b.norm_params)
    qkv_in = ops.last if norm_first else block_input
    add_matmul(
        ops, "qkv", COL, s, b.qkv_width, h, b.linear(h, b.qkv_width), saved=s * b.qkv_width, inputs=[qkv_in]
    )
    ops.add(
        "attention", OpKind.attention, HEADS, flops=4.0 * s * s * h, in_elems=s * b.qkv_width,
        out_elems=sh, selective=True,
    )
    ops.add("softmax", OpKind.softmax, HEADS, in_elems=as2, out_elems=as2, saved_elems=as2, selective=True)
    if b.dropout:
        add_dropout(ops, "attention_dropout", as2, HEADS, saved_elems=as2, selective=True)
    add_matmul(ops, "out_proj", ROW, s, h, h, b.linear(h, h), saved=sh)
    if b.dropout:
        add_dropout(ops, "dropout1", sh)
    residual1 = ops.add(
        "residual1", OpKind.elementwise, REP, in_elems=2 * sh, out_elems=sh, inputs=[ops.last, block_input]
    )
    mlp_input = add_norm(ops, "norm2" if norm_first else "norm1", sh, b.norm_params)
    up = add_matmul(ops, "mlp_up", COL, s, b.ffn, h, b.linear(h, b.ffn), inputs=[mlp_input])
    act_inputs = [up]
    if b.gated_mlp:
        act_inputs.append(add_matmul(ops, "mlp_gate", COL, s, b.ffn, h, b.linear(h, b.ffn), inputs=[mlp_input]))
    act_in = s * b.ffn * len(act_inputs)
    ops.add(
        "activation", OpKind.elementwise, COL, in_elems=act_in, out_elems=s * b.ffn, saved_elems=act_in,
        inputs=act_inputs,
    )
    add_matmul(ops, "mlp_down", ROW, s, h, b.ffn, b.linear(b.ffn, h), saved=s * b.ffn)
    if b.dropout:
        add_dropout(ops, "dropout2", sh)
    # Pre-norm: the skip path carries the first residual sum; post-norm: the first norm's output.
    skip = residual1 if norm_first else mlp_input
    last = ops.add("residual2", OpKind.elementwise, REP, in_elems=2 * sh, out_elems=sh, inputs=[ops.last, skip])
    if not norm_first:
        last = add_norm(ops, "norm2", sh, b.norm_params)
    return last

"""The kernel chains eager PyTorch runs for a layer's pointwise ops (``mapping.host_framework`` 'pytorch').

Megatron's layers run each norm, activation and residual add as one fused kernel, which is what ``op_cost`` charges
(one pass over the op's tensors). A model written in plain PyTorch modules and run eagerly (torchtitan's Llama,
Hugging Face's ``LlamaRMSNorm``/``LlamaMLP``) runs some of them as a chain of ATen kernels instead, each streaming
its tensor through device memory, some in fp32. The chains are counted from torchtitan's code
(pytorch/torchtitan ``torchtitan/models/norms.py`` ``RMSNorm``, ``torchtitan/models/llama/model.py``
``FeedForward``; the same in the 2024-25 versions ``benchmarks/calibrate_fsdp.py`` pins) and, backward, from
autograd's derivative of each primitive (PyTorch ``tools/autograd/derivatives.yaml`` and
``torch/csrc/autograd/FunctionsManual.cpp``). ``a`` is the activations' bytes per element (2 in bf16), N the op's
output elements; "tiny" kernels touch one value per row (4 B per row of h elements) and are charged the per-kernel
floor alone.

**RMSNorm** (``self._norm(x.float()).type_as(x) * self.weight``, ``_norm`` = ``x * torch.rsqrt(x.pow(2).mean(-1,
keepdim=True) + eps)``). Forward, 8 kernels: ``x.float()`` (read a, write 4), ``pow(2)`` (4 + 4), ``mean(-1)`` (read
4, a row out), ``+ eps`` and ``rsqrt`` (tiny, tiny), ``x * rstd`` (4 + 4, the row factor broadcast), ``type_as``
(4 + a), ``* weight`` (a + a): 28 + 4a bytes per element (36 in bf16, against the fused kernel's 2a = 4).
Backward, 16 kernels: the weight product's two gradients ``grad * weight`` (a + a) and ``grad * y`` (2a + a) and
the weight gradient's broadcast reduction ``sum_to_size`` (read a); ``type_as``'s backward, a cast to fp32 (a + 4);
``x * rstd``'s gradients ``grad * rstd`` (4 + 4) and ``grad * x`` (8 + 4) with the reduction to rstd's shape (read
4); rsqrt's ``-0.5 * grad * result.pow(3)`` (3 tiny); ``+ eps`` passes the gradient on (no kernel); mean's
``grad.expand(...) / numel`` (write 4: the division materialises the expanded row gradient); pow's
``grad * (2 * x.pow(1))`` (``pow_backward``: ``x.pow(1)`` is a copy, 4 + 4; the scalar product 4 + 4; the product
with the gradient 8 + 4); autograd's sum of the two gradients reaching the fp32 ``x`` (8 + 4); ``float()``'s
backward, the cast back (4 + a): 76 + 8a bytes per element (92 in bf16, against the fused kernel's 3a = 6). In
fp32 (a = 4) the two casts on each side are no-ops (``Tensor.float()`` and ``type_as`` return their input) and
their kernels go.

**Gated activation** (``F.silu(self.w1(x)) * self.w3(x)``), over the N = tokens × ffn elements of its output.
Forward, 2 kernels: ``silu`` (a + a) and the product (2a + a): 5a, against the fused kernel's 3a. Backward, 3
kernels: the product's two gradients ``grad * w3(x)`` and ``grad * silu(w1(x))`` (2a + a each) and
``silu_backward(grad, w1(x))`` (2a + a): 9a, against the fused kernel's 5a. A plain activation (GeLU, ReLU) is one
ATen kernel each way (``gelu``, ``gelu_backward``): the one pass ``op_cost`` charges, no chain.

**Residual add** (``h = x + attention(...)``): one kernel forward as ``op_cost`` charges; backward autograd passes
the gradient to both operands without a kernel and sums the two gradients reaching the block's input (a kernel of
2a + a), less than ``op_cost``'s one pass (5a): left as charged (an overestimate of a few per cent of a norm's
eager backward). **RoPE** (torchtitan's ``apply_rotary_emb``: ``xq.float()``, the complex product with
``freqs_cis``, ``type_as``; 3 kernels of 6, 8 and 6 bytes per query and key element each way in bf16) has no op in
our graph (``workloads.transformer_block``), so it is not charged: the model stays fast there.

A norm op is taken to be such an RMSNorm: the graph does not say whether a norm is a LayerNorm, which eager
PyTorch runs as one ATen kernel each way (``native_layer_norm``); 'pytorch' describes the Llama-family models it is
written for. Under ``torch.compile`` inductor fuses each chain into one or two kernels: 'pytorch-compile' charges
the one pass, as does an op fused with a neighbour in ``mapping.fusion``.
"""

from __future__ import annotations

from tilewright.engine.ir.ops import Op, OpKind

TINY = 0.0  # a kernel over one value per row: the per-kernel floor alone (module docstring)


def rmsnorm_chain(elem_bytes: float, backward: bool) -> tuple[float, ...]:
    """Bytes per element of each kernel of torchtitan's eager RMSNorm (module docstring), in order. With
    activations in fp32 (``elem_bytes`` ≥ 4) the casts to and from fp32 are no-ops and launch nothing."""
    a = elem_bytes
    cast = a < 4.0
    if backward:
        chain = (a + a, 2 * a + a, a, *((a + 4.0,) if cast else ()), 8.0, 12.0, 4.0, TINY, TINY, TINY, 4.0,
                 8.0, 8.0, 12.0, 12.0, *((4.0 + a,) if cast else ()))
    else:
        chain = (*((a + 4.0,) if cast else ()), 8.0, 4.0, TINY, TINY, 8.0, *((4.0 + a,) if cast else ()), a + a)
    return chain


def gated_activation_chain(elem_bytes: float, backward: bool) -> tuple[float, ...]:
    """Bytes per output element of each kernel of an eager ``silu(w1(x)) * w3(x)`` (module docstring)."""
    a = elem_bytes
    return (3 * a, 3 * a, 3 * a) if backward else (2 * a, 3 * a)


def gated(op: Op) -> bool:
    """A gated MLP's activation op (``workloads.transformer_block``: ``activation`` / ``*_activation`` reading the
    up and gate projections, twice its output's elements)."""
    return (op.kind is OpKind.elementwise and op.name.split(".", 1)[-1].endswith("activation")
            and op.out_elems > 0 and op.in_elems == 2 * op.out_elems)


def eager_chain(op: Op, backward: bool, elem_bytes: float) -> tuple[float, ...] | None:
    """Bytes per output element of each kernel eager PyTorch runs for ``op``'s pass; None when it runs the op
    as the one kernel ``op_cost`` charges (module docstring)."""
    if op.kind is OpKind.norm and op.out_elems > 0:
        return rmsnorm_chain(elem_bytes, backward)
    if gated(op):
        return gated_activation_chain(elem_bytes, backward)
    return None

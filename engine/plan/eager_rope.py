"""Megatron-Core's unfused rotary position embedding: the eager kernels it runs on the query and key heads when
``apply_rope_fusion`` is off (``LlamaSpec.rope_fusion`` False; ``Op.rope_elems`` on the block's qkv op).

Fused, Transformer Engine's ``fused_apply_rotary_pos_emb`` rotates each tensor in one kernel (forward and backward);
that kernel is not costed (a pre-existing gap: one pass over q and k, a few percent of the eager chain below).
Unfused, ``megatron/core/models/common/embeddings/rope_utils.py`` (NVIDIA/Megatron-LM, the copies read 2025-2026)
runs ``_apply_rotary_pos_emb_bshd`` once for the query and once for the key, each as eager PyTorch::

    t, t_pass = t[..., :rot_dim], t[..., rot_dim:]
    cos_ = (torch.cos(freqs) * mscale).to(t.dtype)
    sin_ = (torch.sin(freqs) * mscale).to(t.dtype)
    t = (t * cos_) + (_rotate_half(t, rotary_interleaved) * sin_)   # _rotate_half: chunk, -x2, cat((-x2, x1))
    return torch.cat((t, t_pass), dim=-1)

Per tensor of T bytes (its elements on the rank at the activations' width), forward: six kernels over the
frequencies (cos, the scale, the cast; sin, the scale, the cast: [s, 1, 1, d] fp32, negligible bytes, each its
floor), then ``t * cos_`` (reads T, writes T), the negation of one half (T/2 and T/2), the rotated concatenation
(T and T), ``· sin_`` (T and T), the sum (2T and T) and the final concatenation with the empty ``t_pass`` (T and
T): 12 kernels, 12 T. Backward (autograd; ``freqs`` needs no gradient): ``grad · sin_`` (2T), the negation's
(T), ``chunk``'s concatenation of the halves' gradients (2T), ``grad · cos_`` (2T), the two uses of ``t`` summed
(3T), then the slices' backward (PyTorch's ``slice_backward``: zeros of the input's shape and a copy into the
slice): for ``t`` zeros (T) and the copy (2T), for the empty ``t_pass`` zeros (T; its copy is empty), and their sum
(3T): 9 kernels, 17 T. Each kernel pays its launch on the host and its floor on the device (``PassBuilder``).

Megatron-Core turns the fusion off itself where it cannot apply it: for YaRN's attention scaling (NVIDIA/Megatron-LM
pull request #2038, "disable rope fusion when mscale is used", merged 2025-10-29), and Megatron-Bridge's
``validate_rope_fusion_compatibility`` (``src/megatron/bridge/utils/fusions.py``) for a position embedding other
than plain 'rope' in its earlier copies. Multi-latent attention's rotary part is not counted here.
"""

from __future__ import annotations

FREQ_KERNELS = 6  # cos, scale, cast; sin, scale, cast over the [s, 1, 1, d] frequencies: floors only
FORWARD_PASSES = (2.0, 1.0, 2.0, 2.0, 3.0, 2.0)  # × T: t·cos, −x2, cat, ·sin, sum, cat with t_pass
BACKWARD_PASSES = (2.0, 1.0, 2.0, 2.0, 3.0, 1.0, 2.0, 1.0, 3.0)  # module docstring, in autograd's order


def rope_kernels(tensor_bytes: tuple[float, ...], backward: bool) -> tuple[float, ...]:
    """Bytes each eager kernel of the unfused RoPE streams in one pass (0: a floor only), over the rotated
    tensors' bytes on the rank (``tensor_bytes``: the query's and the key's)."""
    out: list[float] = []
    for t in tensor_bytes:
        if t <= 0:
            continue
        if backward:
            out.extend(p * t for p in BACKWARD_PASSES)
        else:
            out.extend([0.0] * FREQ_KERNELS)
            out.extend(p * t for p in FORWARD_PASSES)
    return tuple(out)

"""Materialised (unfused) attention on A100: our op costs beside the FlashAttention paper's standard-attention runs.

Why: Megatron-LM of the SC'21 era (and Megatron-DeepSpeed) runs attention unfused — QKᵀ (``baddbmm``), a masked
softmax, dropout and PV (``bmm``) — whose memory-bound passes over the b·a·s² score tensor are a large share of a
small GPT's layer (their bytes grow with a·s² while the GEMMs' FLOPs grow with h²·s). The engine prices them as the
``attention`` op (its batched GEMMs and score passes, ``perf.op_cost.attention_kernels``, ``plan.costed_op``), the
``softmax`` op and the ``attention_dropout`` op (``perf.dropout``). This puts those prices, taken from the engine's
own GPT graph and ``op_time`` (the path every plan takes), next to measured runtimes of the same computation.

Data: Dao et al., "FlashAttention: Fast and Memory-Efficient Exact Attention with IO-Awareness" (arXiv 2205.14135v2),
Appendix E.6, "PyTorch Attention" rows: fp16, 8 heads of dimension 64, batch 16, on one A100-40GB (HBM2, 1,555 GB/s);
Q, K, V random, no projections; dropout 0.1; runtime the mean of 100 calls of the attention (its forward, its
backward, or both). Transcribed here from Table 18 (forward) and Table 19 (backward) without dropout or masking, and
Table 15 / Table 16 with dropout only; the runs with masking (Tables 9-14) are left out: their padding mask is a
masked_fill kernel of PyTorch's own (46 ms of backward at 4,096 tokens) that no Megatron model runs — Megatron
masks inside its fused softmax. Rows below 1,024 tokens are dominated by the host (0.2-0.4 ms whatever the size) and
are printed only: the kernels' time is what the engine's ``op_time`` gives, without the host's dispatch.

The device: the dgx-a100 preset's GPU with the 40 GB part's HBM bandwidth (1,555 GB/s, the same 0.87 achievable
share and stream ramp), everything else as the preset says.

Reading (when written): dropout's share — the runs with dropout less those without — is priced within 3 % at 2,048
and 4,096 tokens, forward and backward (the mask's byte each way, ``perf.dropout``; the forward's Philox rate,
``Compute.dropout_forward_efficiency``, is read off these same two tables, the backward is independent). The rest of
the attention core — the batched GEMMs and PyTorch's softmax — is priced 22-24 % fast forward and 33-35 % fast
backward at 2,048-4,096 tokens (1.0 and 0.89 TB/s achieved against our 1.35): no public per-kernel breakdown
separates the GEMMs from the softmax there, so it is reported, not mended. Megatron's own rows say where to look
for Megatron's runs: its fused masked softmax makes the forward 1.5 ms slower than its torch fallback at 2,048
tokens (5.80 against 4.28 ms; 0.19 ms at 1,024) and the backward 2.4 ms faster (6.49 against 8.86): our core
without dropout is 43-44 % fast of the fused forward at 1,024-2,048 tokens and 11-23 % fast of its backward.

Which kernel is slow (added after): the Megatron backward with its fused softmax (Table 13) separates the batched
GEMMs. That softmax's backward (megatron/fused_kernels/scaled_masked_softmax.h: one warp per row, registers only,
read dy and the probabilities, write dx) is taken at the plain streaming rate — the rate the same tables show
PyTorch's dropout backward reaching — so the rest of Table 13 is the four gradient GEMMs: 4.11 ms at 2,048 tokens
for bytes the plain rate moves in 3.35 ms, a share of 0.82 (``Compute.attention_bmm_efficiency``, the dgx-a100
preset; 0.66 at 1,024 tokens, host-bound, not used). With the GEMMs at that share, what remains of each measured
row is its softmax, printed as the share of the plain rate it reached: PyTorch's softmax beyond 1,024 columns (its
block kernel, ``cunn_SoftMaxForward``/``Backward``, which re-reads each row through the caches: 3 reads forward, 4
backward) reaches about 0.7 forward and 0.5 backward; Megatron's fused masked forward about 0.5 of its 2.5 passes
(scores, the [b, 1, s, s] byte mask per head, probabilities). Neither is priced: the engine's softmax is Megatron's
fused causal kernel (``perf.score_kernels``), which no row here measures — its forward share stays unseparated.

Head width (added after): does a batched GEMM over the scores slow down as the head it reduces over widens? QKᵀ
(and dP backward) does 2·d FLOPs per score it writes — 128 at d = 64, 256 at d = 128 — so the wider the head, the
nearer the kernel sits to the A100's ridge. xformers' "vanilla" attention forward on one A100 (its benchmark's
``ref_attention``, below) says the FLOPs do not show: at 512 tokens its time is its bytes at one rate, 1.256-1.264
TB/s from a head of 16 to one of 128. From d = 16 to 128 it grows 559 µs, which its added Q, K, V and output bytes
take at d = 16's rate (558 µs); a cost of bytes plus FLOPs (no overlap) would add the 120 GFLOP's 0.48 ms on top.
So the engine's batched GEMMs keep their bytes at their rate with the FLOPs under the max, whatever the head: it
prices each row within 5.3 % and the growth from d = 16 within 1 %. How near the ridge the rows reach: at d = 128
their QKᵀ spends 0.38-0.50 of its memory time on FLOPs at the engine's rates (A100 40 or 80 GB: the table does not
say which), against 0.51 for a 1.7B Megatron model's d = 96 and 0.66 for d = 128 at 2,048 tokens on the 80 GB part:
the 7.5B-and-up models' heads lie beyond what these rows measure.

Usage: python benchmarks/calibrate_attention_a100.py
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from tilewright.engine.io.presets import load_system
from tilewright.engine.ir import DType, GPTSpec
from tilewright.engine.ir.hardware import MemoryKind
from tilewright.engine.ir.ops import Op, OpKind, TensorSplit
from tilewright.engine.perf.device import DeviceModel, device_model
from tilewright.engine.perf.op_cost import op_time
from tilewright.engine.plan.costed_op import as_costed
from tilewright.engine.plan.launch import attention_scores
from tilewright.engine.workloads.transformer import build_gpt

BATCH, HEADS, HEAD_DIM = 16, 8, 64  # the paper's setup (Appendix E.6)
A100_40GB_HBM = 1555e9  # A100-40GB datasheet: HBM2, 1,555 GB/s
ELEM_BYTES = 2.0  # fp16
SEQS = (128, 256, 512, 1024, 2048, 4096)
COMPARED = (2048, 4096)  # kernel-bound sizes: 0.5-10 GB moved per pass (1,024 tokens is 20-40 % host time)
# Tables 18 and 19 (no dropout, no masking), 15 and 16 (dropout): ms by sequence length, "PyTorch Attention" row
MEASURED_MS: dict[tuple[bool, bool], tuple[float, ...]] = {
    (False, False): (0.21, 0.22, 0.43, 1.27, 4.32, 16.47),  # Table 18, forward
    (False, True): (0.26, 0.29, 0.78, 2.44, 8.82, 33.87),  # Table 19, backward
    (True, False): (0.26, 0.24, 0.57, 1.80, 6.56, 25.34),  # Table 15, forward with dropout
    (True, True): (0.44, 0.35, 0.90, 2.94, 10.77, 41.67),  # Table 16, backward with dropout
}
# The "Megatron" rows (its attention core: baddbmm, FusedScaleMaskSoftmax, bmm), 128-2,048 tokens (it supports no
# more). Megatron runs its fused softmax kernel only when given a mask (``is_kernel_available``: mask not None, fp16,
# 16 < sk <= 2048), so the masked runs (Table 12 forward, Table 13 backward) time its fused scaled_masked_softmax and
# the unmasked ones (Tables 18, 19) its torch fallback (scale, torch.softmax). Printed beside our core without
# dropout; not held to a limit (its padding mask, [b, 1, s, s] bytes read by the kernel, is not in our graph).
MEGATRON_SEQS = (128, 256, 512, 1024, 2048)
MEGATRON_MS: dict[tuple[bool, bool], tuple[float, ...]] = {
    (True, False): (0.45, 0.41, 0.43, 1.52, 5.80),  # Table 12, forward, fused softmax
    (True, True): (0.29, 0.31, 0.65, 1.95, 6.49),  # Table 13, backward, fused softmax
    (False, False): (0.24, 0.26, 0.42, 1.33, 4.28),  # Table 18, forward, torch softmax
    (False, True): (0.29, 0.30, 0.80, 2.59, 8.86),  # Table 19, backward, torch softmax
}
# dropout's share priced within this of the measured share at the COMPARED sizes (3 % or less when written)
DROPOUT_LIMIT = 0.10
# the rest of the core (GEMMs and softmax) is priced fast (22-35 % when written); a change that prices it slower
# than measured, or further than this below, fails
CORE_FLOOR = -0.40


@dataclass(frozen=True)
class Priced:
    """Our ms for one sequence length: the attention op (batched GEMMs and their score passes), the softmax and
    the attention dropout, forward and backward."""

    seq: int
    attention: tuple[float, float]
    softmax: tuple[float, float]
    dropout: tuple[float, float]

    def core(self, backward: bool, dropout: bool) -> float:
        i = int(backward)
        return self.attention[i] + self.softmax[i] + (self.dropout[i] if dropout else 0.0)


def device() -> DeviceModel:
    """The dgx-a100 preset's GPU as an A100-40GB: its HBM at 1,555 GB/s, the preset's efficiency and ramp."""
    comp = next(c for _, c in load_system("dgx-a100").walk() if c.compute is not None)
    mems = [m.model_copy(update={"bandwidth_bytes_per_s": A100_40GB_HBM}) if m.kind is MemoryKind.hbm else m
            for m in comp.memories]
    return device_model(comp.compute, mems, None, DType.fp16)


def core_ops(seq: int, head_dim: int = HEAD_DIM) -> dict[str, Op]:
    """The attention core of the engine's own GPT block at the paper's shape (hidden 512 = 8 heads × 64), by name;
    ``head_dim``: another head width, 8 heads of it."""
    graph = build_gpt(GPTSpec(name="fa-bench", layers=1, hidden=HEADS * head_dim, heads=HEADS, seq_len=seq,
                              vocab=1024))
    ops: dict[str, Op] = {}
    for op in graph.ops():
        name = op.name.split(".", 1)[-1]
        if name in ("attention", "softmax", "attention_dropout") and name not in ops:
            ops[name] = op
    return ops


def price(seq: int, dev: DeviceModel) -> Priced:
    """``op_time`` of each core op as a pass prices it (the attention op with its score passes, ``as_costed``),
    for the paper's batch on one GPU, in ms. The paper's runs are unmasked: the softmax reads whole rows, not the
    causal kernel's lower triangle (``Op.causal_keys``), whatever our GPT block says."""
    ops = core_ops(seq)
    ops["softmax"] = ops["softmax"].model_copy(update={"causal_keys": 0})
    att = ops["attention"]
    att = as_costed(att, dev, attention_scores(list(ops.values()))[att.name], (False, False))

    def ms(op: Op) -> tuple[float, float]:
        return tuple(op_time(op, dev, BATCH, 1, False, bwd, ELEM_BYTES).busy_s * 1e3  # type: ignore[return-value]
                     for bwd in (False, True))

    return Priced(seq, ms(att), ms(ops["softmax"]), ms(ops["attention_dropout"]))


def measured(seq: int, dropout: bool, backward: bool) -> float:
    return MEASURED_MS[(dropout, backward)][SEQS.index(seq)]


def dropout_errors(p: Priced) -> tuple[float, float]:
    """(forward, backward) relative error of our dropout price against the measured dropout share."""
    return tuple(p.dropout[int(b)] / (measured(p.seq, True, b) - measured(p.seq, False, b)) - 1.0  # type: ignore
                 for b in (False, True))


def core_errors(p: Priced) -> tuple[float, float]:
    """(forward, backward) relative error of the GEMMs and softmax without dropout (Tables 18, 19)."""
    return tuple(p.core(b, False) / measured(p.seq, False, b) - 1.0 for b in (False, True))  # type: ignore


# Megatron's fused softmax forward with a padding mask: the scores read, the [b, 1, s, s] byte mask read for each
# head (megatron/fused_kernels/scaled_masked_softmax.h: ``mask + ...`` per (batch, head) row), probabilities written
MASKED_FORWARD_PASSES = 1.0 + 0.5 + 1.0


def plain_passes(seq: int, dev: DeviceModel, passes: float) -> float:
    """ms for ``passes`` reads or writes of the paper's fp16 score tensor at the plain streaming rate."""
    return passes * BATCH * HEADS * seq * seq * ELEM_BYTES / dev.dram_bandwidth * 1e3


def gemm_ms(seq: int, dev: DeviceModel, backward: bool) -> float:
    """Our price of the attention op's batched GEMMs (``attention_kernels``) at the device's own rate for them."""
    return price(seq, dev).attention[int(backward)]


def plain_device(dev: DeviceModel) -> DeviceModel:
    """``dev`` with its batched GEMMs at the plain streaming rate (no ``attention_bmm_efficiency``)."""
    return dataclasses.replace(dev, compute=dev.compute.model_copy(update={"attention_bmm_efficiency": None}))


def implied_bmm_share(seq: int, dev: DeviceModel) -> float:
    """The batched GEMMs' share of the plain rate read off Table 13 (Megatron backward, fused softmax): the
    measured time less our softmax backward at the plain rate is the GEMMs'; their bytes at the plain rate (our
    price without the share, less its kernels' fixed fills) over that."""
    plain = plain_device(dev)
    ops = core_ops(seq)
    att = as_costed(ops["attention"], plain, attention_scores(list(ops.values()))[ops["attention"].name],
                    (False, False))
    t = op_time(att, plain, BATCH, 1, False, True, ELEM_BYTES)
    soft = price(seq, plain).softmax[1]
    measured_gemms = MEGATRON_MS[(True, True)][MEGATRON_SEQS.index(seq)] - soft
    return t.memory_s * 1e3 / (measured_gemms - t.overhead_s * 1e3)


def softmax_shares(seq: int, dev: DeviceModel) -> dict[str, float]:
    """What the measured rows leave for their softmax once the GEMMs take our price, as the share of the plain
    rate it reached (its passes at that rate over the time left): PyTorch's softmax forward (2 passes) and backward
    (3), Megatron's fused masked forward (``MASKED_FORWARD_PASSES``) where the paper ran it."""
    out = {}
    for b, label in ((False, "torch fwd"), (True, "torch bwd")):
        left = measured(seq, False, b) - gemm_ms(seq, dev, b)
        out[label] = plain_passes(seq, dev, 3.0 if b else 2.0) / left
    if seq in MEGATRON_SEQS:
        left = MEGATRON_MS[(True, False)][MEGATRON_SEQS.index(seq)] - gemm_ms(seq, dev, False)
        out["fused masked fwd"] = plain_passes(seq, dev, MASKED_FORWARD_PASSES) / left
    return out


# xformers' "vanilla" attention forward on one A100 (facebookresearch/xformers PR #386, "AttnForward: don't split the
# code in multiple funcs", its "A100" table, September 2022; PRs #387 and #388 repeat the same vanilla column):
# xformers/benchmarks/benchmark_mem_eff_attention.py's ``ref_attention`` — q scaled (an elementwise kernel), q @ kᵀ
# (bmm), PyTorch's softmax, @ v (bmm); no mask, no dropout; fp16 q, k, v of [B, M, K], B = 1,024 products (batch ×
# heads), torch.utils.benchmark, µs by head width K at M = 512 tokens (kernel-bound: 2-3 GB moved).
XFORMERS_PRODUCTS, XFORMERS_SEQ = 1024, 512
XFORMERS_FWD_US: dict[int, float] = {16: 1781.5, 32: 1858.3, 64: 2030.2, 128: 2340.9}
# our price of each row within this of the measured one, and of its growth from the narrowest head (5.3 % and
# 0.7 % when written)
HEAD_DIM_LIMIT = 0.10
HEAD_DIM_GROWTH_LIMIT = 0.03


def vanilla_bytes(seq: int, head_dim: int) -> float:
    """Bytes ``ref_attention``'s forward kernels move, counted from its code (not the engine's): the scale reads and
    writes q; QKᵀ reads q and k and writes the scores; the softmax reads them and writes the probabilities; PV reads
    those and v and writes the output — 4 passes over the scores and 6 over a [B, M, K] tensor."""
    return (4 * seq * seq + 6 * seq * head_dim) * XFORMERS_PRODUCTS * ELEM_BYTES


def vanilla_forward_us(seq: int, head_dim: int, dev: DeviceModel) -> float:
    """Our µs for ``ref_attention``'s forward: the engine's attention op (its batched GEMMs and score passes) and a
    whole-row softmax at 8 heads of ``head_dim``, for 1,024 products, and the scale's elementwise pass over q."""
    ops = core_ops(seq, head_dim)
    softmax = ops["softmax"].model_copy(update={"causal_keys": 0})
    att = as_costed(ops["attention"], dev, attention_scores(list(ops.values()))[ops["attention"].name],
                    (False, False))
    q = seq * HEADS * head_dim
    scale = Op(name="0.q_scale", layer=0, kind=OpKind.elementwise, split=TensorSplit.heads, flops=q, in_elems=q,
               out_elems=q)
    batch = XFORMERS_PRODUCTS // HEADS
    return sum(op_time(op, dev, batch, 1, False, False, ELEM_BYTES).busy_s for op in (att, softmax, scale)) * 1e6


def head_dim_rows(dev: DeviceModel) -> list[tuple[int, float, float, float]]:
    """(head width, measured µs, its bytes' rate in TB/s, our µs) of each xformers row."""
    return [(k, us, vanilla_bytes(XFORMERS_SEQ, k) / us / 1e6, vanilla_forward_us(XFORMERS_SEQ, k, dev))
            for k, us in XFORMERS_FWD_US.items()]


def main() -> None:
    dev = device()
    print(f"A100-40GB as priced: {dev.dram_bandwidth / 1e9:.0f} GB/s achievable; batch {BATCH}, {HEADS} heads of "
          f"{HEAD_DIM}, fp16 (FlashAttention paper, Appendix E.6)")
    print(f"{'seq':>5} {'pass':>4} | {'att':>6} {'softmax':>7} {'drop':>6} | {'core':>6} {'meas':>6} {'err':>6} | "
          f"{'+drop':>6} {'meas':>6} {'err':>6} | {'drop':>5} {'meas':>5} {'err':>6}")
    for seq in SEQS:
        p = price(seq, dev)
        for b, label in ((False, "fwd"), (True, "bwd")):
            i = int(b)
            core, drop = p.core(b, False), p.core(b, True)
            m0, m1 = measured(seq, False, b), measured(seq, True, b)
            share = m1 - m0
            share_err = f"{p.dropout[i] / share - 1:+6.0%}" if share > 0 else "   n/a"
            mark = "  (host-bound)" if seq < 1024 else ""
            print(f"{seq:5d} {label:>4} | {p.attention[i]:6.2f} {p.softmax[i]:7.2f} {p.dropout[i]:6.2f} | {core:6.2f} "
                  f"{m0:6.2f} {core / m0 - 1:+6.0%} | {drop:6.2f} {m1:6.2f} {drop / m1 - 1:+6.0%} | "
                  f"{p.dropout[i]:5.2f} {share:5.2f} {share_err}{mark}")
    print("Megatron's attention core without dropout (fused: its masked softmax kernel; torch: its fallback):")
    print(f"{'seq':>5} {'pass':>4} | {'ours':>6} | {'fused':>6} {'err':>6} | {'torch':>6} {'err':>6}")
    for seq in MEGATRON_SEQS[3:]:
        p = price(seq, dev)
        for b, label in ((False, "fwd"), (True, "bwd")):
            ours = p.core(b, False)
            fused, torch = (MEGATRON_MS[(m, b)][MEGATRON_SEQS.index(seq)] for m in (True, False))
            print(f"{seq:5d} {label:>4} | {ours:6.2f} | {fused:6.2f} {ours / fused - 1:+6.0%} | {torch:6.2f} "
                  f"{ours / torch - 1:+6.0%}")
    share = dev.compute.attention_bmm_efficiency
    print(f"batched GEMMs' share of the plain rate read off Table 13 (Megatron backward, fused softmax at the plain "
          f"rate); the preset's: {share}")
    for seq in MEGATRON_SEQS[3:]:
        print(f"{seq:5d}: {implied_bmm_share(seq, dev):.3f}" + ("  (host-bound)" if seq < 2048 else ""))
    print("softmax share of the plain rate left by each measured row once the GEMMs take our price:")
    for seq in COMPARED:
        print(f"{seq:5d}: " + ", ".join(f"{k} {v:.2f}" for k, v in softmax_shares(seq, dev).items()))
    print(f"head width: xformers' vanilla forward, {XFORMERS_PRODUCTS} products of {XFORMERS_SEQ} tokens (its bytes' "
          f"rate; growth: µs over the narrowest head's)")
    print(f"{'K':>5} | {'meas':>7} {'TB/s':>6} {'ours':>7} {'err':>6} | {'growth':>6} {'ours':>6}")
    rows = head_dim_rows(dev)
    _, base_us, _, base_ours = rows[0]
    for k, us, rate, ours in rows:
        print(f"{k:5d} | {us:7.1f} {rate:6.3f} {ours:7.1f} {ours / us - 1:+6.1%} | {us / base_us:6.3f} "
              f"{ours / base_ours:6.3f}")


if __name__ == "__main__":
    main()

"""The SMs a GPU collective takes from the compute it runs beside.

An NCCL collective is a kernel of one CTA per channel (NVIDIA/nccl ``ncclLaunchKernel``, ``src/enqueue.cc``:
``grid = {nChannels, 1, 1}``, the channels of the launch's plan; ``NCCL_MIN_NCHANNELS``/``NCCL_MAX_NCHANNELS``
bound them), and each CTA holds an SM of its own for the
collective's whole run: "NCCL CTAs won't share an SM with compute kernels" (S. Jeaugey, NCCL maintainer,
NVIDIA/nccl issue #689, 2023; NCCL needs all of an SM's registers). A GEMM, an attention kernel or the
elementwise kernels that run beside it meanwhile have ``units − sms`` SMs: the compute over the overlapped window
progresses at ``(units − sms) / units`` of its rate. How many channels: 24 on an 8-GPU NVSwitch node of A100s
(NCCL's ring channels "Channel 00/24 … 23/24" on an HGX A100, NVIDIA/nccl-tests issue #100) and of H100s
("24 coll channels" in NCCL's INFO log on a p5.48xlarge, 8 × H100 SXM; a ``ncclAllGather`` of FSDP's prefetch
launches 24 blocks beside a 132-block GEMM on an H100, NVIDIA developer forum, 'Compute-communication overlap
causes severe GEMM performance degradation because of tail effect', 2025): ``Compute.collective_sms``.

The model, for a collective of ``T`` seconds (uncontended) beside ``G`` seconds of compute (alone): while it runs
the compute advances at (u − c) / u, so the compute that would have taken ``G`` takes ``G′ = G · u / (u − c)``
if the collective lasts the whole of it (``stretched``, the formula ``plan.tp_overlap`` uses for the SMs its
pipelined reduce-scatter sets aside). The overlapped window is ``min(T, G′)``; the compute loses ``c / u`` of
it (``beside``: ``min(T, G′) · c / u``, which is ``G′ − G`` when the collective outlasts the compute), and what
of the collective outlasts ``G′`` shows. The collective's own time is taken as uncontended.

What the SM count leaves out, all of which make real overlap cost more, never less: wave quantization (a
GEMM of exactly one wave of tiles, 132 on an H100, needs a second wave once 24 SMs are gone: its time nearly
doubles in the forum post above); the HBM bandwidth the collective's copies take from a memory-bound kernel
(NVIDIA/nccl issue #1428: an A100's attention kernel 0.18 → 0.33 ms and a GEMM 1.18 → 2.08 ms beside an
all-gather, the maintainer pointing at memory bandwidth); fewer channels for small messages (NCCL drops
channels while the bytes are below channels × threads × a per-protocol threshold, issue #1216) and more for
send/recv (``32 p2p channels`` in the same H100 log) — the collective's own CTAs are counted as the
collective channels whatever its kind.
"""

from __future__ import annotations


def stretched(compute_s: float, units: int | None, sms: int | None) -> float:
    """Seconds ``compute_s`` of kernels take on ``units − sms`` of a GPU's ``units`` SMs (unchanged when
    either is unknown or the collective would leave no SM)."""
    if not units or not sms or units <= sms or compute_s <= 0:
        return compute_s
    return compute_s * units / (units - sms)


def beside(comm_s: float, compute_s: float, units: int | None, sms: int | None) -> tuple[float, float]:
    """(seconds the compute loses, seconds of the collective left showing) of a collective of ``comm_s``
    beside ``compute_s`` of compute that lose ``sms`` of ``units`` SMs while it runs (module docstring)."""
    cover = stretched(compute_s, units, sms)
    if comm_s <= 0:
        return 0.0, 0.0
    slower = min(comm_s, cover) * sms / units if cover > compute_s else 0.0  # type: ignore[operator]
    return slower, max(0.0, comm_s - cover)

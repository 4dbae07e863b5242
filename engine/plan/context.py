"""Context parallelism (ring attention; Liu et al. 2023, Megatron-LM's ``--context-parallel-size``).

Each sequence is split over ``cp`` ranks: every rank runs every layer on s/cp of the tokens, so all
token-proportional work and memory — GEMM rows, activations, attention's queries — divide by cp, while
weights are whole on every rank (their gradients are reduced over dp × cp).

**The ring.** Attention needs every key: the ranks pass their K and V blocks around a ring. Megatron-Core runs
context parallelism only through Transformer Engine (its own ``DotProductAttention`` asserts
``context_parallel_size == 1``), whose ``AttnFuncWithCPAndKVP2P`` (``cp_comm_type`` 'p2p', the default) works in
cp steps, each the fused attention of the block in hand while the next block travels to the ring neighbour
(``flash_attn_p2p_communicate``: a send to rank + 1 and a receive from rank − 1):

- forward: steps 0 … cp − 2 each send one K/V block — 2 × (tokens / cp) × kv heads × head size elements, per
  tensor rank kv heads / tp of them; the last step sends nothing;
- backward: the same K/V blocks go round again and each block's gradient dK/dV (the same size, in the same
  dtype: ``p2p_comm_buffers`` hold [kv, dkv]) follows them, accumulated rank by rank: step 0 sends K/V, steps
  1 … cp − 2 send K/V and dK/dV, the last step dK/dV alone — (cp − 1) blocks of each.

Each step's sends overlap that step's attention kernel, so a step shows only what its transfer takes beyond
1 / cp of the op's attention time (causal attention is load-balanced over the ranks, Transformer Engine's two
chunks per rank, so every step computes the same share), that share stretched by the SMs the step's
send/receive kernel holds meanwhile, which the attention kernel loses (``perf.comm_sm``, ``ContextComm.slowed``:
the pass charges the loss to the attention op's segment). The exposed seconds are charged as the ring carrying
that fraction of its bytes (kind ``cp:ring``, as ``plan.sharding`` charges what overlap leaves), reported as
``cp_comm``; the rest of the bytes cross the same links behind the attention kernel (``Segment.hidden``): the
engines draw them on the links and count their energy, and no one waits for them.

**Flash kernels.** Ring attention is blockwise attention (each step's kernel folds one K/V block into a running
softmax): the s × s scores are never materialised, so with cp > 1 every attention core runs as one fused
kernel whether or not ``mapping.fusion`` says so (``flash_fused``).

**PyTorch's ring** (``torch_ring``): the plain-PyTorch frameworks ('pytorch', 'pytorch-compile': torchtitan) run
``torch.distributed.tensor.experimental.context_parallel`` instead — K/V repeated to every query head, gathered
in one all-gather hidden by step 0's kernel alone, dK/dV passed round the ring in fp32 with the last send
exposed, the later steps' unmasked kernels at their own rate, fp32 merges and accumulators streamed beside the
attention (``plan.torch_ring``). ``ContextComm.torch_ring`` selects it; the Megatron frameworks keep the ring above.

Placement: cp ranks sit next to the tensor ranks (Megatron's order tp, cp, dp, pp), so a ring stays
inside a node while tp × cp fits one. The plan sees dp × cp replicas of each stage's tensor group: replica
``d·cp + c`` is context rank c of data-parallel replica d.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from tilewright.engine.ir.hardware import Compute
from tilewright.engine.ir.ops import Op, OpKind
from tilewright.engine.perf.comm_sm import beside, stretched
from tilewright.engine.plan import torch_ring
from tilewright.engine.plan.sharding import CP_PREFIX

RING = CP_PREFIX + "ring"  # every rank sends one block to its ring neighbour (``group_comm.cp_group_collective``)


def kv_block_bytes(op: Op, micro_batch: float, tp: int, elem_bytes: float) -> float:
    """Bytes of one rank's K and V block, per tensor rank: K and V are the attention op's input beyond its
    queries (``in_elems − out_elems`` per sample: 2 × seq × kv heads × head size), of the ``micro_batch``
    samples' worth of tokens one rank holds (mapping.micro_batch / cp), over ``tp``."""
    return max(op.in_elems - op.out_elems, 0.0) * micro_batch * elem_bytes / tp


def ring_steps(cp: int, backward: bool) -> list[float]:
    """Blocks each rank sends at each of the cp steps of one attention op (module docstring)."""
    if cp <= 1:
        return []
    if not backward:
        return [1.0] * (cp - 1) + [0.0]
    return [1.0] + [2.0] * (cp - 2) + [1.0]


def ring_calls(cp: int, backward: bool) -> int:
    """Send/receive calls of one attention op's ring on each rank: one per step that moves a block (Transformer
    Engine issues each step's exchange from Python, hidden or not): cp − 1 forward, cp backward."""
    return sum(1 for n in ring_steps(cp, backward) if n)


@dataclass(frozen=True)
class ContextComm:
    """The ring exchange of one stage's attention layers."""

    cp: int
    seconds: Callable[[str, float], float]  # uncontended time of a ``cp:`` collective of that many bytes
    torch_ring: bool = False  # PyTorch's context_parallel (``plan.torch_ring``) instead of Transformer Engine's

    def exchange(
        self, op: Op, micro_batch: float, tp: int, elem_bytes: float, backward: bool, attention_s: float,
        units: int | None = None, sms: int | None = None, ratio: float = 1.0,
    ) -> tuple[list[tuple[str, float]], tuple[tuple[str, float], ...]]:
        """One attention op's ring, per tensor rank: (the exposed part as segment collectives, the hidden
        part behind the kernel) as (kind, bytes). ``micro_batch``: samples' worth of tokens per rank;
        ``attention_s``: the op's kernel time, 1 / cp of it beside each step; ``units``, ``sms``: the GPU's SMs
        and those each step's send/receive kernel holds, the attention step stretched by them (``slowed``);
        ``ratio``: PyTorch's ring's unmasked steps' kernel time over a causal step's (``unmasked_ratio``)."""
        if self.torch_ring:
            return self._torch_exchange(op, micro_batch, tp, elem_bytes, backward, attention_s, units, sms, ratio)
        block = kv_block_bytes(op, micro_batch, tp, elem_bytes)
        steps = ring_steps(self.cp, backward)
        total = block * sum(steps)
        if total <= 0:
            return [], ()
        per_step = stretched(attention_s / self.cp, units, sms)
        times = self._times(block, steps)
        busy = sum(times)
        shown = sum(max(0.0, t - per_step) for t in times)
        exposed = total * shown / busy if busy > 0 else 0.0
        hidden = total - exposed
        return ([(RING, exposed)] if exposed > 0 else []), (((RING, hidden),) if hidden > 0 else ())

    def slowed(
        self, op: Op, micro_batch: float, tp: int, elem_bytes: float, backward: bool, attention_s: float,
        units: int | None, sms: int | None, ratio: float = 1.0,
    ) -> float:
        """Seconds the attention kernel loses to the SMs each step's send/receive kernel holds beside its
        1 / cp share of it (``perf.comm_sm.beside``, step by step); 0 without a ring or an SM count. PyTorch's
        ring: each exchange beside the kernel it overlaps (``torch_ring.transfers``)."""
        if self.torch_ring:
            return sum(beside(t, k, units, sms)[0] for t, k, _ in self._torch_times(
                op, micro_batch, tp, elem_bytes, backward, attention_s, ratio))
        block = kv_block_bytes(op, micro_batch, tp, elem_bytes)
        per_step = attention_s / self.cp
        return sum(beside(t, per_step, units, sms)[0] for t in self._times(block, ring_steps(self.cp, backward)))

    def calls(self, backward: bool) -> int:
        """The ring's collective calls per attention op on each rank (``ring_calls``, ``torch_ring.calls``)."""
        return torch_ring.calls(self.cp, backward) if self.torch_ring else ring_calls(self.cp, backward)

    def unmasked_ratio(self, op: Op, backward: bool, compute: Compute, sdpa: bool) -> float:
        """PyTorch's ring: an unmasked step's kernel seconds over a causal step's, for an op costed under a causal
        mask (a training graph's attention with ``fused_flops``, as ``op_cost`` reads it); 1 otherwise and for
        Transformer Engine's ring (its per-step kernels are not separated)."""
        if not self.torch_ring or op.fused_flops is None:
            return 1.0
        return torch_ring.unmasked_ratio(compute, backward, sdpa)

    def unmasked_saving(self, attention_s: float, ratio: float) -> float:
        """Seconds the cp − 1 unmasked steps save over the op's causal-rate time ``attention_s``."""
        return attention_s * (self.cp - 1) / self.cp * (1.0 - ratio)

    def stream_bytes(self, op: Op, micro_batch: float, tp: int, backward: bool) -> float:
        """Bytes PyTorch's ring merges and accumulates through device memory (``torch_ring.stream_bytes``); 0 for
        Transformer Engine's, whose kernels merge on chip."""
        return torch_ring.stream_bytes(op, micro_batch, tp, self.cp, backward) if self.torch_ring else 0.0

    def _torch_times(
        self, op: Op, micro_batch: float, tp: int, elem_bytes: float, backward: bool, attention_s: float, ratio: float,
    ) -> list[tuple[float, float, tuple[str, float]]]:
        """PyTorch's ring: each exchange as (its uncontended seconds, the kernel seconds beside it, (kind,
        bytes))."""
        block = torch_ring.expanded_block_bytes(op, micro_batch, tp, elem_bytes)
        kernels = torch_ring.step_kernels(attention_s, self.cp, ratio)
        return [(self.seconds(kind, n), k, (kind, n))
                for kind, n, k in torch_ring.transfers(self.cp, block, elem_bytes, backward, kernels)]

    def _torch_exchange(
        self, op: Op, micro_batch: float, tp: int, elem_bytes: float, backward: bool, attention_s: float,
        units: int | None, sms: int | None, ratio: float,
    ) -> tuple[list[tuple[str, float]], tuple[tuple[str, float], ...]]:
        """``exchange`` for PyTorch's ring: each collective shows what it takes beyond the kernel beside it
        (stretched by the SMs it holds), charged as that fraction of its bytes; the rest hidden."""
        exposed: list[tuple[str, float]] = []
        hidden: list[tuple[str, float]] = []
        for t, k, (kind, n) in self._torch_times(op, micro_batch, tp, elem_bytes, backward, attention_s, ratio):
            shown = beside(t, k, units, sms)[1] if k > 0 else t
            part = n * shown / t if t > 0 else 0.0
            if part > 0:
                exposed.append((kind, part))
            if n - part > 0:
                hidden.append((kind, n - part))
        return exposed, tuple(hidden)

    def _times(self, block: float, steps: list[float]) -> list[float]:
        """Each step's transfer time, uncontended (a step that sends nothing takes none)."""
        return [self.seconds(RING, n * block) if n and block > 0 else 0.0 for n in steps]


def flash_fused(layers: Iterable[list[Op]], cp: int, fused: frozenset[tuple[str, str]] = frozenset()
                ) -> frozenset[tuple[str, str]]:
    """The (producer, consumer) edges, by op name within the layer, that put an attention core in one fused
    kernel: the attention op and the selective ops chained after it (softmax, attention dropout), as
    ``mapping.fusion`` [attention, softmax, attention_dropout] would. Every core under context parallelism (module
    docstring, "Flash kernels"), and at cp 1 each core whose attention → softmax edge ``fused`` (the mapping's
    chains) already holds: that is a flash kernel, and FlashAttention applies the attention dropout inside it,
    drawing the mask in registers and storing only the random generator's state (Dao et al., 'FlashAttention',
    arXiv 2205.14135, Algorithm 2 and §3.1; FlashAttention-2 and cuDNN's fused attention alike), so no s² mask
    nor dropped scores reach memory. Empty where no core is fused."""
    edges: set[tuple[str, str]] = set()
    for ops in layers:
        for i, op in enumerate(ops):
            if op.kind is not OpKind.attention or op.cache_elems:
                continue
            if cp <= 1 and not (i + 1 < len(ops) and (_local(op), _local(ops[i + 1])) in fused):
                continue
            prev = op
            for nxt in ops[i + 1:]:
                if not nxt.selective:
                    break
                edges.add((_local(prev), _local(nxt)))
                prev = nxt
    return frozenset(edges)


def _local(op: Op) -> str:
    return op.name.split(".", 1)[-1]

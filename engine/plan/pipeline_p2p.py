"""How a training pipeline's sends run, by the framework that runs them (``mapping.pipeline_p2p``).

Two mechanisms of Megatron-LM's pipelines that the uncontended recurrence (``plan.recurrence``) would otherwise
miss, read from NVIDIA/Megatron-LM:

- **Blocking sends.** ``megatron/p2p_communication.py`` ``_communicate`` (v2.x–v3.0, e.g. commit
  46c74b4ca06a7794db1e2615544095535cdf12c2) builds ``P2POp`` s, calls ``torch.distributed.batch_isend_irecv``,
  ``wait()`` s on every request and then ``torch.cuda.synchronize()``; 1F1B's steady state
  (``megatron/schedules.py`` ``forward_backward_pipelining_without_interleaving``, e.g. commit
  1c3a1e6a09e198bd25dced268583ba538ad0f13a) calls ``send_forward_recv_backward`` after each forward and
  ``send_backward_recv_forward`` after each backward, the warm-up ``send_forward`` and the cool-down
  ``send_backward``: the stage computes nothing while its send is in flight, and the send and the receive of one
  call complete together. In the recurrence each pass that sends is lengthened by its send, which arrives as
  the pass's stage is free again; in steady state (every send paired with the receive of the stage's next
  input) that is the exchange exactly, when both directions take equally long. Left out: the rendezvous of the
  warm-up's and cool-down's lone sends with a receiver that posts its receive late, and a serialisation of the
  send and the receive inside one NCCL group (NVIDIA/apex PR #1616), which would double the exchange.
  Megatron-Core keeps the wait for non-interleaved 1F1B (``megatron/core/pipeline_parallel/
  p2p_communication.py`` ``_communicate(..., wait_on_reqs=True)``, then ``torch.cuda.synchronize()`` while
  ``batch_p2p_comm and batch_p2p_sync``, e.g. commit 2fd6e2b74efca73a1f2d27b89bb5419384b4d3bf; the training loop
  passes ``batch_p2p_comm=not args.overlap_p2p_comm``, and ``arguments.py`` turns ``overlap_p2p_comm`` off
  without interleaving); only the interleaved schedule with ``--overlap-p2p-comm`` posts its sends and receives
  and waits for them just before the pass that needs them (``wait_on_reqs=False``): the sender computes on —
  the recurrence's behaviour without blocking.
- **All-gather after each receive.** With ``--scatter-gather-tensors-in-pipeline`` (on by default:
  ``--no-scatter-gather-tensors-in-pipeline`` is ``store_false``, ``megatron/arguments.py``) every tensor rank
  sends 1/tp of the activation (``split_tensor_into_1d_equal_chunks``) and, after the synchronize, the receiver
  rebuilds it with ``gather_split_1d_tensor`` (``megatron/mpu/random.py`` in v2.x): one ``all_gather`` of the
  whole activation (micro-batch × sequence × hidden elements) over the tensor group per received tensor — a
  forward's input and a backward's output gradient. Megatron-LM's versions with sequence parallelism skip it
  under ``--sequence-parallel`` (``args.scatter_gather_tensors_in_pipeline and not args.sequence_parallel``: each
  rank's tensor is already 1/tp of the sequence); Megatron-Core's ``_communicate`` has no scatter-gather. The
  schedule's timer around the call (``forward-send-backward-recv`` and the like) stops with a
  ``torch.cuda.synchronize()`` that now drains the queued all-gather: one more drain (``plan.train_step``)
  beside the all-gather call's host time, charged with the all-gather at the head of the pass that consumes
  the tensor. The plan's pipeline sends are 1/tp of the activation per rank already (``plan.plan``), as
  scatter-gather and sequence parallelism make them.

``mapping.pipeline_p2p``: 'overlap' (the sender computes on: Megatron-Core's interleaved schedule with
``--overlap-p2p-comm``, NVIDIA's interleaved recipes), 'blocking' (Megatron-Core's non-interleaved 1F1B),
'megatron-lm' (blocking, and the all-gather after each receive with tp > 1 and no sequence parallelism:
Megatron-LM v2.x–v3.0). Left unset (None) it is 'megatron-lm' for training with full recompute on devices a host
framework drives (GPUs), 'overlap' elsewhere: full recompute stands for ``--checkpoint-activations``, the era
whose host synchronisations ``plan.train_step`` already charges and which the Megatron-LM calibration sets ran
(SC'21 Table 1, vTrain's single- and multi-node runs), while NVIDIA's Megatron-Core recipes recompute
selectively wherever they pipeline, so they keep 'overlap' — exact for their interleaved rows, and for the one
non-interleaved pipelined recipe (gpt-oss-120b, pp 4) a choice left to the recipe: 'blocking' there is Megatron-
Core's behaviour (+0.5 % on its two rows). Inference never blocks here (its sends are a serving runtime's).
"""

from __future__ import annotations

from dataclasses import dataclass

from tilewright.engine.ir.hardware import Compute
from tilewright.engine.ir.mapping import PipelineP2PMode as P2PMode
from tilewright.engine.ir.mapping import Recompute
from tilewright.engine.perf.device import issues_kernels
from tilewright.engine.plan.launch import collective_host_seconds, drain_seconds
from tilewright.engine.plan.pass_records import ChunkPass, Segment

GATHER_LABEL = "pipeline receive all-gather"


@dataclass(frozen=True)
class PipelineP2P:
    """What a training pipeline's sends do beyond their transfer."""

    blocking: bool = False  # the sending stage waits for its send (and the paired receive)
    gather: bool = False  # each received tensor is all-gathered over the tensor group


def p2p_mode(chosen: P2PMode | None, recompute: Recompute, compute: Compute, train: bool) -> P2PMode:
    """``mapping.pipeline_p2p`` resolved (module docstring): the choice, or by the run's era when unset."""
    if chosen is not None:
        return chosen
    if train and recompute is Recompute.full and issues_kernels(compute):
        return "megatron-lm"
    return "overlap"


def pipeline_p2p(chosen: P2PMode | None, recompute: Recompute, compute: Compute, train: bool, tp: int,
                 sequence_parallel: bool) -> PipelineP2P:
    """The mechanisms ``mapping.pipeline_p2p`` turns on for a training run (none for inference)."""
    if not train:
        return PipelineP2P()
    mode = p2p_mode(chosen, recompute, compute, train)
    return PipelineP2P(blocking=mode != "overlap", gather=mode == "megatron-lm" and tp > 1 and not sequence_parallel)


def pass_receives(kind: str, virtual_stage: int, virtual_stages: int) -> int:
    """Received tensors one forward ("F") or backward ("B") pass of a virtual stage consumes: a forward its input
    unless its stage is the first, a backward its output's gradient unless its stage is the last."""
    if kind == "F" and virtual_stage > 0:
        return 1
    if kind == "B" and virtual_stage < virtual_stages - 1:
        return 1
    return 0


def gather_host_seconds(compute: Compute, captured: bool = False) -> float:
    """Host time a gathered receive costs a drained device: the ``all_gather`` call and the timer's drain of it
    (module docstring); none inside a full-iteration CUDA graph."""
    if captured:
        return 0.0
    return collective_host_seconds(compute) + drain_seconds(compute)


def add_receive_gathers(passes: dict[tuple[int, str], ChunkPass], pp: int, rank: int, compute: Compute,
                        received_bytes: dict[int, float]) -> None:
    """Lead each pass of a stage that consumes a received tensor with its all-gather over the tensor group
    (``received_bytes``: per virtual stage sending forward, the whole activation), first: the receive's call
    returns before the pass starts its timers (``plan.train_step.add_drains``, run before this)."""
    if not passes:
        return
    virtual_stages = pp * (1 + max(c for c, _ in passes))
    for (chunk, kind), ps in passes.items():
        vs = chunk * pp + rank
        if not ps.segments or kind == "R" or not pass_receives(kind, vs, virtual_stages):
            continue
        nbytes = received_bytes[vs - 1 if kind == "F" else vs]
        seg = Segment.host_wait(GATHER_LABEL, ps.segments[0].layer, gather_host_seconds(compute, ps.captured))
        seg.comm = ("all-gather", nbytes)
        ps.segments.insert(0, seg)  # the receive's call ends before the pass's own timers and batch


def gather_lead_seconds(compute: Compute, kind: str, virtual_stage: int, virtual_stages: int, gather_s: float,
                        captured: bool = False) -> float:
    """Seconds ``add_receive_gathers`` puts at the head of a pass, for an estimator that sums passes without
    building them (``gather_s``: the all-gather's time, 0 without scatter-gather)."""
    if gather_s <= 0 or not pass_receives(kind, virtual_stage, virtual_stages):
        return 0.0
    return gather_s + gather_host_seconds(compute, captured)


def blocked_stage_fb(stage_fb: list[float], sends: list[float], pp: int) -> list[float]:
    """Per stage, one micro-batch's passes over all its chunks with each send that blocks its sender added
    (``sends[vs]``: from virtual stage vs to vs + 1 and the gradient back): the closed form's stage times."""
    out = list(stage_fb)
    for vs, s in enumerate(sends):
        out[vs % pp] += s  # the forward's send
        out[(vs + 1) % pp] += s  # the backward's send back
    return out


def notes(chosen: P2PMode | None, pipeline: PipelineP2P, pp: int) -> list[str]:
    """The result's word on sends that block when the user did not ask (the default read the run as Megatron-LM's
    ``--checkpoint-activations`` era): what was assumed and how to say otherwise."""
    if chosen is not None or pp < 2 or not pipeline.blocking:
        return []
    gathered = ", each received tensor all-gathered over the tensor group" if pipeline.gather else ""
    return [f"pipeline sends block their stage{gathered} (Megatron-LM v2.x-v3.0, read from full recompute on "
            "GPUs); mapping.pipeline_p2p 'overlap' or 'blocking' for Megatron-Core"]

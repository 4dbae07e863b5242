"""One point of the parallelism search space and its translation into a ``Mapping``."""

from __future__ import annotations

from dataclasses import MISSING, dataclass, fields
from typing import Any, get_args

from tilewright.engine.ir.mapping import Mapping, PlacementStrategy, Recompute, Schedule, tp_axes_for

DISPATCHERS: tuple[str, ...] = get_args(Mapping.model_fields["ep_dispatcher"].annotation)


@dataclass(frozen=True, slots=True)
class Candidate:
    tp: int
    pp: int
    dp: int
    micro_batch: int
    interleave: int = 1
    recompute: Recompute = Recompute.none
    sequence_parallel: bool = False
    zero: int = 0
    placement: PlacementStrategy = PlacementStrategy.row_major
    rank_order: str = "tp-dp-pp"
    # the dimensions ``extended`` explores, each timed by the plan and the analytic engine
    ep: int = 1  # expert parallelism (MoE): routed experts over ep of the dp replicas
    expert_tp: int | None = None  # routed experts' tensor parallelism (None: tp; 1: ep folded over tp × dp)
    cp: int = 1  # context parallelism: each sequence over cp ranks, devices tp·pp·dp·cp
    fsdp: bool = False  # FSDP FULL_SHARD (zero 3 with prefetch)
    offload: str | None = None  # host memory holding the optimizer state (mapping.memory_levels)
    overlap_grad_reduce: bool = False  # reduce gradients in buckets under the last backward (Megatron)
    overlap_ep: bool = False  # hide the experts' all-to-all behind another micro-batch's compute (DualPipe)
    delay_wgrad: bool = False  # with overlap_ep: weight gradients hide the backward's too (mapping.delay_wgrad_compute)
    dispatcher: str = "alltoall"  # MoE token exchange (mapping.ep_dispatcher): flat, or 'deepep' node by node
    overlap_tp: bool = False  # tensor-parallel collectives pipelined with their GEMMs (mapping.overlap_tp_comm)
    # what selective recomputation re-runs (mapping.recompute_modules; None: Megatron-Core's default, core_attn)
    recompute_modules: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        """Coerce ``recompute`` and ``placement`` given as their names ("full", "row-major") to the enums, as
        ``Mapping`` does: the evaluator compares them by identity (``Recompute.full``; ``placement_order``
        falls through to snake for anything but ``PlacementStrategy.row_major``/``block``), so a candidate
        spelled with strings was timed with no recomputation on snake groups while its mapping ran the named
        ones — a disagreement with the engine that came from the spelling alone."""
        if not isinstance(self.recompute, Recompute):
            object.__setattr__(self, "recompute", Recompute(self.recompute))
        if not isinstance(self.placement, PlacementStrategy):
            object.__setattr__(self, "placement", PlacementStrategy(self.placement))

    @property
    def devices(self) -> int:
        return self.tp * self.pp * self.dp * self.cp

    @property
    def extended(self) -> bool:
        """Uses a dimension the fast evaluator does not time (``extended``): ep, cp, ZeRO-2/3, offload,
        overlapped gradient reduction, all-to-all or tensor-parallel communication, the MoE dispatcher, a
        recompute-modules list (``extended.RECOMPUTE_RECIPES``), expert tensor parallelism apart from tp."""
        return (
            self.ep > 1
            or (self.expert_tp is not None and self.expert_tp != self.tp)  # ep 1 folds too (``plan.experts``)
            or self.cp > 1
            or self.zero >= 2
            or self.fsdp
            or self.offload is not None
            or self.overlap_grad_reduce
            or self.overlap_ep
            or self.dispatcher != "alltoall"
            or self.overlap_tp
            or self.recompute_modules is not None
        )

    @property
    def schedule(self) -> Schedule:
        return Schedule.interleaved if self.interleave > 1 else Schedule.one_f_one_b

    def micro_batches(self, global_batch: int) -> int:
        return global_batch // (self.dp * self.micro_batch)

    def mapping(self, global_batch: int, base: Mapping | None = None) -> Mapping:
        """The project mapping of this candidate (other fields, e.g. memory levels, from ``base``)."""
        fields: dict[str, Any] = {
            "tp": self.tp,
            "pp": self.pp,
            "dp": self.dp,
            "micro_batch": self.micro_batch,
            "global_batch": global_batch,
            "interleave": self.interleave,
            "schedule": self.schedule,
            "recompute": self.recompute,
            "recompute_layers": None,  # the search tries whole recomputation choices only
            # … and the default selective modules, or a recipe's list (second stage)
            "recompute_modules": list(self.recompute_modules) if self.recompute_modules is not None else None,
            "pipeline_layers": None,  # an even split of its own pp × interleave
            "sequence_parallel": self.sequence_parallel,
            "zero": self.zero,
            "placement": self.placement,
            "rank_order": self.rank_order,
            "stages": [],
            "ep": self.ep,
            "expert_tp": self.expert_tp,
            "cp": self.cp,
            "fsdp": self.fsdp,
            "delay_wgrad_compute": self.delay_wgrad,  # never the base's: it needs this candidate's overlap and ep
        }
        if self.fsdp:
            fields |= {"zero": 3, "overlap_param_gather": True}
        if self.zero == 0 and not self.fsdp:  # fp8 weights gathered after the step need a sharded optimizer, and so
            # does Megatron-Core's precision-aware optimizer (precision_fields)
            fields |= {"fp8_param_gather": False, "optimizer_moments": "fp32", "optimizer_master": "fp32"}
        if self.interleave == 1 or self.zero not in (1, 2) or self.fsdp:  # plan.checks: interleaved ZeRO-1/2 only
            fields["overlap_param_gather_with_optimizer_step"] = False
        if self.overlap_grad_reduce:  # otherwise the base's choice stands
            fields["overlap_grad_reduce"] = True
        if self.overlap_ep:
            fields["overlap_ep_comm"] = True
        if self.dispatcher != "alltoall":
            fields["ep_dispatcher"] = self.dispatcher
        if self.overlap_tp:
            fields["overlap_tp_comm"] = True
        if base is None:
            if self.offload is not None:
                fields["memory_levels"] = {"optimizer": self.offload}
            return Mapping(**fields)
        fields["tp_axes"] = tp_axes_for(base.tp_axes, self.tp)  # a 2-D layout only while it fits
        # PyTorch FSDP2's copies (``plan.sharding``) are the base's recipe where this candidate gathers weights (ZeRO-3,
        # FSDP); elsewhere the field would be idle, so it is dropped rather than carried into the mapping shown
        fields["fsdp_copies"] = base.fsdp_copies and (self.fsdp or self.zero >= 3)
        if self.offload is not None:
            fields["memory_levels"] = {**base.memory_levels, "optimizer": self.offload}
        return Mapping(**{**base.model_dump(), **fields})

    def as_json(self) -> dict[str, Any]:
        return {
            "tp": self.tp,
            "pp": self.pp,
            "dp": self.dp,
            "devices": self.devices,
            "micro_batch": self.micro_batch,
            "interleave": self.interleave,
            "recompute": self.recompute.value,
            "recompute_modules": list(self.recompute_modules) if self.recompute_modules is not None else None,
            "sequence_parallel": self.sequence_parallel,
            "zero": self.zero,
            "placement": self.placement.value,
            "rank_order": self.rank_order,
            "ep": self.ep,
            "expert_tp": self.expert_tp,
            "cp": self.cp,
            "fsdp": self.fsdp,
            "offload_optimizer": self.offload,
            "overlap_grad_reduce": self.overlap_grad_reduce,
            "overlap_ep_comm": self.overlap_ep,
            "delay_wgrad_compute": self.delay_wgrad,
            "ep_dispatcher": self.dispatcher,
            "overlap_tp_comm": self.overlap_tp,
        }

    def label(self) -> str:
        parts = [f"tp{self.tp}", f"pp{self.pp}", f"dp{self.dp}", f"mb{self.micro_batch}"]
        if self.interleave > 1:
            parts.append(f"v{self.interleave}")
        if self.recompute is not Recompute.none:
            parts.append(f"rc-{self.recompute.value}")
        if self.recompute_modules is not None:
            parts.append(f"rm-{modules_text(self.recompute_modules)}")
        if self.sequence_parallel:
            parts.append("sp")
        if self.ep > 1:
            parts.append(f"ep{self.ep}")
        if self.expert_tp is not None and self.expert_tp != self.tp:
            parts.append(f"etp{self.expert_tp}")
        if self.cp > 1:
            parts.append(f"cp{self.cp}")
        if self.fsdp:
            parts.append("fsdp")
        elif self.zero:
            parts.append(f"zero{self.zero}")
        if self.offload is not None:
            parts.append(f"opt->{self.offload}")
        if self.overlap_grad_reduce:
            parts.append("ovl-grad")
        if self.overlap_ep:
            parts.append("ovl-a2a")
        if self.delay_wgrad:
            parts.append("dw")
        if self.dispatcher != "alltoall":
            parts.append(self.dispatcher)
        if self.overlap_tp:
            parts.append("ovl-tp")
        if self.placement is not PlacementStrategy.row_major:
            parts.append(self.placement.value)
        if self.rank_order != "tp-dp-pp":
            parts.append(self.rank_order)
        return " ".join(parts)


# ``dense``'s: each field's slot setter, and the defaults of the fields after the first stage's eight
_SETTERS = tuple(getattr(Candidate, f.name).__set__ for f in fields(Candidate))
_REST = tuple(f.default for f in fields(Candidate)[8:])
assert MISSING not in _REST, "dense() needs a plain default for every field after the eighth"


def dense(tp: int, pp: int, dp: int, micro_batch: int, interleave: int, recompute: Recompute,
          sequence_parallel: bool, zero: int) -> Candidate:
    """``Candidate(tp, pp, dp, micro_batch, interleave, recompute, sequence_parallel, zero)``, the rest at their
    defaults, for the first stage's walk, which makes one per point of a space of millions: the dataclass's frozen
    ``__init__`` sets each field through ``object.__setattr__`` and costs ~3× this. ``recompute`` must be the
    enum already (``__post_init__``'s coercion is skipped)."""
    c = object.__new__(Candidate)
    for put, value in zip(_SETTERS, (tp, pp, dp, micro_batch, interleave, recompute, sequence_parallel, zero, *_REST),
                          strict=True):
        put(c, value)
    return c


def modules_text(modules: tuple[str, ...]) -> str:
    """A recompute-modules list as the result lines show it: ``core_attn+mlp``."""
    return "+".join(modules) or "none"


def precision_fields(m: Mapping, zero: int) -> dict[str, str]:
    """Adam's moments and master copy (``mapping.optimizer_moments``, ``optimizer_master``: ``bytes_per_param``'s
    ``moments`` and ``master``) a candidate with ZeRO stage ``zero`` runs: the mapping's under a sharded optimizer,
    fp32 without one, where Megatron-Core refuses its precision-aware optimizer (``plan.checks``) and
    ``Candidate.mapping`` drops them."""
    if zero >= 1:
        return {"moments": m.optimizer_moments, "master": m.optimizer_master}
    return {"moments": "fp32", "master": "fp32"}


def replicas(c: Candidate) -> int:
    """The replicas ZeRO shards a stage's dense model state over: dp · cp, as ``build_plan``'s ``shard_dp``
    (context ranks hold the same weights; Megatron-Core's distributed optimizer runs on the data-parallel
    group with context parallelism, ``plan.sharding``)."""
    return c.dp * c.cp

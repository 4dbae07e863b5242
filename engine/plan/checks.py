"""Consistency checks across the parts of a project (hardware × workload × mapping).

Field-level validity is pydantic's job; these checks need two parts at once, e.g. whether tensor
parallelism divides the model's heads, or whether tp·pp·dp devices exist. They ask whether a project can
be planned, so they live with the plan: they build the workload graph and use the plan's own rules for
fused chains (``engine.plan.passes``), but need no elaborated hardware. Files (``engine.io``) do not run
them; a caller that wants a file vetted on load passes ``raise_for_problems`` as the loader's ``check``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tilewright.engine.errors import InputError, Problem
from tilewright.engine.ir.mapping import Mapping, Recompute, Schedule
from tilewright.engine.ir.ops import LayerKind
from tilewright.engine.ir.project import Mode, Project
from tilewright.engine.ir.workload import TransformerDims
from tilewright.engine.plan.context_length import context_problems

if TYPE_CHECKING:
    from tilewright.engine.workloads.graph import WorkloadGraph


def device_capacity(project: Project) -> int | None:
    """Devices the hardware offers; ``None`` when a growable level grows to fit any run."""
    if any(c.growable for _, c in project.hardware.walk()):
        return None
    return project.hardware.device_count()


def tp_fits_kv_heads(tp: int, kv_heads: int) -> bool:
    """Megatron splits key/value heads over tp ranks, or replicates each over tp / kv_heads of them."""
    return tp <= kv_heads and kv_heads % tp == 0 or tp % kv_heads == 0


def _transformer_checks(dims: TransformerDims, m: Mapping) -> list[Problem]:
    out: list[Problem] = []
    if dims.heads % m.tp:
        out.append(Problem("mapping.tp", f"{m.tp} does not divide heads ({dims.heads})"))
    kv = dims.kv_heads_n  # every transformer family: GQA/MQA on GPT too (``--kv-heads``)
    if not tp_fits_kv_heads(m.tp, kv):
        out.append(Problem("mapping.tp", f"{m.tp} is neither a divisor nor a multiple of kv_heads ({kv})"))
    if dims.ffn_dim % m.tp:
        out.append(Problem("mapping.tp", f"{m.tp} does not divide ffn ({dims.ffn_dim})"))
    moe = dims.moe
    etp = m.expert_tp if m.expert_tp is not None else m.tp  # routed experts' tensor split (``plan.experts``)
    if moe is not None and moe.expert_ffn % etp:
        field = "mapping.tp" if etp == m.tp else "mapping.expert_tp"
        out.append(Problem(field, f"{etp} does not divide moe.expert_ffn ({moe.expert_ffn})"))
    if m.sequence_parallel and dims.seq_len % m.tp:
        out.append(Problem("mapping.sequence_parallel", f"tp ({m.tp}) does not divide seq_len ({dims.seq_len})"))
    if m.cp > 1 and dims.seq_len % (2 * m.cp):  # the load-balanced ring's 2·cp chunks per sequence
        # (Megatron-Core get_batch_on_this_cp_rank: ``assert 0 == val.shape[seq_dim] % (2 * cp_size)``)
        out.append(Problem("mapping.cp", f"{m.cp}: the ring splits each sequence into 2 × cp = {2 * m.cp} chunks "
                           f"(two per rank, for load balance), and that does not divide seq_len ({dims.seq_len})"))
    return out


def _expert_checks(m: Mapping, graph: WorkloadGraph) -> list[Problem]:
    """``ep`` splits the routed experts over ep of the stage's replicas (dp, times cp with context parallelism:
    Megatron-Core's expert rank generator folds the MoE layer over tp × cp × dp), or with ``expert_tp`` below tp
    over ep × expert_tp of the stage's tp × cp × dp ranks (MoE parallel folding, ``plan.experts``) — at ep 1 too:
    expert_tp × ep × expert_dp = tp × cp × dp holds for any expert_tp dividing tp, each expert-tensor group then
    running every routed expert on its own tokens. Megatron-LM asks for sequence parallelism with MoE and
    tensor parallelism (``megatron/training/arguments.py``: "When using MoE and tensor parallelism, sequence
    parallelism must be used"); the plan asks it where the experts' split is below tp, which it sizes from
    each rank's S/tp tokens. Messages name cp only when it is above 1, so the cp 1 wording the studio shows
    stays."""
    etp = m.expert_tp if m.expert_tp is not None else m.tp
    if m.ep <= 1 and etp == m.tp:
        return []
    experts = {op.moe.experts for op in graph.ops() if op.moe is not None}
    if not experts:
        if m.ep > 1:
            return [Problem("mapping.ep", f"{m.ep}: the model has no mixture-of-experts layers to split")]
        return [Problem("mapping.expert_tp", f"{etp}: the model has no mixture-of-experts layers to split")]
    out = []
    replicas = m.dp * m.cp  # the stage's replicas of the tensor group (``plan.plan.build_plan``)
    names, sizes = ("cp × dp", f"{m.cp} × {m.dp}") if m.cp > 1 else ("dp", f"{m.dp}")
    if m.tp % etp:
        out.append(Problem("mapping.expert_tp", f"{etp} does not divide tp ({m.tp})"))
    elif etp == m.tp and replicas % m.ep:
        out.append(Problem("mapping.ep", f"{m.ep} does not divide {names} ({sizes}): expert ranks are "
                           f"{'context- and ' if m.cp > 1 else ''}data-parallel ranks"))
    elif (m.tp * replicas) % (m.ep * etp):
        out.append(Problem("mapping.ep", f"ep × expert_tp ({m.ep} × {etp}) does not divide tp × {names} ({m.tp} × "
                           f"{sizes}): the expert ranks fold over one pipeline stage's tensor"
                           f"{', context' if m.cp > 1 else ''} and data-parallel ranks"))
    if etp < m.tp and not m.sequence_parallel:
        out.append(Problem("mapping.sequence_parallel", f"off: expert_tp {etp} below tp ({m.tp}) needs sequence "
                           "parallelism (Megatron-LM requires it with MoE and tensor parallelism)"))
    if etp != m.tp and m.tp_axes is not None:
        out.append(Problem("mapping.expert_tp", "expert tensor parallelism below tp with 2-D tensor parallelism "
                           "(mapping.tp_axes) is not simulated"))
    if any(e % m.ep for e in experts):
        out.append(Problem("mapping.ep", f"{m.ep} does not divide the routed experts ({min(experts)})"))
    return out


def ep_overlap_runs(pp: int, interleave: int, recompute: Recompute) -> bool:
    """Megatron-Core runs its overlapped expert all-to-all (combined 1F1B) with this pipeline and recomputation
    (``_ep_overlap_checks`` quotes its asserts): no pipeline or an interleaved one, and no full recomputation.
    The search asks it before it adds an overlapped variant (``search.parallel.extended``)."""
    return (pp == 1 or interleave > 1) and recompute is not Recompute.full


def _ep_overlap_checks(m: Mapping) -> list[Problem]:
    """``overlap_ep_comm`` (Megatron-Core ``overlap_moe_expert_parallel_comm``) where Megatron-Core refuses it:
    ``TransformerConfig.__post_init__`` (megatron/core/transformer/transformer_config.py) asserts, under
    ``if self.overlap_moe_expert_parallel_comm:``, "If enabling EP A2A overlap, virtual_pipeline_model_parallel_size
    must be specified when pipeline_model_parallel_size > 1" (its combined 1F1B is built for the interleaved
    schedule, ``combined_1f1b_schedule_for_interleaved_pipelining``, and for no pipeline) and "disable full
    recomputation when enabling overlap_moe_expert_parallel_comm" with "disable recomputation method ..." (a
    checkpointed layer's backward is one recompute-and-backward, which the schedule plan cannot split into its
    nodes). The plan would otherwise cost a schedule no one can run."""
    if not m.overlap_ep_comm or ep_overlap_runs(m.pp, m.interleave, m.recompute):
        return []
    out = []
    if m.pp > 1 and m.interleave == 1:
        out.append(Problem("mapping.overlap_ep_comm", f"on with pp {m.pp} and no interleaving: Megatron-Core asserts "
                           "'If enabling EP A2A overlap, virtual_pipeline_model_parallel_size must be specified when "
                           "pipeline_model_parallel_size > 1' (transformer_config.py): set interleave to 2 or more, "
                           "or pp to 1, or turn overlap_ep_comm off"))
    if m.recompute is Recompute.full:
        out.append(Problem("mapping.overlap_ep_comm", "on with recompute 'full': Megatron-Core asserts 'disable full "
                           "recomputation when enabling overlap_moe_expert_parallel_comm' (transformer_config.py): "
                           "use recompute 'selective' or 'none', or turn overlap_ep_comm off"))
    return out


def _recompute_checks(m: Mapping, graph: WorkloadGraph) -> list[Problem]:
    """``recompute_modules`` names Megatron-Core's modules (``perf.recompute``), each one this workload has,
    under selective recomputation (as Megatron-Core, which reads the list only then)."""
    from tilewright.engine.perf.recompute import MODULES, present, unknown_modules

    modules = m.recompute_modules
    if modules is None:
        return []
    field = "mapping.recompute_modules"
    if m.recompute is not Recompute.selective:
        return [Problem(field, f"{', '.join(modules) or '[]'}: module recomputation needs recompute 'selective', "
                               f"not '{m.recompute.value}'")]
    unknown = unknown_modules(modules)
    if unknown:
        return [Problem(field, f"unknown module{'s' if len(unknown) > 1 else ''} {', '.join(unknown)} "
                               f"(known: {', '.join(MODULES)})")]
    layers = [graph.layer_ops(i) for i in graph.block_layers]
    return [Problem(field, f"'{name}': the model has nothing it recomputes: {_ABSENT.get(name, 'no such part')}")
            for name in dict.fromkeys(modules) if not any(present(ops, name) for ops in layers)]


def _cuda_graph_checks(project: Project, graph: WorkloadGraph) -> list[Problem]:
    """``cuda_graph_scope`` names Megatron-Core's graph scopes, each one this workload has, in Megatron-Core's
    combinations (``plan.cuda_graphs``)."""
    from tilewright.engine.plan.cuda_graphs import problems

    m = project.mapping
    if m.cuda_graph_scope is None:
        return []
    layers = [graph.layer_ops(i) for i in graph.block_layers]
    found = problems(m.cuda_graph_scope, layers, project.run.mode is Mode.train, m.recompute.value,
                     m.recompute_modules)
    return [Problem("mapping.cuda_graph_scope", text) for text in found]


_ABSENT = {  # why a module may be missing from a workload
    "moe_act": "no mixture-of-experts layers",
    "moe": "no mixture-of-experts layers",
    "shared_experts": "no shared experts",
    "mla_up_proj": "no multi-head latent attention",
    "mlp": "no dense MLP",
    "layernorm": "every norm is fused into the linear after it (Transformer Engine's LayerNormLinear)",
    "core_attn": "no unfused attention core",
}


def _pipeline_checks(blocks: int, m: Mapping) -> list[Problem]:
    out: list[Problem] = []
    chunks = m.pp * m.interleave
    if m.stages:
        if m.pipeline_layers is not None:
            out.append(Problem("mapping.pipeline_layers", "give either explicit stages or a pipeline layout, not both"))
        return out
    if m.pipeline_layers is not None:
        layout = m.pipeline_layers
        if len(layout) != chunks:
            out.append(Problem("mapping.pipeline_layers",
                               f"{len(layout)} virtual stages listed, pp × interleave is {chunks}"))
        elif sum(layout) != blocks:
            out.append(Problem("mapping.pipeline_layers", f"the virtual stages hold {sum(layout)} layers, "
                               f"the model has {blocks}"))
        elif any(n == 0 for n in layout[1:-1]):
            out.append(Problem("mapping.pipeline_layers", "a virtual stage between the first and the last is empty"))
    elif chunks > blocks:
        out.append(Problem("mapping.pp", f"pp × interleave = {chunks} exceeds the model's layers ({blocks})"))
    elif m.interleave > 1 and blocks % chunks:
        out.append(Problem("mapping.interleave", f"pp × interleave = {chunks} does not divide layers ({blocks}); "
                           "mapping.pipeline_layers gives an uneven layout"))
    if m.schedule is Schedule.interleaved and m.micro_batches % m.pp:
        out.append(
            Problem(
                "mapping.global_batch",
                f"interleaved 1F1B needs micro-batches per pipeline ({m.micro_batches}) "
                f"to be a multiple of pp ({m.pp})",
            )
        )
    return out


def _stage_checks(project: Project, n_layers: int, capacity: int | None) -> list[Problem]:
    m = project.mapping
    out: list[Problem] = []
    if not m.stages:
        return out
    if len(m.stages) != m.pp:
        out.append(Problem("mapping.stages", f"{len(m.stages)} stages listed, pp is {m.pp}"))
    ordered = sorted(m.stages, key=lambda s: s.stage)
    expect = 0
    for i, st in enumerate(ordered):
        first, last = st.layers
        if first != expect:
            out.append(Problem(f"mapping.stages.{i}.layers", f"starts at {first}, expected {expect} (gap or overlap)"))
        if last > n_layers:
            out.append(Problem(f"mapping.stages.{i}.layers", f"ends at {last}, the model has {n_layers} layers"))
        expect = last
        if st.devices and len(st.devices) != m.stage_devices:
            out.append(
                Problem(
                    f"mapping.stages.{i}.devices",
                    f"{len(st.devices)} devices, a stage needs {m.stage_split_text} = {m.stage_devices}",
                )
            )
        if capacity is not None:
            bad = [d for d in st.devices if d >= capacity]
            if bad:
                out.append(
                    Problem(f"mapping.stages.{i}.devices", f"device {bad[0]} does not exist ({capacity} devices)")
                )
    if ordered and expect != n_layers:
        out.append(Problem("mapping.stages", f"stages cover layers up to {expect}, the model has {n_layers}"))
    return out


def _hypar_checks(m: Mapping, graph: WorkloadGraph) -> list[Problem]:
    """``layer_parallelism`` is simulated as a HyPar partition: the dp devices form the array (so no tp,
    pp or ZeRO sharding besides it), halved log2(dp) times, over a chain of conv and fc layers."""
    if not m.layer_parallelism:
        return []
    out: list[Problem] = []
    where = "mapping.layer_parallelism"
    for name, value in (("tp", m.tp), ("pp", m.pp), ("interleave", m.interleave)):
        if value != 1:
            out.append(Problem(f"mapping.{name}", f"{value}; a HyPar partition ({where}) needs {name} = 1"))
    if m.zero:
        out.append(Problem("mapping.zero", f"{m.zero}; a HyPar partition ({where}) does not shard over ZeRO"))
    if m.recompute is not Recompute.none:
        out.append(Problem("mapping.recompute", f"'{m.recompute.value}'; a HyPar partition ({where}) needs 'none'"))
    if m.optimizer_moments != "fp32":
        out.append(Problem("mapping.optimizer_moments", f"'{m.optimizer_moments}'; a HyPar partition ({where}) "
                           "keeps Adam's moments in fp32"))
    if m.optimizer_master != "fp32":
        out.append(Problem("mapping.optimizer_master", f"'{m.optimizer_master}'; a HyPar partition ({where}) "
                           "keeps an fp32 master copy"))
    if not m.grad_reduce_in_fp32:
        out.append(Problem("mapping.grad_reduce_in_fp32", f"False; a HyPar partition ({where}) keeps the "
                           "framework's default gradient buffer"))
    levels = None
    if m.dp & (m.dp - 1):
        out.append(Problem("mapping.dp", f"{m.dp} is not a power of two; HyPar halves the array level by level"))
    else:
        levels = m.dp.bit_length() - 1
    other = [li for li in graph.layers if li.kind not in (LayerKind.conv, LayerKind.fc)]
    if other:
        out.append(
            Problem(where, f"layer {other[0].index} ({other[0].name}) is a {other[0].kind.value} layer; HyPar "
                           "partitions chains of conv and fc layers")
        )
        return out
    weighted = {li.index for li in graph.layers if li.kind in (LayerKind.conv, LayerKind.fc)}
    seen: set[int] = set()
    for i, lp in enumerate(m.layer_parallelism):
        if lp.layer not in weighted:
            out.append(Problem(f"{where}.{i}.layer", f"{lp.layer} is not a weighted layer"))
        elif lp.layer in seen:
            out.append(Problem(f"{where}.{i}.layer", f"layer {lp.layer} is listed twice"))
        seen.add(lp.layer)
        if levels is not None and lp.levels and len(lp.levels) != levels:
            out.append(
                Problem(
                    f"{where}.{i}.levels",
                    f"{len(lp.levels)} choices; dp = {m.dp} devices are halved in log2({m.dp}) = {levels} levels",
                )
            )
    return out


def _fusion_checks(m: Mapping, graph: WorkloadGraph) -> list[Problem]:
    """Each ``mapping.fusion`` chain must be consecutive ops of some layer, each consuming the one before,
    with no tensor-parallel collective between them (the tensor would leave the chip there)."""
    from tilewright.engine.plan.passes import collective_between, local_name

    out: list[Problem] = []
    layers = [graph.layer_ops(li.index) for li in graph.layers]
    for i, chain in enumerate(m.fusion):
        where = f"mapping.fusion.{i}"
        found = None
        for ops in layers:
            names = [local_name(op) for op in ops]
            for start in range(len(names) - len(chain) + 1):
                if names[start : start + len(chain)] == chain:
                    found = ops[start : start + len(chain)]
                    break
            if found:
                break
        if found is None:
            out.append(Problem(where, f"{chain} are not consecutive ops of any layer of the workload"))
            continue
        for a, b in zip(found, found[1:], strict=False):
            if b.inputs and a.name not in b.inputs:
                out.append(Problem(where, f"{local_name(b)} does not consume {local_name(a)}"))
            elif collective_between(a, b, m.tp):
                out.append(Problem(where, f"a tensor-parallel collective separates {local_name(a)} and {local_name(b)} "
                                   f"at tp {m.tp}: that tensor leaves the chip"))
    return out


def _spatial_checks(project: Project) -> list[Problem]:
    """``mapping.spatial.grid`` names cores of the devices' grid: it must exist and fit."""
    m = project.mapping
    if m.spatial.grid is None:
        return []
    compute = project.hardware.device_template()
    grid = compute.grid if compute is not None else None
    r, c = m.spatial.grid
    if grid is None:
        return [Problem("mapping.spatial.grid", f"{r}×{c}: the devices have no grid of cores (compute.grid)")]
    if r > grid.rows or c > grid.cols:
        return [Problem("mapping.spatial.grid", f"{r}×{c} does not fit the devices' {grid.rows}×{grid.cols} cores")]
    return []


def _fp8_param_gather_checks(project: Project) -> list[Problem]:
    """Megatron-Core's ``--fp8-param-gather`` keeps fp8 weights and lets the distributed optimizer cast its fp32
    master shard into them (``arguments.py``: "only supported with distributed optimizer", or FSDP): it needs
    training with fp8 weights and ZeRO ≥ 1. MXFP8 parameters are gathered in bf16 through the gradient buffer
    (``reuse_grad_buf_for_mxfp8_param_ag``), which this flag does not model (``perf.memory``)."""
    from tilewright.engine.ir.common import DType
    from tilewright.engine.ir.mapping import Fp8Scaling

    m = project.mapping
    if not m.fp8_param_gather:
        return []
    field, out = "mapping.fp8_param_gather", []
    weights = m.formats.weights or project.run.dtype
    if project.run.mode is not Mode.train:
        out.append(Problem(field, "fp8 parameters gathered by the distributed optimizer: training only"))
    if weights is not DType.fp8:
        out.append(Problem(field, f"needs fp8 weights (run.dtype fp8 or mapping.formats.weights fp8), not "
                           f"{weights.value}"))
    if m.zero < 1:
        out.append(Problem(field, "needs the distributed optimizer (mapping.zero ≥ 1): it casts the updated fp32 "
                           "master shard into the fp8 weights"))
    if m.formats.fp8_scaling is Fp8Scaling.mxfp8:
        out.append(Problem(field, "'mxfp8' parameters are all-gathered in bf16 through the gradient buffer "
                           "(Megatron-Core reuse_grad_buf_for_mxfp8_param_ag), not modelled: use 'tensor', "
                           "'delayed' or 'block' scaling, or drop fp8_param_gather"))
    return out


def _grad_buffer_checks(project: Project) -> list[Problem]:
    """A bf16 gradient buffer (``grad_reduce_in_fp32`` False, ``perf.memory.bytes_per_param``) replaces the
    fp32 buffer of bf16 or fp8 mixed-precision training; fp16 keeps its fp16 buffer and fp32 training its fp32
    one whatever the flag, so it is refused there rather than ignored."""
    from tilewright.engine.ir.common import dtype_bytes

    run, m = project.run, project.mapping
    if m.grad_reduce_in_fp32:
        return []
    field, out = "mapping.grad_reduce_in_fp32", []
    if run.mode is not Mode.train:
        out.append(Problem(field, "False: gradient buffers exist in training only"))
    weights = m.formats.weights or run.dtype
    if run.dtype.value not in ("bf16", "fp8") or not run.master_weights_fp32 or dtype_bytes(weights) >= 4:
        out.append(Problem(field, f"False applies to bf16 or fp8 mixed precision (fp32 master weights); run.dtype "
                           f"is {run.dtype.value}, whose buffer is {run.dtype.value} already"))
    return out


def _optimizer_precision_checks(project: Project) -> list[Problem]:
    """Adam's moments and master copy in another dtype than fp32 (``mapping.optimizer_moments``,
    ``optimizer_master``: Megatron-Core's precision-aware optimizer, ``perf.memory``) are what Megatron-Core lets
    Transformer Engine's FusedAdam hold: Adam only and with the distributed optimizer (``optimizer_config.py``:
    "--use-precision-aware-optimizer only supported with adam", "... only supported with distributed optimizer"),
    beside low-precision weights (mixed precision). Remainders (``store_param_remainders``) rebuild an fp32 master
    from bf16 parameters, so TE stores them only for bf16 parameters it holds the master of ("Works only when param
    type is BF16 and master weight type is FP32, no effect otherwise"): under fp8, Megatron-Core hands TE the master
    only with delayed scaling (``use_precision_aware_optimizer_no_fp8_or_ds_fp8``), and fp8 parameters
    (``fp8_param_gather``) are not bf16."""
    from tilewright.engine.ir.common import DType, dtype_bytes
    from tilewright.engine.ir.mapping import Fp8Scaling
    from tilewright.engine.ir.project import Optimizer

    run, m = project.run, project.mapping
    out: list[Problem] = []
    for field, value in (("optimizer_moments", m.optimizer_moments), ("optimizer_master", m.optimizer_master)):
        if value == "fp32":
            continue
        path = f"mapping.{field}"
        if run.optimizer is not Optimizer.adam:
            out.append(Problem(path, f"'{value}' is Adam's (Megatron-Core's precision-aware optimizer); "
                               f"run.optimizer is {run.optimizer.value}"))
        if run.mode is not Mode.train:
            out.append(Problem(path, f"'{value}': optimizer state exists in training only"))
        weights = m.formats.weights or run.dtype
        if not run.master_weights_fp32 or dtype_bytes(weights) >= 4:
            out.append(Problem(path, f"'{value}' needs mixed precision (low-precision weights with "
                               "run.master_weights_fp32), as Megatron-Core's precision-aware optimizer"))
        if m.zero < 1:
            out.append(Problem(path, f"'{value}' needs the distributed optimizer (mapping.zero ≥ 1): Megatron-Core "
                               "runs its precision-aware optimizer only there"))
    if m.optimizer_master == "remainders":
        weights = m.formats.weights or run.dtype
        scaling = m.formats.fp8_scaling or Fp8Scaling.tensor
        if weights is DType.fp8 and (scaling is not Fp8Scaling.delayed or m.fp8_param_gather):
            why = ("fp8 parameters (fp8_param_gather) are not bf16" if m.fp8_param_gather else
                   f"under fp8 '{scaling.value}' scaling Megatron-Core keeps the fp32 master itself (it hands "
                   "Transformer Engine the master only with delayed scaling)")
            out.append(Problem("mapping.optimizer_master", f"'remainders' need bf16 parameters stepped by "
                               f"Transformer Engine's FusedAdam: {why}"))
        elif weights not in (DType.bf16, DType.fp8):
            out.append(Problem("mapping.optimizer_master", f"'remainders' rebuild an fp32 master from bf16 "
                               f"parameters; the weights are {weights.value} (use 'fp32' or 'fp16')"))
    return out


def _param_gather_step_checks(project: Project) -> list[Problem]:
    """``overlap_param_gather_with_optimizer_step`` (``plan.param_gather``) launches the first model chunk's
    post-step all-gather during the step of the others: Megatron-LM's ``arguments.py`` asserts the distributed
    optimizer ("only supported with distributed optimizer") and interleaved pipeline parallelism ("only supported
    with interleaved pipeline parallelism"); the pydantic model checks overlap_param_gather. ZeRO-3 (FSDP) has no
    post-step gather: each layer gathers its weights when it runs."""
    m = project.mapping
    if not m.overlap_param_gather_with_optimizer_step:
        return []
    field, out = "mapping.overlap_param_gather_with_optimizer_step", []
    if project.run.mode is not Mode.train:
        out.append(Problem(field, "the optimizer step exists in training only"))
    if m.zero not in (1, 2):
        out.append(Problem(field, f"needs the distributed optimizer's post-step weight gather (mapping.zero 1 or 2, "
                           f"not {m.zero})"))
    if m.schedule is not Schedule.interleaved:
        out.append(Problem(field, "needs interleaved pipeline parallelism (schedule interleaved-1f1b, interleave ≥ 2): "
                           "it steps the first model chunk apart from the others"))
    return out


def host_memories(project: Project) -> set[str]:
    """Names of the memories a device reaches only over its host link: those of a component that does not
    compute and are not ported DRAM (``plan.residency.available_levels`` calls them the ``host`` level)."""
    return {mem.name for _, c in project.hardware.walk() if c.compute is None for mem in c.memories
            if not mem.ported}


def _offload_checks(project: Project, blocks: int) -> list[Problem]:
    """Activations in host memory while training are Megatron-Core's activation CPU offloading (``cpu_offloading``,
    Transformer Engine's ``get_cpu_offload_context``: the first ``cpu_offloading_num_layers`` transformer layers'
    saved tensors copied out in the forward and back in the backward, ``plan.activation_offload``), which
    Megatron-Core's ``TransformerConfig.__post_init__`` (``megatron/core/transformer/transformer_config.py``,
    NVIDIA/Megatron-LM @ 002526d8) refuses
    - with any recomputation: "CPU offloading does not work when activation recomputation is enabled" whenever
      ``recompute_granularity`` is set, full or selective;
    - with pipeline parallelism: "Currently there is no support for Pipeline parallelism with CPU offloading"
      whenever ``pipeline_model_parallel_size > 1``;
    - for all of a chunk's layers: "CPU offloading can be done only for layers less than {num_layers}" unless
      0 ≤ ``cpu_offloading_num_layers`` < ``num_layers`` (``mapping.offload_layers``; Transformer Engine asserts
      the same: "last layer is not offloaded").
    (DeepSpeed's CPU checkpointing, which offloads only the checkpointed layer inputs of a full recompute, is
    another mechanism, not modelled.) ``auto`` puts neither a recomputing run's nor a pipeline's activations in
    host memory (``plan.residency.stage_residency``). ``blocks``: the model's transformer layers."""
    m = project.mapping
    name = m.memory_levels.get("activations")
    if project.run.mode is not Mode.train or name not in host_memories(project):
        return []
    out = []
    if m.recompute is not Recompute.none:
        out.append(Problem("mapping.memory_levels.activations",
                           f"'{name}' is host memory: activation offloading with recompute '{m.recompute.value}' is "
                           "refused by Megatron-Core ('CPU offloading does not work when activation recomputation "
                           "is enabled', transformer_config.py); set recompute 'none' or keep the activations on the "
                           "device"))
    if m.pp > 1:
        out.append(Problem("mapping.memory_levels.activations",
                           f"'{name}' is host memory: activation offloading with pp {m.pp} is refused by "
                           "Megatron-Core ('Currently there is no support for Pipeline parallelism with CPU "
                           "offloading', transformer_config.py); set pp 1 or keep the activations on the device"))
    chunks = m.pp * m.interleave
    smallest = min(m.pipeline_layers) if m.pipeline_layers else blocks // chunks
    if m.offload_layers is not None and not m.stages and m.offload_layers > max(smallest - 1, 0):
        out.append(Problem("mapping.offload_layers",
                           f"{m.offload_layers}: a model chunk of {smallest} transformer layers offloads at most "
                           f"{max(smallest - 1, 0)} (Megatron-Core: 'CPU offloading can be done only for layers "
                           f"less than {smallest}'; Transformer Engine never offloads the last layer, whose "
                           "backward starts as its forward ends)"))
    return out


def check_project(
    project: Project, *, allow_large: bool = False, workload: WorkloadGraph | None = None
) -> list[Problem]:
    """Every cross-part problem of ``project``; empty when it is consistent. A project past the size limits
    (``engine.plan.budget``) gets those problems only, unless ``allow_large``. ``workload``: the project's model
    graph when the caller has built it (a search checks thousands of mappings of one model)."""
    from tilewright.engine.perf.formats import edge_layer_problems, fp8_scaling_problems, per_op_problems
    from tilewright.engine.plan.budget import estimate
    from tilewright.engine.plan.idle_fields import idle_field_problems
    from tilewright.engine.plan.tensor_axes import problems as tensor_axes_problems
    from tilewright.engine.workloads import build_workload

    too_large = [] if allow_large else estimate(project).problems()
    if too_large:  # building the graph of a run past the limits is what would hang or exhaust memory
        return too_large
    m = project.mapping
    out: list[Problem] = []
    capacity = device_capacity(project)
    if capacity is not None and m.devices > capacity:
        dims = f"tp·pp·dp·cp = {m.tp}·{m.pp}·{m.dp}·{m.cp}" if m.cp > 1 else f"tp·pp·dp = {m.tp}·{m.pp}·{m.dp}"
        out.append(Problem("mapping", f"{dims} = {m.devices} devices, the hardware has {capacity}"))
    elif capacity is None:  # a growable system must be able to grow to the run (e.g. its copies joined)
        from tilewright.engine.hardware.grow import grow

        try:
            grow(project.hardware, m.devices)
        except ValueError as e:
            out.append(Problem("hardware", str(e)))
    out += context_problems(project)  # an inference sequence past the model's context (plan.context_length)
    if m.cp > 1 and (project.run.mode is not Mode.train or m.layer_parallelism):
        out.append(Problem("mapping.cp", f"{m.cp}: context parallelism is simulated for training without "
                           "layer_parallelism"))
    if isinstance(project.workload, TransformerDims):
        out += _transformer_checks(project.workload, m)
    graph = workload if workload is not None else build_workload(project.workload)
    out += _expert_checks(m, graph)
    out += _ep_overlap_checks(m)  # Megatron-Core's asserts on overlap_moe_expert_parallel_comm
    out += _recompute_checks(m, graph)
    out += _cuda_graph_checks(project, graph)
    if m.moe_router_fusion and not any(op.moe is not None for op in graph.ops()):  # plan.moe_host
        out.append(Problem("mapping.moe_router_fusion", "the model has no mixture-of-experts router to fuse"))
    out += _pipeline_checks(len(graph.block_layers), m)
    out += _stage_checks(project, len(graph.layers), capacity)
    out += _hypar_checks(m, graph)
    out += _fusion_checks(m, graph)
    out += _spatial_checks(project)
    out += per_op_problems(m.formats, (op.name for op in graph.ops()))  # mapping.formats.*_by_op
    out += fp8_scaling_problems(project.run.dtype, m.formats,
                                ((path, c.compute) for path, c in project.hardware.walk() if c.compute is not None))
    train = project.run.mode is Mode.train  # mapping.formats.bf16_first_layers / bf16_last_layers (perf.formats)
    out += edge_layer_problems(project.run.dtype, m.formats, len(graph.block_layers), train)
    if (m.formats.bf16_first_layers or m.formats.bf16_last_layers) and m.layer_parallelism and train:
        out.append(Problem("mapping.formats.bf16_first_layers", "bf16 edge layers are not modelled by a HyPar "
                           "partition (mapping.layer_parallelism)"))
    out += tensor_axes_problems(project)  # mapping.tp_axes
    out += _fp8_param_gather_checks(project)  # mapping.fp8_param_gather (perf.memory)
    out += _optimizer_precision_checks(project)  # mapping.optimizer_moments / optimizer_master (perf.memory)
    out += _param_gather_step_checks(project)  # mapping.overlap_param_gather_with_optimizer_step (plan.param_gather)
    out += _grad_buffer_checks(project)  # mapping.grad_reduce_in_fp32 (perf.memory)
    out += _offload_checks(project, len(graph.block_layers))  # activation offload (plan.activation_offload)
    out += idle_field_problems(project, graph)  # fields the run would read as nothing (plan.idle_fields)
    memories = {mem.name for mem in project.hardware.all_memories()}
    for category, name in m.memory_levels.items():
        if name != "auto" and name not in memories:
            known = ", ".join(sorted(memories)) or "none"
            out.append(Problem(f"mapping.memory_levels.{category}", f"no memory named '{name}' (have: {known})"))
    return out


def raise_for_problems(project: Project, source: str, *, allow_large: bool = False) -> None:
    problems = check_project(project, allow_large=allow_large)
    if problems:
        raise InputError(source, problems)

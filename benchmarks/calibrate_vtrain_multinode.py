"""Predictions for vTrain's multi-node validation inputs: 108 Megatron-DeepSpeed runs on 64-512 A100s (3.6B-175B GPTs).

Why: held-out measurements of these runs judge our multi-node accuracy (mean error and rank correlation of the
mappings). The measurements are not ours to see; their *inputs* are public, and this prints our prediction of
each, its breakdown, and the order in which we rank the mappings of each (model, GPUs, global batch) group, so
that a mechanism we lack shows up as a pattern (by tp, by pp) before anyone compares.

Source of the table (transcribed by hand from each file, one row per file): VIA-Research/vTrain,
``config/validation/multi/config_val_<model>_<tp>_<dp>_<pp>_<mb>.json`` at commit
f8dda8473a48b373b1d25f51f52d685bff5150c5 (108 files). Every file has ``gpu_name`` A100, ``max_length`` 2048,
``use_checkpoint`` true (Megatron's ``--checkpoint-activations``: full recompute of each layer),
``pipeline_scheduling`` 1f1b, ``use_gradient_bucket`` false (Megatron's local DDP: one all-reduce after the
backward), ``node_size`` 8, ``intra_node_bandwidth`` 150 (GB/s) and ``inter_node_bandwidth`` 800 (Gbps *per
node*: vTrain's ``src/config.py`` calls it the "total bandwidth of inter-node communication"; its predictor
charges a pipeline send at a quarter of it, and a data-parallel all-reduce at all of it when tp fills the
node). The files give no vocabulary: vTrain's default is 50,257 (GPT-2 BPE), which Megatron pads to a
multiple of 128·tp (``calibrate_public_megatron_logs.padded_vocab``). The models are SC'21 Table 1's 3.6B,
18.4B and 39.1B rows (layers, hidden, heads, GPU count and global batch as there) and GPT-3 175B (Brown et
al. 2020; 512 GPUs, global batch 1,536). Note: vTrain's own simulator replaces the micro-batch of a pp-1
run by global batch / dp (``vTrainConfig.validate_config``); the files' micro-batches are kept here, since
Megatron runs them as gradient-accumulation steps.

Our system: the ``dgx-a100`` preset, grown by whole nodes to the run's GPUs (``engine/hardware/grow.py``):
8 A100s per node on NVSwitch, and one 25 GB/s HDR InfiniBand link per GPU (8 NICs, 1,600 Gbps per node) on a
non-blocking fat tree. That is twice the 800 Gbps per node these configurations state; ``--nic-gbps-per-node X``
is a what-if (in memory, as ``calibrate_public_megatron_logs --host-scale``) that gives every GPU X / 8 Gbps
instead, and prints each row's change against the preset.

Prints, per row: the mapping, micro-batches per pipeline (``m``), iteration time, achieved model TFLOP/s per
GPU and the iteration's breakdown (shares, ``calibrate_small_gpt.COLUMNS``); then mean TFLOP/s and mean
breakdown by model, by tp and by pp; then, within each (model, GPUs, global batch) group, the mappings from
fastest to slowest. Predictions only: vTrain's measured times (``data/ground_truth_*.csv``) are held out and
are not read.

``--mechanisms``: for every row with pp > 1, the size of Megatron-LM mechanisms around the pipeline, as shares
of the row's predicted iteration (a diagnostic, each measured on the row's plan with ``mapping.pipeline_p2p``
'overlap'). The first two are now in the model: these full-recompute runs default to 'megatron-lm'
(``engine/plan/pipeline_p2p.py``: blocking sends and the gather after each receive); the gradient hooks are
``engine/plan/grad_hooks.py`` (its add_ kernels for the non-GEMM parameters only, gradient-accumulation fusion
being Megatron's default since v3.0; ``--no-gradient-accumulation-fusion`` for v2.x):

- ``sync p2p``: Megatron's pipeline sends block (``p2p_communication._communicate``: ``batch_isend_irecv``,
  ``wait`` on every request, then ``torch.cuda.synchronize()``; 1F1B's steady state calls
  ``send_forward_recv_backward`` after each forward and ``send_backward_recv_forward`` after each
  backward, ``schedules.forward_backward_pipelining_without_interleaving``), so a stage idles for each of
  its transfers; the plan's recurrence lets a stage compute on while its send is in flight. Estimated by
  re-running the recurrence with every pass that sends lengthened by its send (then arriving at once):
  the iteration's growth. Where one batched call runs an exchange's send and receive one after the other
  (NVIDIA/apex PR #1616 replaces ``batch_isend_irecv`` to avoid "serialization of send/recv ops within a
  kernel") it doubles;
- ``gather``: the all-gather over the tensor group that follows each receive (``gather_split_1d_tensor``,
  the scatter/gather optimisation): two per micro-batch on a middle stage;
- ``tied AR``: the word embedding's gradient all-reduce between the first and the last stage (in the plan);
- ``last +``: how much longer the last stage's forward, recompute and backward of one micro-batch are than a
  middle stage's (the logits and the loss; in the plan, which sets the 1F1B period by the slowest stage);
- ``grad acc``: local DDP's per-micro-batch ``param.main_grad.add_(param.grad.data)`` hook
  (``megatron/model/distributed.py``): 6 B per parameter (fp16 gradient read, fp16 buffer
  read and written) per micro-batch on the busiest stage, at its DRAM bandwidth. Megatron versions with
  gradient-accumulation fusion (the weight-gradient GEMM accumulates into ``main_grad``) do it for the
  non-GEMM parameters only.

Usage: python benchmarks/calibrate_vtrain_multinode.py [--engine analytic|event] [--nic-gbps-per-node X]
       [--mechanisms]
"""

from __future__ import annotations

import argparse
from collections.abc import Iterable
from typing import NamedTuple

from calibrate_public_megatron_logs import padded_vocab
from calibrate_small_gpt import COLUMNS
from tilewright.engine.io.presets import load_system
from tilewright.engine.ir import GPTSpec, Mapping, Project, RunSettings
from tilewright.engine.ir.hardware import Component, SwitchAttach
from tilewright.engine.perf.collectives import collective
from tilewright.engine.plan.program import TrainingProgram
from tilewright.engine.plan.recurrence import run_table
from tilewright.engine.plan.timing import pass_parts
from tilewright.engine.simulate import make_plan, simulate

SOURCE = "VIA-Research/vTrain config/validation/multi @ f8dda8473a48b373b1d25f51f52d685bff5150c5"
SEQ_LEN = 2048  # max_length of every file
VOCAB = 50257  # vTrain's vTrainConfig default (the files name none); padded per tp as Megatron does
CONFIG_GBPS_PER_NODE = 800.0  # inter_node_bandwidth of every file
SYSTEM = "dgx-a100"


class Config(NamedTuple):
    """One file of config/validation/multi, as written there."""

    model: str
    gpus: int
    tp: int
    dp: int
    pp: int
    global_batch: int
    micro_batch: int
    layers: int
    hidden: int
    heads: int

    @property
    def file(self) -> str:
        return f"config_val_{self.model}_{self.tp}_{self.dp}_{self.pp}_{self.micro_batch}.json"

    @property
    def micro_batches(self) -> int:
        """Micro-batches each pipeline runs per iteration."""
        return self.global_batch // (self.dp * self.micro_batch)


# (model, num_gpus, tp, dp, pp, global batch, micro batch, layers, hidden, heads), in the repository's file order
CONFIGS: tuple[Config, ...] = tuple(Config(*row) for row in (
    ("175B", 512, 2, 8, 32, 1536, 2, 96, 12288, 96),
    ("175B", 512, 2, 8, 32, 1536, 3, 96, 12288, 96),
    ("175B", 512, 4, 4, 32, 1536, 2, 96, 12288, 96),
    ("175B", 512, 4, 4, 32, 1536, 3, 96, 12288, 96),
    ("175B", 512, 4, 4, 32, 1536, 4, 96, 12288, 96),
    ("175B", 512, 4, 4, 32, 1536, 6, 96, 12288, 96),
    ("175B", 512, 4, 8, 16, 1536, 2, 96, 12288, 96),
    ("175B", 512, 4, 8, 16, 1536, 3, 96, 12288, 96),
    ("175B", 512, 4, 8, 16, 1536, 4, 96, 12288, 96),
    ("175B", 512, 8, 2, 32, 1536, 2, 96, 12288, 96),
    ("175B", 512, 8, 2, 32, 1536, 3, 96, 12288, 96),
    ("175B", 512, 8, 2, 32, 1536, 4, 96, 12288, 96),
    ("175B", 512, 8, 2, 32, 1536, 6, 96, 12288, 96),
    ("175B", 512, 8, 4, 16, 1536, 2, 96, 12288, 96),
    ("175B", 512, 8, 4, 16, 1536, 3, 96, 12288, 96),
    ("175B", 512, 8, 4, 16, 1536, 4, 96, 12288, 96),
    ("175B", 512, 8, 4, 16, 1536, 6, 96, 12288, 96),
    ("175B", 512, 8, 8, 8, 1536, 2, 96, 12288, 96),
    ("175B", 512, 8, 8, 8, 1536, 3, 96, 12288, 96),
    ("175B", 512, 8, 8, 8, 1536, 4, 96, 12288, 96),
    ("18B", 256, 16, 16, 1, 1024, 2, 40, 6144, 48),
    ("18B", 256, 1, 32, 8, 1024, 4, 40, 6144, 48),
    ("18B", 256, 2, 16, 8, 1024, 8, 40, 6144, 48),
    ("18B", 256, 2, 32, 4, 1024, 4, 40, 6144, 48),
    ("18B", 256, 4, 32, 2, 1024, 2, 40, 6144, 48),
    ("18B", 256, 4, 32, 2, 1024, 4, 40, 6144, 48),
    ("18B", 256, 4, 32, 2, 1024, 8, 40, 6144, 48),
    ("18B", 256, 8, 16, 2, 1024, 2, 40, 6144, 48),
    ("18B", 256, 8, 32, 1, 1024, 16, 40, 6144, 48),
    ("18B", 256, 8, 32, 1, 1024, 2, 40, 6144, 48),
    ("18B", 256, 8, 32, 1, 1024, 4, 40, 6144, 48),
    ("18B", 256, 8, 32, 1, 1024, 8, 40, 6144, 48),
    ("18B", 256, 8, 4, 8, 1024, 32, 40, 6144, 48),
    ("18B", 256, 8, 4, 8, 1024, 8, 40, 6144, 48),
    ("18B", 256, 8, 8, 4, 1024, 2, 40, 6144, 48),
    ("39B", 512, 1, 32, 16, 1536, 3, 48, 8192, 64),
    ("39B", 512, 2, 16, 16, 1536, 2, 48, 8192, 64),
    ("39B", 512, 2, 16, 16, 1536, 3, 48, 8192, 64),
    ("39B", 512, 2, 16, 16, 1536, 6, 48, 8192, 64),
    ("39B", 512, 2, 32, 8, 1536, 2, 48, 8192, 64),
    ("39B", 512, 2, 32, 8, 1536, 3, 48, 8192, 64),
    ("39B", 512, 2, 32, 8, 1536, 6, 48, 8192, 64),
    ("39B", 512, 4, 16, 8, 1536, 12, 48, 8192, 64),
    ("39B", 512, 4, 16, 8, 1536, 2, 48, 8192, 64),
    ("39B", 512, 4, 16, 8, 1536, 3, 48, 8192, 64),
    ("39B", 512, 4, 16, 8, 1536, 4, 48, 8192, 64),
    ("39B", 512, 4, 16, 8, 1536, 6, 48, 8192, 64),
    ("39B", 512, 4, 32, 4, 1536, 2, 48, 8192, 64),
    ("39B", 512, 4, 32, 4, 1536, 3, 48, 8192, 64),
    ("39B", 512, 4, 32, 4, 1536, 4, 48, 8192, 64),
    ("39B", 512, 4, 32, 4, 1536, 6, 48, 8192, 64),
    ("39B", 512, 4, 8, 16, 1536, 12, 48, 8192, 64),
    ("39B", 512, 4, 8, 16, 1536, 2, 48, 8192, 64),
    ("39B", 512, 4, 8, 16, 1536, 3, 48, 8192, 64),
    ("39B", 512, 4, 8, 16, 1536, 4, 48, 8192, 64),
    ("39B", 512, 4, 8, 16, 1536, 6, 48, 8192, 64),
    ("39B", 512, 8, 16, 4, 1536, 12, 48, 8192, 64),
    ("39B", 512, 8, 16, 4, 1536, 2, 48, 8192, 64),
    ("39B", 512, 8, 16, 4, 1536, 3, 48, 8192, 64),
    ("39B", 512, 8, 16, 4, 1536, 4, 48, 8192, 64),
    ("39B", 512, 8, 16, 4, 1536, 6, 48, 8192, 64),
    ("39B", 512, 8, 16, 4, 1536, 8, 48, 8192, 64),
    ("39B", 512, 8, 32, 2, 1536, 12, 48, 8192, 64),
    ("39B", 512, 8, 32, 2, 1536, 2, 48, 8192, 64),
    ("39B", 512, 8, 32, 2, 1536, 3, 48, 8192, 64),
    ("39B", 512, 8, 32, 2, 1536, 4, 48, 8192, 64),
    ("39B", 512, 8, 32, 2, 1536, 6, 48, 8192, 64),
    ("39B", 512, 8, 32, 2, 1536, 8, 48, 8192, 64),
    ("39B", 512, 8, 4, 16, 1536, 12, 48, 8192, 64),
    ("39B", 512, 8, 4, 16, 1536, 2, 48, 8192, 64),
    ("39B", 512, 8, 4, 16, 1536, 24, 48, 8192, 64),
    ("39B", 512, 8, 4, 16, 1536, 3, 48, 8192, 64),
    ("39B", 512, 8, 4, 16, 1536, 4, 48, 8192, 64),
    ("39B", 512, 8, 4, 16, 1536, 6, 48, 8192, 64),
    ("39B", 512, 8, 4, 16, 1536, 8, 48, 8192, 64),
    ("39B", 512, 8, 8, 8, 1536, 12, 48, 8192, 64),
    ("39B", 512, 8, 8, 8, 1536, 2, 48, 8192, 64),
    ("39B", 512, 8, 8, 8, 1536, 24, 48, 8192, 64),
    ("39B", 512, 8, 8, 8, 1536, 3, 48, 8192, 64),
    ("39B", 512, 8, 8, 8, 1536, 4, 48, 8192, 64),
    ("39B", 512, 8, 8, 8, 1536, 6, 48, 8192, 64),
    ("39B", 512, 8, 8, 8, 1536, 8, 48, 8192, 64),
    ("3B", 64, 16, 4, 1, 512, 16, 30, 3072, 32),
    ("3B", 64, 16, 4, 1, 512, 2, 30, 3072, 32),
    ("3B", 64, 16, 4, 1, 512, 32, 30, 3072, 32),
    ("3B", 64, 16, 4, 1, 512, 4, 30, 3072, 32),
    ("3B", 64, 16, 4, 1, 512, 8, 30, 3072, 32),
    ("3B", 64, 1, 32, 2, 512, 2, 30, 3072, 32),
    ("3B", 64, 1, 32, 2, 512, 4, 30, 3072, 32),
    ("3B", 64, 1, 32, 2, 512, 8, 30, 3072, 32),
    ("3B", 64, 1, 64, 1, 512, 2, 30, 3072, 32),
    ("3B", 64, 1, 64, 1, 512, 4, 30, 3072, 32),
    ("3B", 64, 1, 64, 1, 512, 8, 30, 3072, 32),
    ("3B", 64, 2, 32, 1, 512, 16, 30, 3072, 32),
    ("3B", 64, 2, 32, 1, 512, 2, 30, 3072, 32),
    ("3B", 64, 2, 32, 1, 512, 4, 30, 3072, 32),
    ("3B", 64, 2, 32, 1, 512, 8, 30, 3072, 32),
    ("3B", 64, 4, 16, 1, 512, 16, 30, 3072, 32),
    ("3B", 64, 4, 16, 1, 512, 2, 30, 3072, 32),
    ("3B", 64, 4, 16, 1, 512, 32, 30, 3072, 32),
    ("3B", 64, 4, 16, 1, 512, 4, 30, 3072, 32),
    ("3B", 64, 4, 16, 1, 512, 8, 30, 3072, 32),
    ("3B", 64, 8, 8, 1, 512, 16, 30, 3072, 32),
    ("3B", 64, 8, 8, 1, 512, 2, 30, 3072, 32),
    ("3B", 64, 8, 8, 1, 512, 32, 30, 3072, 32),
    ("3B", 64, 8, 8, 1, 512, 4, 30, 3072, 32),
    ("3B", 64, 8, 8, 1, 512, 64, 30, 3072, 32),
    ("3B", 64, 8, 8, 1, 512, 8, 30, 3072, 32),
))


def nic_gbps_per_node(hw: Component) -> tuple[int, float]:
    """(GPUs per node, inter-node Gbps per node and direction) of a grown-cluster preset: the root fabric's
    per-device links times the devices of one node."""
    ic = hw.interconnect
    if ic is None or not hw.children:
        raise ValueError(f"{hw.name}: no inter-node fabric")
    per_node = hw.children[0].devices_per_instance()
    links = per_node if ic.attach is SwitchAttach.every_device else 1
    return per_node, links * ic.links * ic.link_bandwidth_bytes_per_s * 8 / 1e9


def with_nic_gbps_per_node(hw: Component, gbps: float) -> Component:
    """``hw`` with its inter-node fabric carrying ``gbps`` per node, shared equally by the node's GPUs."""
    per_node, now = nic_gbps_per_node(hw)
    ic = hw.interconnect
    assert ic is not None
    scaled = ic.model_copy(update={"link_bandwidth_bytes_per_s": ic.link_bandwidth_bytes_per_s * gbps / now})
    return hw.model_copy(update={"interconnect": scaled})


def project_for(c: Config, engine: str = "analytic", nic_gbps: float | None = None) -> Project:
    """The run as a project: a Megatron GPT (learned positions, LayerNorm, GeLU, biases), fp16, full recompute,
    1F1B, on the dgx-a100 preset (optionally with ``nic_gbps`` per node between nodes)."""
    spec = GPTSpec(name=f"gpt-{c.model}", layers=c.layers, hidden=c.hidden, heads=c.heads, seq_len=SEQ_LEN,
                   vocab=padded_vocab(VOCAB, c.tp))
    # vTrain measured with Microsoft's Megatron-DeepSpeed (VIA-Research/vTrain data/README.md @ f8dda84), whose
    # pre-July-2023 mpu layers (megatron/mpu/layers.py: copy_to_tensor_model_parallel_region, then F.linear) have no
    # gradient-accumulation fusion (--no-gradient-accumulation-fusion's behaviour: plan.grad_hooks) and block on
    # the input-gradient all-reduce (overlap_dgrad_comm's era default already reads that from full recompute); its
    # ParallelTransformerLayer.forward makes two blocking scalar copies per layer forward, whatever the launch flags
    # (host_framework 'megatron-deepspeed': plan.deepspeed_host)
    mapping = Mapping(tp=c.tp, pp=c.pp, dp=c.dp, micro_batch=c.micro_batch, global_batch=c.global_batch,
                      recompute="full", gradient_accumulation_fusion=False, host_framework="megatron-deepspeed")
    hw = load_system(SYSTEM)
    if nic_gbps is not None:
        hw = with_nic_gbps_per_node(hw, nic_gbps)
    return Project(name=c.file, hardware=hw, workload=spec, mapping=mapping,
                   run=RunSettings(dtype="fp16", engine=engine))


class Prediction(NamedTuple):
    config: Config
    seconds: float
    tflops_per_gpu: float
    shares: dict[str, float]  # breakdown category -> share of the iteration


def predict(c: Config, engine: str = "analytic", nic_gbps: float | None = None) -> Prediction:
    """Our iteration time, model TFLOP/s per GPU and breakdown shares of one configuration."""
    res = simulate(project_for(c, engine, nic_gbps), series=False)
    t = res.iteration_time_s
    b = dict(res.time_breakdown_s)
    b["compute"] = b.get("compute", 0.0) + b.get("recompute", 0.0)
    return Prediction(c, t, res.model_flops_per_iteration / t / c.gpus / 1e12,
                      {k: b.get(k, 0.0) / t for k in COLUMNS})


def _row(p: Prediction, base: Prediction | None) -> str:
    c = p.config
    vs = f" {100 * (p.seconds / base.seconds - 1):>+6.1f}%" if base else ""
    return (f"{c.model:>5} {c.gpus:>4} {c.tp:>2} {c.dp:>2} {c.pp:>2} {c.micro_batch:>2} {c.micro_batches:>3} "
            f"{p.seconds:>8.3f} {p.tflops_per_gpu:>7.1f} "
            + " ".join(f"{100 * p.shares[k]:>6.1f}%" for k in COLUMNS) + vs)


def summary(preds: list[Prediction]) -> None:
    """Mean TFLOP/s per GPU and mean breakdown shares by model, tp and pp."""
    print(f"{'slice':<10} {'n':>3} {'TFLOP/s':>7} " + " ".join(f"{k[:7]:>7}" for k in COLUMNS))
    slices: list[tuple[str, list[Prediction]]] = [("all", preds)]
    for label, key in (("", lambda c: c.model), ("tp", lambda c: c.tp), ("pp", lambda c: c.pp)):
        values = sorted({key(p.config) for p in preds}, key=lambda v: (isinstance(v, str), _size(v)))
        for v in values:
            slices.append((f"{label} {v}".strip(), [p for p in preds if key(p.config) == v]))
    for name, sel in slices:
        n = len(sel)
        parts = " ".join(f"{100 * sum(p.shares[k] for p in sel) / n:>6.1f}%" for k in COLUMNS)
        print(f"{name:<10} {n:>3} {sum(p.tflops_per_gpu for p in sel) / n:>7.1f} {parts}")


def _size(v: str | int) -> float:
    """Sort key of a slice value: a model's billions ("39B" -> 39) or the number itself."""
    return float(v[:-1]) if isinstance(v, str) else float(v)


def groups(preds: Iterable[Prediction]) -> dict[tuple[str, int, int], list[Prediction]]:
    """Predictions by (model, GPUs, global batch), each fastest first: the sets whose mappings compete."""
    out: dict[tuple[str, int, int], list[Prediction]] = {}
    for p in preds:
        out.setdefault((p.config.model, p.config.gpus, p.config.global_batch), []).append(p)
    return {k: sorted(v, key=lambda p: p.seconds) for k, v in sorted(out.items(), key=lambda kv: _size(kv[0][0]))}


def rank_order(preds: list[Prediction]) -> None:
    """Within each (model, GPUs, global batch) group, the mappings from fastest to slowest."""
    for (model, gpus, gb), sel in groups(preds).items():
        best = sel[0].seconds
        print(f"{model} on {gpus} GPUs, global batch {gb}: {len(sel)} mappings, fastest first "
              "(tp-dp-pp-mb: seconds, x fastest)")
        for i, p in enumerate(sel, 1):
            c = p.config
            label = f"{c.tp}-{c.dp}-{c.pp}-{c.micro_batch}"
            print(f"  {i:>2}. {label:<12} {p.seconds:>8.3f} s  x{p.seconds / best:.3f}")


GRAD_ACC_BYTES = 6  # per parameter and micro-batch: fp16 gradient read, fp16 main_grad read and written


def mechanisms(c: Config, nic_gbps: float | None = None) -> dict[str, float]:
    """Shares of the predicted iteration of the Megatron mechanisms the module docstring lists (pp > 1)."""
    p = project_for(c, "analytic", nic_gbps)
    plan = make_plan(p.model_copy(update={"mapping": p.mapping.model_copy(update={"pipeline_p2p": "overlap"})}))
    total = simulate(plan.project, plan, series=False).iteration_time_s
    program = TrainingProgram(plan)
    send = program.send_times()
    dur: dict[tuple, float] = {}
    period = []
    for r, st in enumerate(plan.stages):
        f, rc, b = (pass_parts(plan, r, st.passes.get((0, k)))[0] for k in ("F", "R", "B"))
        dur[(r, 0, "F")], dur[(r, 0, "B")] = f, rc + b
        period.append(f + rc + b)
    base = max(s.finish for s in run_table(program.table, dur, send))
    last = plan.pp - 1
    blocking = {(r, 0, "F"): dur[(r, 0, "F")] + (send[(r, False)] if r < last else 0.0) for r in range(plan.pp)}
    blocking |= {(r, 0, "B"): dur[(r, 0, "B")] + (send[(r - 1, True)] if r > 0 else 0.0) for r in range(plan.pp)}
    sync = max(s.finish for s in run_table(program.table, blocking, dict.fromkeys(send, 0.0)))
    gather = 0.0
    if plan.tp > 1:
        group = plan.stages[1].groups[0]
        gather = collective(plan.hw, "all-gather", group, plan.p2p_bytes[0] * plan.tp).time(plan.hw)
    middle = period[1] if plan.pp > 2 else period[0]
    busiest = max(range(plan.pp), key=lambda r: plan.stages[r].params)
    acc = (GRAD_ACC_BYTES * plan.stages[busiest].params * plan.micro_batches
           / plan.stages[busiest].dev.dram_bandwidth)
    return {"sync p2p": (sync - base) / total, "gather": 2 * plan.micro_batches * gather / total,
            "tied AR": plan.tied_collective().time(plan.hw) / total, "last +": period[last] / middle - 1,
            "grad acc": acc / total}


def print_mechanisms(configs: Iterable[Config], nic_gbps: float | None) -> None:
    """The ``mechanisms`` of every pipelined configuration, one row each."""
    names = ("sync p2p", "gather", "tied AR", "last +", "grad acc")
    print("Megatron mechanisms around the pipeline, % of the predicted iteration ('last +': % of a middle stage)")
    print(f"{'model':>5} {'tp':>2} {'dp':>2} {'pp':>2} {'mb':>2} " + " ".join(f"{n:>8}" for n in names))
    for c in configs:
        if c.pp < 2:
            continue
        got = mechanisms(c, nic_gbps)
        print(f"{c.model:>5} {c.tp:>2} {c.dp:>2} {c.pp:>2} {c.micro_batch:>2} "
              + " ".join(f"{100 * got[n]:>7.2f}%" for n in names))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--engine", default="analytic", choices=["event", "analytic"])
    ap.add_argument("--nic-gbps-per-node", type=float, default=None, metavar="X",
                    help=f"what-if: inter-node Gbps per node (the configurations state {CONFIG_GBPS_PER_NODE:g})")
    ap.add_argument("--mechanisms", action="store_true",
                    help="only the sizes of the pipeline mechanisms of the module docstring, per pipelined row")
    args = ap.parse_args()
    if args.mechanisms:
        print_mechanisms(CONFIGS, args.nic_gbps_per_node)
        return
    per_node, gbps = nic_gbps_per_node(load_system(SYSTEM))
    print(f"{len(CONFIGS)} configurations from {SOURCE}; {SYSTEM}: {per_node} GPUs per node, "
          f"{gbps:g} Gbps per node between nodes (the configurations: {CONFIG_GBPS_PER_NODE:g})")
    what_if = args.nic_gbps_per_node
    if what_if is not None:
        print(f"WHAT-IF: {what_if:g} Gbps per node between nodes ({what_if / per_node:g} per GPU); "
              "the last column is the change against the preset")
    print(f"{'model':>5} {'gpus':>4} {'tp':>2} {'dp':>2} {'pp':>2} {'mb':>2} {'m':>3} {'iter s':>8} {'TFLOP/s':>7} "
          + " ".join(f"{k[:7]:>7}" for k in COLUMNS) + (f" {'vs pre':>7}" if what_if is not None else ""))
    preds = []
    for c in CONFIGS:
        p = predict(c, args.engine, what_if)
        base = predict(c, args.engine) if what_if is not None else None
        print(_row(p, base))
        preds.append(p)
    summary(preds)
    rank_order(preds)


if __name__ == "__main__":
    main()

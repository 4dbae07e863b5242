"""Predictions against public single-node Megatron-LM timings (``benchmarks/data/public_megatron_logs.csv``).

Why: held-out single-node measurements of small GPTs (vTrain-style, 2-8 A100s) say we predict too short an
iteration. Those are not ours to see, so this checks the same regime on timings anyone can read: the
iteration times Megatron-LM's own CI stores beside its functional tests (one DGX A100 or DGX H100 node, 8 GPUs; GPT of
12 layers × hidden 512 × 8 heads, seq 1024, micro-batch 4, global batch 32, in several tp × pp layouts, and
a 7B GPT at seq 8192). Every row carries its source file at a fixed commit and its caveats (the CI runs
deterministic kernels, logs parameter norms and gradient zero counts, and times at level 2: host work our
model does not contain). User-pasted logs in GitHub issues were searched for too; none had a complete
single-node configuration and a steady-state time, so none is here (skipped: bigscience-workshop's
Megatron-DeepSpeed gpt2 notes, V100 over 4-16 nodes; NVIDIA's Megatron-LM v1.0 blog table, V100 with the
model dimensions unstated; alibaba/Megatron-LLaMA issue 24, A800 LLaMA-2 7B without micro-batch or sequence;
NVIDIA/nccl issue 743, BERT at its first iterations; NVIDIA/Megatron-LM issue 516, no steady-state line).
No row has tp 8: Megatron's CI runs its small GPT at tp 1, 2 and 4 only.

Both hosts: Megatron-LM's CI stores three Megatron-Core tests of the same GPT (``..._mcore_tp1_pp2``, ``_tp1_pp4``,
``_tp4_pp1_resume_torch``, Megatron-Core's GPT with the local layer spec) on DGX A100 (``golden_values_dev.json``)
and on DGX H100 (``golden_values_dev_dgx_h100.json`` beside it): the ``ci-mcore-a100-*`` and ``ci-mcore-h100-*``
rows, predicted on the dgx-a100 and dgx-h100 presets (the legacy-model nightly tests have no H100 golden file).
The same job on two hosts separates what scales with the GPU from what scales with the CPU: ``pairs`` prints each
test's measured and predicted A100 / H100 ratio and the ratio of their gaps. Where the model is host-bound it
predicts a ratio near 1 (the presets price both hosts' calls alike), where it is device-bound the GPUs' ratio; the
CI measures 1.4-1.5 for every layout, tp 4 included (the golden files come from different commits of 2024-25, so
software changes between them are not separated from the hosts).

Transformer Engine rows (``ci-te-*``): two Megatron-Core tests with the TE layer spec at tp 1, pp 1, dp 8
(``gpt3_mcore_te_tp1_pp1_resume_torch_dist_uniform_full_recompute``, ``..._dist_optimizer``: the two differ in two
options, full recompute against the distributed optimizer), each on DGX A100 and DGX H100, timing level 0. The
same tests' GB200 golden files read 106.7 and 82.2 ms, slower than H100's 79.6 and 57.7 with a faster GPU: the job
is host-bound and its host's speed matters (TE's own measurement of ``torch.nn.Linear``'s CPU time is 2.75× as
long on GB200 as on a DGX H100, NVIDIA/TransformerEngine issue #2053; no GB200 preset, so no row).

**How far the CI's times move between versions** (read before taking this check's mean as the model's error):
the same test's stored golden files differ by more than this check's per-row spread. Other stored versions of the
two H100 TE files read about 67 and 93 ms (57394d24, 67ec0fd2) against 57.7 and 79.6; the DGX A100 "lts"
container's files read about 77 and 118 ms against the dev container's 107.0 and 162.1 (39 % apart);
Megatron-LM pull request #7217 re-goldened 60 files from the 26.08 CI run, moving these tests' H100 times by
−37 to −70 % and GB200's by +75 to +89 %, and pull request #4238 moved part of the CI to GitHub Actions runners on
AWS. So a row's measured time carries the container and the CI machine of its commit, not only Megatron's code:
the mean error here is an order of magnitude, good to ±15-40 % per row, not a target to fit (nothing is fitted
to it).

Prints, per row: measured and predicted iteration time, the error (predicted / measured − 1; negative = we
are too fast), the iteration's time breakdown (shares of the predicted iteration, the categories of
``calibrate_small_gpt.COLUMNS``), the share of device pass time spent waiting for the host (``dispatch``)
and the share of layer time outside the ops' roofline (``fixed``), and the gap per layer pass (``gap/lp``, ms:
``gap_per_layer_pass``); then mean |error|, mean signed error and mean gap per layer pass overall, by GPU, by tp,
by source family and by precision; then the A100 / H100 pairs (``pairs``). No physics is changed here:
predictions only. The gap per layer pass says where the missing time lives: on the small-GPT rows it is about the
same at tp 1, 2 and 4 and pp 1, 2 and 4 within a family (work per layer and micro-batch that does not shrink with
tp: host work, not device work), and differs by family (the 2023 Selene runs against the 2024-25 nightly ones).

The CI's own training-loop options are columns too, each a mapping field, read from the row's cited config
(``plan.train_logging``, ``plan.grad_hooks``): ``gradient_accumulation_fusion`` (every config passes
--no-gradient-accumulation-fusion), ``log_params_norm``, ``log_num_zeros_in_grad``, ``timing_log_level`` (2 for the
12-layer tests, 0 for the 7B ones) and ``check_for_nan_in_loss_and_grad`` (Megatron-LM's default from late 2023,
none of the configs turns it off: on for the 2024-25 rows; off for the 2023 rows, whose commits' dates are not
known here). ``--defaults all`` (or a comma list of those columns) leaves them at the mapping's defaults: the
predictions without them, for comparison. Not columns: --deterministic-mode and NCCL_ALGO (no cost modelled).

``host_framework`` (``plan.framework_host``), also a mapping field from the row's config, says whose Python issues
the layers' kernels: 'mcore' for the legacy-model rows (``megatron/model/transformer.py`` builds its linears from
``megatron.core.tensor_parallel`` from 2023 on) and the JET Megatron-Core row (``use_te: False``: the local layer
spec), 'mcore-te' for the 2023 ``pretrain_gpt_core.py`` rows (their Megatron-Core layers hard-code Transformer
Engine's modules whatever ``--transformer-impl`` says) and the 7B rows. ``--defaults host_framework`` gives the
run's era default instead (full recompute: Megatron-LM v2.x's counts; else 'mcore-te'). The summary adds a slice
per framework.

Columns read by nothing in the model, only by ``--loop``: ``log_interval``, ``log_timers_to_tensorboard``,
``log_memory_to_tensorboard`` and ``deterministic_mode`` (each from the row's cited config: 1 / on / nightly only /
nightly and 7B; the 7B configs log every 2 iterations). ``--loop`` prints, per row, the host work of Megatron's
training loop the model lacks (``megatron_ci_loop``: the timer reports, the rest of ``training_log``; the
optimizer's per-tensor Python is the model's now, ``plan.train_step``), in ms and as a share of the gap, and the
gap left; a diagnostic, not a correction.

``--host-scale F``: a diagnostic what-if, not a calibration: every host cost of the system preset (per-kernel
dispatch, per-call framework time, per-synchronisation idle, per-collective call, per-backward start-up:
``host_dispatch_s``, ``host_call_s``, ``host_sync_s``, ``host_collective_s``, ``host_backward_s``) multiplied by F
in memory, to see how much of the gap host-side time could account for.

Usage: python benchmarks/calibrate_public_megatron_logs.py [--engine analytic|event] [--host-scale F]
       [--defaults all|COLUMN,...] [--loop]
"""

from __future__ import annotations

import argparse
import csv
from pathlib import Path

from calibrate_small_gpt import COLUMNS, shares
from megatron_ci_loop import loop_costs
from tilewright.engine.io.presets import load_system
from tilewright.engine.ir import GPTSpec, Mapping, Project, RunSettings
from tilewright.engine.simulate import simulate

HOST_COSTS = ("host_dispatch_s", "host_call_s", "host_sync_s", "host_collective_s", "host_backward_s")  # scaled

CSV = Path(__file__).resolve().parent / "data" / "public_megatron_logs.csv"
SYSTEMS = {"A100": "dgx-a100", "H100": "dgx-h100"}  # GPU name prefix in the CSV → system preset
# Megatron-Core's fused (flash) attention, costed as calibrate_nemo_h100 costs it: the fusion chain
# attention → softmax keeps the scores on chip, and selective recomputation of the core stores what a flash
# kernel stores (it recomputes the scores inside its backward).
FLASH = [["attention", "softmax"]]
MAKE_VOCAB_DIVISIBLE_BY = 128  # Megatron's --make-vocab-size-divisible-by default (arguments.py)
INT_FIELDS = ("gpus", "layers", "hidden", "heads", "kv_heads", "seq", "vocab", "mb", "gbs", "tp", "pp", "dp",
              "interleave", "zero", "log_interval")
BOOL_FIELDS = ("tie_embeddings", "overlap_grad_reduce", "overlap_param_gather", "gradient_accumulation_fusion",
               "log_params_norm", "log_num_zeros_in_grad", "check_for_nan_in_loss_and_grad",
               "log_timers_to_tensorboard", "log_memory_to_tensorboard", "deterministic_mode")
# the CI's training-loop options and host framework: mapping fields of the same name (module docstring)
LOOP_OPTIONS = ("gradient_accumulation_fusion", "log_params_norm", "log_num_zeros_in_grad", "timing_log_level",
                "check_for_nan_in_loss_and_grad", "host_framework")
FRAMEWORKS = ("megatron-lm", "mcore", "mcore-te")  # the CSV's host_framework values (mapping.host_framework)


def rows(path: Path = CSV) -> list[dict]:
    """The CSV's rows with numbers and flags typed; raises on a missing or malformed field."""
    out = []
    with path.open(newline="") as f:
        for raw in csv.DictReader(f):
            if None in raw or any(v is None for v in raw.values()):
                raise ValueError(f"{raw.get('id')}: wrong number of fields")
            r: dict = dict(raw)
            for k in INT_FIELDS:
                r[k] = int(raw[k])
            for k in BOOL_FIELDS:
                if raw[k] not in ("true", "false"):
                    raise ValueError(f"{raw['id']}: {k} must be true or false, not {raw[k]!r}")
                r[k] = raw[k] == "true"
            level = raw["timing_log_level"]
            r["timing_log_level"] = int(level) if level != "" else None
            r["measured_ms"] = float(raw["measured_ms"])
            if (fw := raw["host_framework"]) not in FRAMEWORKS:
                raise ValueError(f"{raw['id']}: host_framework must be one of {FRAMEWORKS}, not {fw!r}")
            out.append(r)
    return out


def padded_vocab(vocab: int, tp: int) -> int:
    """Megatron's padded vocabulary: the next multiple of 128 × tp (``_vocab_size_with_padding``), so every
    tensor-parallel rank holds an equal, GEMM-friendly slice of the embedding and the logits."""
    multiple = MAKE_VOCAB_DIVISIBLE_BY * tp
    return -(-vocab // multiple) * multiple


def system_for(gpu: str) -> str:
    """The system preset of a row's GPU (the CSV names it as the source does, e.g. 'A100-SXM (DGX A100)')."""
    for prefix, preset in SYSTEMS.items():
        if gpu.startswith(prefix):
            return preset
    raise ValueError(f"no system preset for GPU {gpu!r}")


def project_for(r: dict, engine: str = "analytic", defaults: tuple[str, ...] = ()) -> Project:
    """The row as a project: a Megatron GPT (learned positions, LayerNorm, GeLU, biases) on one node, with its
    training-loop options (``LOOP_OPTIONS``) but those named in ``defaults``."""
    spec = GPTSpec(name=r["id"], layers=r["layers"], hidden=r["hidden"], heads=r["heads"],
                   kv_heads=r["kv_heads"] if r["kv_heads"] != r["heads"] else None, seq_len=r["seq"],
                   vocab=padded_vocab(r["vocab"], r["tp"]), tie_embeddings=r["tie_embeddings"])
    flash = r["attention"] == "flash"
    recompute = r["recompute"] if r["recompute"] != "none" or not flash else "selective"
    mapping = Mapping(tp=r["tp"], pp=r["pp"], dp=r["dp"], interleave=r["interleave"], micro_batch=r["mb"],
                      global_batch=r["gbs"], recompute=recompute, zero=r["zero"],
                      overlap_grad_reduce=r["overlap_grad_reduce"], overlap_param_gather=r["overlap_param_gather"],
                      fusion=FLASH if flash else [],
                      **{k: r[k] for k in LOOP_OPTIONS if k not in defaults})
    return Project(name=r["id"], hardware=load_system(system_for(r["gpu"])), workload=spec, mapping=mapping,
                   run=RunSettings(dtype=r["precision"], engine=engine))


def scaled_host(p: Project, factor: float) -> Project:
    """``p`` with every host cost (``HOST_COSTS``) anywhere in its hardware multiplied by ``factor``."""
    if factor == 1.0:
        return p
    d = p.model_dump(mode="json")

    def walk(node: object) -> None:
        if isinstance(node, dict):
            for k, v in node.items():
                if k in HOST_COSTS and isinstance(v, (int, float)):
                    node[k] = v * factor
                else:
                    walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)

    walk(d["hardware"])
    return Project.model_validate(d)


def micro_batches(r: dict) -> int:
    """Micro-batches each pipeline runs per iteration (Megatron's number of micro-batches)."""
    return r["gbs"] // (r["mb"] * r["dp"])


def family(r: dict) -> str:
    """The source family of a row: its id up to the layout (ci-nightly, ci-2023, ci-2023-core, ci-jet, ci-7b,
    ci-mcore-a100, ci-mcore-h100, ci-te-a100, ci-te-h100)."""
    parts = r["id"].split("-")
    return "-".join(parts[:3]) if parts[2] == "core" or pair_key(r) is not None else "-".join(parts[:2])


def layer_passes(r: dict) -> float:
    """Layer passes (one layer's forward and backward of one micro-batch) on a pipeline's critical path: a stage
    holds layers / pp of them and, in 1F1B, runs m micro-batches plus the fill and drain of (pp − 1) / v (the
    bubble, v the interleaving), so (m + (pp − 1) / v) × layers / pp; m × layers without pipelining."""
    m, pp, v = micro_batches(r), r["pp"], r["interleave"]
    return (m + (pp - 1) / v) * r["layers"] / pp


def gap_per_layer_pass(r: dict, predicted_s: float) -> float:
    """Measured minus predicted iteration time per layer pass (``layer_passes``), in seconds. A diagnostic: if
    what the model misses is per layer (host work, say), this is about the same across a family's layouts
    (tp 1-4, pp 1-4); if it is per micro-batch or per iteration, it grows as layers per stage shrink."""
    return (1e-3 * r["measured_ms"] - predicted_s) / layer_passes(r)


def gpu_name(r: dict) -> str:
    """The row's GPU as its system preset knows it ('A100', 'H100': the prefix of the CSV's ``gpu``)."""
    return next(prefix for prefix in SYSTEMS if r["gpu"].startswith(prefix))


def pair_key(r: dict) -> str | None:
    """The test a ``ci-mcore-<gpu>-<layout>`` or ``ci-te-<gpu>-<layout>`` row measures, the same for its A100 and
    H100 rows; None for others."""
    parts = r["id"].split("-")
    if len(parts) < 4 or parts[:2] not in (["ci", "mcore"], ["ci", "te"]) or parts[2].upper() not in SYSTEMS:
        return None
    return "-".join(parts[:2] + parts[3:])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--engine", default="analytic", choices=["event", "analytic"])
    ap.add_argument("--host-scale", type=float, default=1.0, help="what-if: multiply the host costs by this")
    ap.add_argument("--defaults", default="", help="'all' or a comma list of LOOP_OPTIONS left at the mapping's "
                    "defaults (the predictions without those CI options)")
    ap.add_argument("--loop", action="store_true", help="print the training loop's unmodelled host work per row")
    args = ap.parse_args()
    defaults = LOOP_OPTIONS if args.defaults == "all" else tuple(x for x in args.defaults.split(",") if x)
    unknown = set(defaults) - set(LOOP_OPTIONS)
    if unknown:
        ap.error(f"--defaults: not a loop option: {', '.join(sorted(unknown))} (one of {', '.join(LOOP_OPTIONS)})")
    if defaults:
        print(f"WITHOUT the CI options {', '.join(defaults)} (the mapping's defaults)")
    if args.host_scale != 1.0:
        print(f"WHAT-IF: host costs ({', '.join(HOST_COSTS)}) x {args.host_scale:g}; not the calibrated model")
    head = (f"{'id':<31} {'tp':>2} {'pp':>2} {'dp':>2} {'mb':>2} {'m':>2} {'meas ms':>8} {'pred ms':>8} "
            f"{'gap ms':>7} {'error':>7} "
            + " ".join(f"{c[:7]:>7}" for c in COLUMNS) + f" {'dispat':>6} {'fixed':>6} {'gap/lp':>6}")
    print(head)
    results: list[tuple[dict, float, dict[str, float]]] = []  # row, error, breakdown shares
    loops: list[tuple[dict, float, object]] = []  # row, predicted seconds, megatron_ci_loop.LoopCosts
    for r in rows():
        p = scaled_host(project_for(r, args.engine, defaults), args.host_scale)
        res = simulate(p)
        t = res.iteration_time_s
        b = dict(res.time_breakdown_s)
        b["compute"] = b.get("compute", 0.0) + b.get("recompute", 0.0)
        share = {c: b.get(c, 0.0) / t for c in COLUMNS}
        wait, fixed, _attn = shares(p)
        err = 1e3 * t / r["measured_ms"] - 1
        print(f"{r['id']:<31} {r['tp']:>2} {r['pp']:>2} {r['dp']:>2} {r['mb']:>2} {micro_batches(r):>2} "
              f"{r['measured_ms']:>8.1f} {1e3 * t:>8.1f} {r['measured_ms'] - 1e3 * t:>7.1f} {100 * err:>+6.1f}% "
              + " ".join(f"{100 * share[c]:>6.1f}%" for c in COLUMNS) + f" {100 * wait:>5.1f}% {100 * fixed:>5.1f}%"
              + f" {1e3 * gap_per_layer_pass(r, t):>6.2f}")
        results.append((r, err, share))
        if args.loop:
            loops.append((r, t, loop_costs(r, p)))
    summary(results)
    pairs(results)
    if loops:
        loop_table(loops)


def loop_table(loops: list) -> None:
    """Per row: the gap (measured − predicted), each unmodelled loop cost (``megatron_ci_loop``) in ms and their
    sum's share of the gap, and what is left (diagnostic only)."""
    print("UNMODELLED TRAINING-LOOP HOST WORK per iteration (benchmarks/megatron_ci_loop.py; not in the model)")
    print(f"{'id':<31} {'gap ms':>7} {'timers':>7} {'log':>6} {'sum':>6} {'of gap':>7} {'left ms':>8} {'left %':>7}")
    for r, t, c in loops:
        gap = r["measured_ms"] - 1e3 * t
        total = 1e3 * c.total
        share = f"{100 * total / gap:>6.0f}%" if gap > 0 else f"{'-':>7}"
        print(f"{r['id']:<31} {gap:>7.1f} {1e3 * c.timer_reports:>7.2f} {1e3 * c.training_log:>6.2f} "
              f"{total:>6.2f} {share} {gap - total:>8.1f} "
              f"{100 * ((1e3 * t + total) / r['measured_ms'] - 1):>+6.1f}%")
    print(f"{'family: mean share of gap':<31} {'n':>3} {'timers':>6} {'log':>6} {'sum':>6}")
    for fam in sorted({family(r) for r, _, _ in loops}):
        sel = [(r["measured_ms"] - 1e3 * t, c) for r, t, c in loops if family(r) == fam]
        sel = [(g, c) for g, c in sel if g > 0]
        if not sel:
            continue
        parts = [sum(1e3 * getattr(c, k) / g for g, c in sel) / len(sel)
                 for k in ("timer_reports", "training_log", "total")]
        print(f"{fam:<31} {len(sel):>3} " + " ".join(f"{100 * x:>5.0f}%" for x in parts))


def pairs(results: list[tuple[dict, float, dict[str, float]]]) -> None:
    """Per test measured on both hosts: measured and predicted iteration times and their A100 / H100 ratios. The
    host-bound share of an iteration scales with the host's per-call cost, the rest with the GPU: a predicted
    ratio below the measured one says the model gives the slower host too little of the time."""
    by_test: dict[str, dict[str, tuple[float, float]]] = {}
    for r, err, _ in results:
        if (key := pair_key(r)) is not None:
            by_test.setdefault(key, {})[gpu_name(r)] = (r["measured_ms"], r["measured_ms"] * (1 + err))
    both = {k: v for k, v in by_test.items() if set(v) >= {"A100", "H100"}}
    if not both:
        return
    print(f"{'test on both hosts':<22} {'A100 meas':>9} {'pred':>7} {'H100 meas':>9} {'pred':>7} "
          f"{'A/H meas':>8} {'A/H pred':>8} {'A/H gap/lp':>10}")
    for key, v in sorted(both.items()):
        (am, ap), (hm, hp) = v["A100"], v["H100"]
        # both rows run the same layout, so their layer passes are equal: the gaps' ratio is the per-pass ratio
        gaps = f"{(am - ap) / (hm - hp):>10.2f}" if hm > hp else f"{'-':>10}"
        print(f"{key:<22} {am:>9.1f} {ap:>7.1f} {hm:>9.1f} {hp:>7.1f} {am / hm:>8.2f} {ap / hp:>8.2f} {gaps}")


def summary(results: list[tuple[dict, float, dict[str, float]]]) -> None:
    """Mean |error|, mean signed error, mean breakdown and mean gap per layer pass (ms) overall and by GPU, tp,
    source family and precision."""
    print(f"{'slice':<22} {'n':>3} {'mean|err|':>9} {'mean err':>9} " + " ".join(f"{c[:7]:>7}" for c in COLUMNS)
          + f" {'gap/lp':>6}")
    slices: list[tuple[str, list]] = [("all", results)]
    for label, key in (("gpu", gpu_name), ("tp", lambda r: r["tp"]), ("", family), ("", lambda r: r["precision"]),
                       ("host", lambda r: r["host_framework"])):
        for v in sorted({key(x[0]) for x in results}, key=str):
            slices.append((f"{label} {v}".strip(), [x for x in results if key(x[0]) == v]))
    for name, sel in slices:
        n = len(sel)
        mean_abs = sum(abs(e) for _, e, _ in sel) / n
        mean = sum(e for _, e, _ in sel) / n
        parts = " ".join(f"{100 * sum(s[c] for _, _, s in sel) / n:>6.1f}%" for c in COLUMNS)
        per_pass = sum(gap_per_layer_pass(r, 1e-3 * r["measured_ms"] * (1 + e)) for r, e, _ in sel) / n
        print(f"{name:<22} {n:>3} {100 * mean_abs:>8.1f}% {100 * mean:>+8.1f}% {parts} {1e3 * per_pass:>6.2f}")


if __name__ == "__main__":
    main()

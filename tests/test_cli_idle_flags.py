"""``tilewright run`` refuses a flag the simulation would not read (exit 2 naming it), and keeps it where it
acts. Each idle case is shown idle first through ``--set`` (which bypasses the flag check): the field changes
nothing there, so before the refusal the flag ran silently as if it had not been typed. Each kept case is
shown to change the result, so the refusal does not hide a working option."""

from __future__ import annotations

import json

import pytest
from tilewright.engine.cli import main

DENSE = ["run", "--system", "dgx-a100", "--model", "gpt", "--layers", "4", "--hidden", "512", "--heads", "8",
         "--seq-len", "256", "--vocab", "4096", "--engine", "analytic", "--json", "--quiet"]
MOE = [*DENSE, "--moe-experts", "4", "--moe-top-k", "2"]
TRAIN_8 = ["--devices", "8", "--dp", "8", "--global-batch", "16"]
FITS = ["--prompt-tokens", "192", "--output-tokens", "64"]  # an inference sequence within the 256-token context


def _metrics(capsys: pytest.CaptureFixture[str], *args: str) -> dict:
    assert main(list(args)) == 0
    return json.loads(capsys.readouterr().out)


def _refused(capsys: pytest.CaptureFixture[str], flag: str, *args: str) -> str:
    assert main(list(args)) == 2
    err = capsys.readouterr().err
    assert f"{flag}:" in err and "Traceback" not in err
    return err


def test_expert_imbalance_without_experts_is_refused(capsys):
    # through --set the field is refused too, by name (``plan.idle_fields``)
    assert "no mixture-of-experts" in _refused(capsys, "mapping.expert_imbalance", *DENSE, *TRAIN_8, "--set",
                                               "mapping.expert_imbalance=2")
    assert "no mixture-of-experts" in _refused(capsys, "--expert-imbalance", *DENSE, *TRAIN_8,
                                               "--expert-imbalance", "2")
    # with experts over several expert ranks the busiest rank's extra tokens cost compute (this small job is
    # host-bound, so the iteration time may hide it behind kernel launches); at ep 1 there is no busier rank
    balanced = _metrics(capsys, *MOE, *TRAIN_8, "--ep", "4")["time_breakdown_s"]["compute"]
    skewed = _metrics(capsys, *MOE, *TRAIN_8, "--ep", "4", "--expert-imbalance", "2")["time_breakdown_s"]["compute"]
    assert skewed > balanced


def test_expert_imbalance_past_the_run_s_ep_is_refused(capsys):
    """4 experts, top-2, ep 2: a rank's 2 experts take at most both slots of a token against a mean of 2/2 = 1,
    so its load is at most twice the mean (experts / top_k is 2 as well); ep 4: each rank holds one expert and
    takes at most one slot against a mean of 2/4, twice again. 2 runs, 2.5 is refused naming the flag."""
    assert main([*MOE, *TRAIN_8, "--ep", "2", "--expert-imbalance", "2"]) == 0
    capsys.readouterr()
    assert main([*MOE, *TRAIN_8, "--ep", "2", "--expert-imbalance", "2.5"]) == 2
    err = capsys.readouterr().err
    assert "--expert-imbalance 2.5" in err and "mapping.expert_imbalance: 2.5" in err and "give at most 2," in err
    assert "Traceback" not in err


@pytest.mark.parametrize("flags", [["--overlap-ep-comm"], ["--overlap-ep-comm", "--delay-wgrad-compute"]])
def test_expert_overlap_without_experts_is_refused(capsys, flags):
    _refused(capsys, "--overlap-ep-comm", *DENSE, *TRAIN_8, *flags)
    assert main([*MOE, *TRAIN_8, "--ep", "4", *flags]) == 0


def test_overlap_param_gather_needs_sharded_parameters(capsys):
    base = _metrics(capsys, *DENSE, *TRAIN_8)["iteration_time_s"]
    idle = _metrics(capsys, *DENSE, *TRAIN_8, "--set", "mapping.overlap_param_gather=true")["iteration_time_s"]
    assert idle == base
    assert "--zero" in _refused(capsys, "--overlap-param-gather", *DENSE, *TRAIN_8, "--overlap-param-gather")
    # ZeRO-1: the updated weights' gather hides behind the next forward, so less data-parallel time is exposed
    zero1 = _metrics(capsys, *DENSE, *TRAIN_8, "--zero", "1")["time_breakdown_s"]["dp_comm"]
    hidden = _metrics(capsys, *DENSE, *TRAIN_8, "--zero", "1", "--overlap-param-gather")["time_breakdown_s"]["dp_comm"]
    assert hidden < zero1
    assert main([*DENSE, *TRAIN_8, "--fsdp", "--overlap-param-gather"]) == 0


@pytest.mark.parametrize(("flag", "value"), [("--dp", "8"), ("--devices", "8")])
def test_inference_replicas_are_refused(capsys, flag, value):
    """An inference run simulates one tensor group: --dp 8 (or 8 devices at tp 1) ran on 1 device."""
    one = _metrics(capsys, *DENSE, "--mode", "infer", *FITS, "--batch", "8")
    idle = _metrics(capsys, *DENSE, "--mode", "infer", *FITS, "--batch", "8", "--set", "mapping.dp=8", "--set",
                    "mapping.global_batch=8")
    assert idle["devices"] == one["devices"] == 1 and idle["iteration_time_s"] == one["iteration_time_s"]
    _refused(capsys, flag, *DENSE, "--mode", "infer", *FITS, flag, value)
    assert _metrics(capsys, *DENSE, "--mode", "infer", *FITS, "--devices", "8", "--tp", "8")["devices"] == 8


@pytest.mark.parametrize(
    ("flag", "field"),
    [(["--global-batch", "8"], "mapping.global_batch=8"),
     (["--micro-batch", "2"], "mapping.micro_batch=2 mapping.global_batch=2"),
     (["--no-gradient-accumulation-fusion"], "mapping.gradient_accumulation_fusion=false"),
     (["--grad-reduce-dtype", "fp32"], "mapping.grad_reduce_in_fp32=true"),
     (["--fused-cross-entropy"], "mapping.fused_cross_entropy=true"),
     (["--moe-router-fusion"], "mapping.moe_router_fusion=true")],
    ids=["global-batch", "micro-batch", "no-grad-acc-fusion", "grad-reduce-dtype", "fused-ce", "router-fusion"],
)
def test_training_batch_and_gradient_flags_in_inference_are_refused(capsys, flag, field):
    """Each ran an inference request unchanged (shown through --set, on an MoE model so the router's flag has a
    router to act on) and is refused by the flag typed; --batch is what an inference run serves."""
    infer = [*MOE, "--mode", "infer", *FITS, "--batch", "4"]
    one = _metrics(capsys, *infer)
    idle = _metrics(capsys, *infer, *(a for f in field.split() for a in ("--set", f)))
    assert (idle["iteration_time_s"], idle["peak_memory_bytes"]) == (one["iteration_time_s"], one["peak_memory_bytes"])
    err = _refused(capsys, flag[0], *infer, *flag)
    assert "training only" in err
    if flag[0] in ("--global-batch", "--micro-batch"):
        assert "--batch" in err
    assert main([*MOE, *TRAIN_8, *flag]) == 0  # a training run takes it


def test_pipeline_p2p_without_a_pipeline_is_refused(capsys):
    """pp 1 has no pipeline sends: every --pipeline-p2p mode ran the same iteration without a word."""
    runs = [_metrics(capsys, *DENSE, *TRAIN_8, "--set", f"mapping.pipeline_p2p={mode}")["iteration_time_s"]
            for mode in ("overlap", "blocking", "megatron-lm")]
    assert runs[0] == runs[1] == runs[2]
    assert "pp is 1" in _refused(capsys, "--pipeline-p2p", *DENSE, *TRAIN_8, "--pipeline-p2p", "blocking")
    piped = ["--devices", "8", "--tp", "2", "--pp", "2", "--dp", "2", "--global-batch", "8", "--recompute", "full"]
    overlap = _metrics(capsys, *DENSE, *piped, "--pipeline-p2p", "overlap")["iteration_time_s"]
    assert _metrics(capsys, *DENSE, *piped, "--pipeline-p2p", "megatron-lm")["iteration_time_s"] > overlap


def test_moe_flags_that_leave_no_moe_block_are_refused(capsys):
    """--moe-first-dense 4 of 4 layers built a dense model; the MoE flags beside it meant nothing."""
    dense = _metrics(capsys, *DENSE, *TRAIN_8)["model_flops_per_iteration"]
    all_dense = '{"experts": 4, "top_k": 2, "expert_ffn": 2048, "first_dense_layers": 4}'
    idle = _metrics(capsys, *DENSE, *TRAIN_8, "--set", f"workload.moe={all_dense}")
    assert idle["model_flops_per_iteration"] == dense
    assert "none of the model's 4 blocks" in _refused(capsys, "--moe-first-dense", *MOE, *TRAIN_8,
                                                     "--moe-first-dense", "4")
    assert main([*MOE, *TRAIN_8, "--moe-first-dense", "3"]) == 0


@pytest.mark.parametrize("value", ["nan", "inf", "-inf"])
@pytest.mark.parametrize("flag", ["--expert-imbalance", "--moe-capacity-factor"])
def test_non_finite_numbers_are_refused_naming_the_flag(capsys, flag, value):
    """float() takes 'nan' and 'inf'; they failed later as "not JSON data", naming no flag."""
    with pytest.raises(SystemExit) as exc:
        main([*MOE, *TRAIN_8, flag, value])
    assert exc.value.code == 2
    assert flag in capsys.readouterr().err


SEARCH = ["search", "--system", "dgx-a100", "--model", "gpt", "--layers", "2", "--hidden", "512", "--heads", "8",
          "--seq-len", "256", "--vocab", "4096", "--devices", "8", "--global-batch", "16", "--no-simulate", "--quiet",
          "--json"]


def _search_mappings(capsys, *flags: str) -> list[dict]:
    assert main([*SEARCH, *flags]) == 0
    return json.loads(capsys.readouterr().out)["candidates"]


@pytest.mark.parametrize(
    ("flags", "named", "says"),
    [
        (["--ep", "1,2,4"], "--ep", "no mixture-of-experts"),
        (["--ep-dispatcher", "deepep"], "--ep-dispatcher", "no mixture-of-experts"),
        (["--recompute-modules", "moe"], "--recompute-modules", "'moe'"),
        (["--cp", "1,3"], "--cp", "does not divide seq_len (256)"),
        (["--cp", "16"], "--cp", "exceeds the 8 devices"),
        (["--moe-experts", "4", "--moe-top-k", "2", "--ep", "1,3"], "--ep", "does not divide the routed experts (4)"),
        (["--moe-experts", "16", "--moe-top-k", "2", "--ep", "16"], "--ep", "exceeds the 8 devices"),
    ],
    ids=["ep-dense", "dispatcher-dense", "moe-module-dense", "cp-not-dividing", "cp-past-devices",
         "ep-not-dividing", "ep-past-devices"],
)
def test_search_lists_naming_what_the_model_cannot_use_are_refused(capsys, flags, named, says):
    """These sizes were dropped from the space without a word: the table looked as if they had lost."""
    assert says in _refused(capsys, named, *SEARCH, *flags)


def test_search_lists_the_model_can_use_are_searched(capsys):
    """The sizes the model can use are kept and appear among the candidates."""
    assert {c["cp"] for c in _search_mappings(capsys, "--cp", "1,2", "--list", "400")} == {1, 2}
    moe = _search_mappings(capsys, "--moe-experts", "4", "--moe-top-k", "2", "--ep", "1,2,4", "--list", "400")
    assert {c["ep"] for c in moe} == {1, 2, 4}



INFER = [*DENSE, "--mode", "infer", *FITS]
MOE_INFER = [*MOE, "--mode", "infer", *FITS, "--tp", "2", "--devices", "2", "--sequence-parallel"]
FOLDED = ["--set", "mapping.expert_tp=1"]  # experts folded over the tensor ranks, so ep 2 fits one group


@pytest.mark.parametrize(
    ("base", "flags", "field"),
    [
        (INFER, ["--zero", "3"], "mapping.zero=3"),
        (INFER, ["--fsdp"], "mapping.fsdp=true"),
        (INFER, ["--recompute", "full"], "mapping.recompute=full"),
        (INFER, ["--schedule", "gpipe"], "mapping.schedule=gpipe"),
        ([*INFER, "--pp", "2", "--devices", "2"], ["--interleave", "2"], "mapping.interleave=2"),
        ([*MOE_INFER, *FOLDED], ["--ep", "2"], "mapping.ep=2"),
        (MOE_INFER, ["--expert-tp", "1"], "mapping.expert_tp=1"),
        ([*MOE_INFER, *FOLDED, "--set", "mapping.ep=2"], ["--expert-imbalance", "2"], "mapping.expert_imbalance=2"),
    ],
    ids=["zero", "fsdp", "recompute", "schedule", "interleave", "ep", "expert-tp", "imbalance"],
)
def test_training_flags_in_an_inference_run_are_refused(capsys, base, flags, field):
    """Each field leaves an inference run as it was (same time and memory through --set, which the flag check
    does not see), so its flag is refused there, naming it and the way out (--mode train)."""
    plain = _metrics(capsys, *base)
    idle = _metrics(capsys, *base, "--set", field)
    assert (idle["iteration_time_s"], idle["peak_memory_bytes"]) == (plain["iteration_time_s"],
                                                                     plain["peak_memory_bytes"])
    assert "--mode train" in _refused(capsys, flags[0], *base, *flags)


def test_fsdp_with_zero_0_is_refused(capsys):
    """--fsdp --zero 0 ran ZeRO-3 (FSDP's sharding) whatever --zero said; stages 1 and 2 were refused already."""
    fsdp = _metrics(capsys, *DENSE, *TRAIN_8, "--fsdp")
    zero3 = _metrics(capsys, *DENSE, *TRAIN_8, "--zero", "3", "--overlap-param-gather")
    assert fsdp["memory_breakdown_bytes"] == zero3["memory_breakdown_bytes"]
    assert "--fsdp" in _refused(capsys, "--zero", *DENSE, *TRAIN_8, "--fsdp", "--zero", "0")
    assert main([*DENSE, *TRAIN_8, "--fsdp", "--zero", "3"]) == 0


@pytest.mark.parametrize("model", ["mlp-mnist", "vgg-a"])
def test_tensor_parallelism_of_a_workload_without_splits_is_refused(capsys, model):
    """MLP/CNN (and ONNX-imported) ops carry no tensor-parallel split: --tp 2 ran the whole model on both ranks,
    the same weights per device and the same FLOPs, only slower. Shown through --set, refused as a flag."""
    base = ["run", "--system", "dgx-a100", "--model", model, "--global-batch", "8", "--engine", "analytic",
            "--json", "--quiet"]
    one = _metrics(capsys, *base, "--devices", "1")
    two = _metrics(capsys, *base, "--devices", "1", "--set", "mapping.tp=2")
    assert two["devices"] == 2 * one["devices"]
    assert two["memory_breakdown_bytes"]["weights"] == one["memory_breakdown_bytes"]["weights"]
    assert two["iteration_time_s"] >= one["iteration_time_s"]
    assert "no op of this" in _refused(capsys, "--tp", *base, "--tp", "2", "--devices", "2")


@pytest.mark.parametrize(("flags", "field", "value"), [
    (["--log-params-norm"], "log_params_norm", "true"),
    (["--log-num-zeros-in-grad"], "log_num_zeros_in_grad", "true"),
    (["--timing-log-level", "2"], "timing_log_level", "2"),
    (["--check-for-nan-in-loss-and-grad"], "check_for_nan_in_loss_and_grad", "true"),
    (["--cuda-graph-scope", "mlp"], "cuda_graph_scope", "mlp"),
    (["--no-gradient-accumulation-fusion"], "gradient_accumulation_fusion", "false"),
])
def test_gpu_loop_flags_on_a_device_without_kernels_are_refused(capsys, flags, field, value):
    """Megatron's logging, NaN checks, CUDA graphs and gradient hooks cost a GPU host its kernel launches; a TPU
    runs each op as one program: the field is idle there (it ran with the same time and memory), so the flag is
    refused by name, as --host-framework already was, and the field through --set (a project file) by its path
    (plan.idle_fields). On a GPU project the same field still acts."""
    tpu = ["run", "tpu-v4-llama2-7b", "--engine", "analytic", "--json", "--quiet"]
    _refused(capsys, flags[0], *tpu, *flags)
    _refused(capsys, f"mapping.{field}", *tpu, "--set", f"mapping.{field}={value}")
    gpu = ["run", "gpt3-dgx-a100", "--engine", "analytic", "--json", "--quiet"]
    assert _metrics(capsys, *gpu, *flags)["iteration_time_s"] != _metrics(capsys, *gpu)["iteration_time_s"]



def test_expert_imbalance_bound_is_the_run_s_ep_not_experts_over_top_k(capsys):
    """8 experts, top-2, ep 2: experts / top_k is 4, but a rank holding 4 experts takes at most both of a token's
    2 slots against a mean of 2/2 = 1: at most 2 = ep times the mean. 3 (under experts / top_k) is refused."""
    eight = [*DENSE, "--moe-experts", "8", "--moe-top-k", "2"]
    assert main([*eight, *TRAIN_8, "--ep", "2", "--expert-imbalance", "2"]) == 0
    capsys.readouterr()
    assert main([*eight, *TRAIN_8, "--ep", "2", "--expert-imbalance", "3"]) == 2
    err = capsys.readouterr().err
    assert "mapping.expert_imbalance: 3" in err and "give at most 2," in err and "Traceback" not in err

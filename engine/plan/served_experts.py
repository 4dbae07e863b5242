"""Expert parallelism in a served pass (``mapping.ep`` > 1 in an inference run or ``tilewright serve``).

Serving runtimes run a mixture-of-experts model's expert parallelism with data-parallel attention: vLLM's
``--enable-expert-parallel`` with ``--data-parallel-size`` (docs.vllm.ai, "Expert Parallel Deployment" and "Data
Parallel Deployment": "forward passes must be aligned", ranks without requests run "dummy" forward passes),
SGLang's ``--enable-dp-attention`` with ``--ep-size``, DeepSeek's own inference system (DeepSeek-V3 report §3.4,
"Day 6: DeepSeek-V3/R1 inference system overview"). Each ep rank runs attention and the dense layers for its own
batch of sequences (its own KV cache); a MoE layer dispatches every rank's tokens all-to-all to the ranks holding
their top_k experts, each rank runs its experts / ep local experts on the token-slots routed to them, and a second
all-to-all brings the outputs back; the ranks step together. The exchange priced is the all-to-all of DeepEP's
kernels (vLLM's ``--all2all-backend deepep_low_latency`` / ``deepep_high_throughput``, SGLang's ``--moe-a2a-backend
deepep``), each token to the ranks of its experts; vLLM's default ``allgather_reducescatter`` backend gathers every
rank's tokens to every rank instead (about ep / top_k times the bytes), not modelled.

Priced here as ``plan.experts`` prices training's, with one simplification: every rank has the same batch (the
symmetric case), so one rank's pass stands for all and an iteration lasts as long as it does. Per device, then:

- weights: the dense part whole, the routed experts / ep (``experts.shard_experts``, the plan's stage state);
- the routed-expert GEMMs read the weights of the local experts the ep ranks' tokens reach: ep · n tokens route
  over the layer, reaching ``touched_experts(E, k, ep · n)`` of the E experts on average, 1/ep of them local
  (``transformer_inference.inference_graph``'s ``routed_ranks``); their rows stay the rank's own n · top_k
  token-slots on a balanced router (ep · n · top_k slots over E experts, E / ep of them local);
- the two all-to-alls per MoE layer, each member's buffer its own tokens' top_k hidden vectors
  (``experts.exchange``), over the stage's ep groups on the real links (``Plan.tp_collective``, kind ``ep:``):
  the pass context's ``expert_parallel``; the pass builder closes a segment at each (``PassBuilder.add_op``).

The router is taken as balanced (an expert's expected load): the busiest rank's excess in one iteration
(``plan.routing_imbalance``, which training applies) is left out of serving, and ``mapping.expert_imbalance``
stays a training field. The experts are split over tp like any other op (Megatron-Core's layout, expert tensor
parallelism = tp), not vLLM's tp × dp expert ranks; at tp 1 the two are the same.
"""

from __future__ import annotations

from tilewright.engine.ir.mapping import Mapping
from tilewright.engine.ir.ops import Op
from tilewright.engine.plan.experts import shard_experts


def served_ep(mapping: Mapping) -> int:
    """The expert parallelism a served pass runs: ``mapping.ep`` when it divides the data-parallel replicas (the
    ranks of data-parallel attention), else 1 — an ep that fits only by folding the experts over the tensor
    ranks (``mapping.expert_tp`` below tp, ``plan.experts``) is a training layout that a served pass, which
    splits every op by tp, does not run (``serving.instances`` refuses it)."""
    return mapping.ep if mapping.ep > 1 and mapping.dp % mapping.ep == 0 else 1


def served_layers(layers: list[list[Op]], ep: int) -> list[list[Op]]:
    """A served pass's layers as one ep rank holds and runs them (module docstring): the routed experts' weights
    / ep, their work unchanged (balanced router). ``layers`` come from an inference graph built with
    ``routed_ranks = ep``; unchanged at ep 1."""
    if ep <= 1:
        return layers
    return [shard_experts(ops, ep, 1.0) for ops in layers]

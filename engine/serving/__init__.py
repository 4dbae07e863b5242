"""Serving simulation: requests arrive, a scheduler batches them continuously, the project's devices serve.

API (for the CLI and a studio view; no Qt, progress and cancel by the job protocol, ``engine.jobs``):

- ``simulate_serving(project, ServingConfig(...), progress=, cancel=) -> ServingResult``: one simulation.
  The result holds per-request records (``records``: arrival, admission, first token, finish,
  preemptions, KV transfer), the KV occupancy series per instance kind (``kv_series``: (time s, fraction
  of pages in use)), ``metrics()`` (TTFT/TPOT/TBT/E2E and KV-transfer p50/p90/p99, throughput, goodput under the
  SLO, KV peak and mean), ``to_json()`` (strict-JSON-ready), ``write_csv(path)`` and ``summary_text()``.
- ``sweep_rates(project, config, rates, progress=, cancel=) -> SweepResult``: one simulation per arrival
  rate (same seed, same cost tables); ``best_rate`` is the highest rate whose goodput fraction is ≥ 90 %
  (``config.GOODPUT_TARGET``), None without an SLO (``ServingConfig.has_slo``: nothing to meet).
- ``build_instances(project, max_tokens, disaggregate)`` and ``IterationCostModel``: the per-iteration cost
  model, for views that plot it.
- ``load_trace(path)``, ``poisson_requests(...)``: the requests.

Modules: ``cost_model`` (an iteration's seconds from the engine's own op costs), ``kv`` (pages that fit),
``scheduler`` (continuous batching, chunked prefill, preemption), ``instances`` (replicas, the prefill/decode
groups, KV transfer), ``simulator`` (simpy), ``result``, ``sweep``, ``requests``, ``config``.

Published behaviour, and what this simulator shows on the presets. The numbers were measured while the
engine's costs were still changing; rerun the commands to update them. Setup: ``tilewright serve``, 300
requests, 2048-token prompts, 256 output tokens, Llama-2-70B on 8 H100s, tp 8, SLO TTFT ≤ 1 s and
TPOT ≤ 50 ms.
- Vidur (Agrawal et al., MLSys 2024) prices an iteration from profiled operators split into token-level
  ops (by the batch's tokens), attention (by prompt lengths and KV tokens read) and communication, and
  reports latency within 9 % of real vLLM/Sarathi deployments. The same split here comes from the engine's
  op costs, not profiles. As in Vidur's capacity curves, latency is flat at low load and climbs steeply
  near capacity: TTFT p50 179 / 249 / 324 / 430 / 879 ms and TPOT p50 16 / 21 / 31 / 54 / 76 ms at
  2 / 4 / 6 / 8 / 10 requests/s, so the best rate under the SLO is 6 requests/s.
- Sarathi-Serve (Agrawal et al., OSDI 2024): smaller prefill chunks bound the stall a prompt puts on the
  decodes batched with it, at a TTFT cost. At 3 requests/s, chunks of 2048 / 512 / 256 tokens give a
  time-between-tokens p99 of 101 / 74 / 48 ms, and TTFT p50 125 / 207 / 272 ms.
- Splitwise (Patel et al., ISCA 2024) and DistServe (Zhong et al., OSDI 2024): prompt and token phases
  interfere when they share GPUs, so splitting them removes the token-time tail; the prefill group's fewer
  GPUs cost TTFT. Here, at 3 requests/s, ``--disaggregate 4:4`` (tp 4 + tp 4) gives a TBT p99 of 15.7 ms
  against 74 ms co-located (tp 8, chunks of 512), and TTFT p99 535 ms against 412 ms. Splitwise streams
  the KV cache layer by layer while the prompt runs and measures little added latency. Here the cache
  moves after the prompt ends, over the devices' links, so the transfer is an upper bound.
- vLLM (Kwon et al., SOSP 2023): a paged KV cache admits requests by free pages, and preemption by
  recompute keeps every request alive when the cache is full. The Wormhole n150 preset fills its
  20k-token cache at 4 requests/s: 22 preemptions, and all 200 requests are served.

Limits: iterations are timed uncontended (the analytic engine's times, which match the event engine's on
the inference presets today); with pp > 1 an iteration is the pipeline's steady-state period (no fill and
drain per iteration); the speculative-decoding draft runs on the same devices, as a fraction of a decode
step; no prefix caching. Expert parallelism (``mapping.ep`` > 1) is served with data-parallel attention
(``plan.served_experts``): every ep rank a replica with its own requests and KV pages, its iterations priced
with the MoE layers seeing ep × its tokens and their all-to-alls, as if every rank had the same batch (the
ranks' lockstep — a busy rank holding the others back, an idle one running a dummy step — is not simulated);
not with ``--disaggregate`` (``instances.refuse_expert_parallel``).
"""

from tilewright.engine.serving.config import GOODPUT_TARGET, ServingConfig, ServingSetupError, SpecDecoding
from tilewright.engine.serving.cost_model import IterationCostModel, Work
from tilewright.engine.serving.instances import build_instances
from tilewright.engine.serving.requests import RequestSpec, load_trace, poisson_requests
from tilewright.engine.serving.result import RequestRecord, ServingResult
from tilewright.engine.serving.simulator import simulate_serving
from tilewright.engine.serving.sweep import SweepResult, sweep_rates

__all__ = [
    "GOODPUT_TARGET",
    "IterationCostModel",
    "RequestRecord",
    "RequestSpec",
    "ServingConfig",
    "ServingResult",
    "ServingSetupError",
    "SpecDecoding",
    "SweepResult",
    "Work",
    "build_instances",
    "load_trace",
    "poisson_requests",
    "simulate_serving",
    "sweep_rates",
]

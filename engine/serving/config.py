"""Settings of one serving simulation (what ``tilewright serve``'s flags set)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from tilewright.engine.serving.requests import MAX_ARRIVAL_S, RequestSpec

GOODPUT_TARGET = 0.9  # a rate "meets the SLO" when ≥ 90 % of its requests meet both latency targets
MAX_SEED = 2**63 - 1  # numpy's generators take any integer ≥ 0; a seed past int64 is no seed a person means


class ServingSetupError(ValueError):
    """The serving instances cannot be built as asked: which setting, and why."""

    def __init__(self, setting: str, reason: str) -> None:
        super().__init__(f"{setting}: {reason}")
        self.setting, self.reason = setting, reason


@dataclass(frozen=True)
class SpecDecoding:
    """Speculative decoding: a draft proposes ``k`` tokens, the target verifies them in one (k + 1)-token
    step and keeps (1 − α^(k+1))/(1 − α) of them on average (α the per-token acceptance rate; Leviathan
    et al. 2023). One draft step costs ``draft_cost`` × the target's decode step for the same batch."""

    k: int
    accept: float
    draft_cost: float = 0.05

    @property
    def tokens_per_step(self) -> float:
        a = self.accept
        return float(self.k + 1) if a >= 1.0 else (1.0 - a ** (self.k + 1)) / (1.0 - a)


@dataclass(frozen=True)
class ServingConfig:
    """``requests``: an explicit list (a trace); else ``count`` Poisson arrivals at ``rate`` per second with
    the project's prompt and output lengths (``prompt_tokens``/``output_tokens`` override them).
    ``disaggregate``: (prefill devices, decode devices), a split of the project's devices."""

    rate: float = 1.0
    count: int = 100
    seed: int = 0
    requests: tuple[RequestSpec, ...] | None = None
    prompt_tokens: int | None = None
    output_tokens: int | None = None
    max_batch: int = 256
    token_budget: int = 2048
    chunk: int = 512
    disaggregate: tuple[int, int] | None = None
    spec: SpecDecoding | None = None
    slo_ttft_s: float | None = None
    slo_tpot_s: float | None = None
    series_points: int = 400  # KV occupancy samples kept per instance kind (the report thins to this)

    @property
    def has_slo(self) -> bool:
        """A latency target was given: without one there is nothing for a request to meet, and goodput,
        "meets the SLO" and a sweep's best rate are left out (None), not reported as met by every request."""
        return self.slo_ttft_s is not None or self.slo_tpot_s is not None

    def problems(self) -> list[tuple[str, str]]:
        """(setting, reason) for every value the simulation cannot run with."""
        out = []
        for name in ("max_batch", "token_budget", "chunk", "count"):
            if getattr(self, name) < 1:
                out.append((name, f"{getattr(self, name)} must be at least 1"))
        if not 0 <= self.seed <= MAX_SEED:  # numpy's default_rng refuses a negative seed with a bare ValueError
            out.append(("seed", f"{self.seed} must be a whole number within 0–{MAX_SEED}"))
        if self.requests is None:
            if not (self.rate > 0 and math.isfinite(self.rate)):
                out.append(("rate", f"{self.rate} requests/s must be positive and finite"))
            elif self.count / self.rate > MAX_ARRIVAL_S:
                out.append(
                    (
                        "rate",
                        f"{self.rate:g} requests/s spreads {self.count:,} arrivals over "
                        f"~{self.count / self.rate:.3g} s "
                        f"(limit {MAX_ARRIVAL_S:.0e} s, where seconds as floats still resolve nanoseconds)",
                    )
                )
        if self.spec is not None:
            if self.spec.k < 1:
                out.append(("spec_k", f"{self.spec.k} must be at least 1 draft token"))
            if not 0.0 <= self.spec.accept <= 1.0:
                out.append(("spec_accept", f"{self.spec.accept} must be within 0–1"))
            if not (self.spec.draft_cost >= 0 and math.isfinite(self.spec.draft_cost)):
                out.append(("spec_draft_cost", f"{self.spec.draft_cost} must be finite and ≥ 0"))
            if self.spec.k + 1 > self.token_budget:
                out.append(
                    (
                        "spec_k",
                        f"{self.spec.k}: a verify step of {self.spec.k + 1:,} tokens exceeds the token budget of "
                        f"{self.token_budget:,} tokens per iteration (--token-budget)",
                    )
                )
        for name in ("slo_ttft_s", "slo_tpot_s"):
            value = getattr(self, name)
            if value is not None and not (value > 0 and math.isfinite(value)):
                out.append((name, f"{value} s must be positive and finite (leave it out for no target)"))
        if self.disaggregate is not None and min(self.disaggregate) < 1:
            p, d = self.disaggregate
            out.append(("disaggregate", f"{p}:{d}: each group needs at least one device"))
        return out

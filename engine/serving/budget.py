"""What a serving simulation will cost, from the request list alone, so absurd ones are refused in milliseconds.

Work grows with iterations (one per decode step at low load, ~70 µs each measured on the 70B
preset: 49,136 iterations in 3.5 s) and with requests (a record and a few simpy events each). The bound counts
every request's decode steps and prefill chunks as if none shared an iteration (the worst case, low load).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from tilewright.engine.serving.requests import RequestSpec

MAX_REQUESTS = 1_000_000
MAX_ITERATIONS = 2_000_000  # ~2.5 min at the ~70 µs per iteration measured on the 70B preset (2 cores)


@dataclass(frozen=True)
class ServingEstimate:
    requests: int
    iterations: int  # upper bound: nothing batched

    def problems(self) -> list[tuple[str, str]]:
        out = []
        if self.requests > MAX_REQUESTS:
            out.append(("--requests", f"{self.requests:,} requests to simulate (limit {MAX_REQUESTS:,})"))
        if self.iterations > MAX_ITERATIONS:
            out.append(("--requests/--prompt-tokens/--output-tokens",
                        f"up to {self.iterations:,} iterations to simulate (limit {MAX_ITERATIONS:,}): "
                        "every request's prefill chunks and decode steps"))
        return out


def estimate(
    count: int,
    prompt_tokens: int,
    output_tokens: int,
    chunk: int,
    rates: int = 1,
    specs: list[RequestSpec] | None = None,
) -> ServingEstimate:
    """For ``count`` requests of the given lengths (or the trace ``specs``), over ``rates`` sweeps."""
    if specs is not None:
        iterations = sum(math.ceil(s.prompt_tokens / chunk) + s.output_tokens - 1 for s in specs)
        count = len(specs)
    else:
        iterations = count * (math.ceil(prompt_tokens / chunk) + output_tokens - 1)
    return ServingEstimate(count * rates, iterations * rates)

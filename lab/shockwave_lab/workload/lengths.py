"""Heavy-tailed job lengths for generated workloads (`shockwave trace generate --lengths lognormal|pareto`).

A length is a job's run time alone on its GPUs at its initial batch size, in seconds; the generator turns it into
steps (length x the job type's throughput), as it does with the reference's duration grid.  Both families are
given by the two numbers the public traces publish or let one read off a CDF, the **median** and the **90th
percentile**, and every draw is clipped to [`low`, `high`] (clipping moves no quantile inside the range):

* log-normal: ln(length) ~ Normal(ln median, sigma), sigma = ln(p90 / median) / z_0.9 (z_0.9 = 1.2816);
* Pareto: length = x_m (1 - u)^(-1 / alpha), alpha = ln 5 / ln(p90 / median), x_m = median / 2^(1 / alpha)
  (so its median and p90 are the given ones; alpha <= 1 is a tail with no finite mean: the clip bounds it).

Draws are inverse-CDF transforms of one uniform from the caller's seeded `random.Random`, so a seed gives the same
lengths on every platform.  docs/workloads.md says where the presets' numbers come from.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import NormalDist

Z90 = NormalDist().inv_cdf(0.9)  # 1.2816


@dataclass(frozen=True)
class LengthModel:
    family: str  # "lognormal" or "pareto"
    median: float  # seconds
    p90: float  # seconds, > median
    low: float  # clip range, seconds
    high: float

    def __post_init__(self):
        if self.family not in ("lognormal", "pareto"):
            raise ValueError(f"length family must be lognormal or pareto, got {self.family!r}")
        if not (0 < self.median < self.p90 < math.inf):
            raise ValueError(f"need 0 < median < p90 < inf, got median {self.median}, p90 {self.p90}")
        if not (0 < self.low <= self.high < math.inf):
            raise ValueError(f"need 0 < low <= high < inf, got {self.low}, {self.high}")

    @property
    def sigma(self) -> float:
        return math.log(self.p90 / self.median) / Z90

    @property
    def alpha(self) -> float:
        return math.log(5.0) / math.log(self.p90 / self.median)

    def quantile(self, u: float) -> float:
        """The unclipped length at CDF value u in (0, 1)."""
        if self.family == "lognormal":
            return self.median * math.exp(self.sigma * NormalDist().inv_cdf(u))
        a = self.alpha
        return self.median / 2 ** (1 / a) * (1.0 - u) ** (-1.0 / a)

    def draw(self, rng) -> int:
        """One length in whole seconds (at least 1), clipped to [low, high]."""
        u = min(max(rng.random(), 1e-12), 1.0 - 1e-12)
        return max(1, round(min(max(self.quantile(u), self.low), self.high)))

    def describe(self) -> str:
        return f"{self.family}{self.median:g}p90-{self.p90:g}r{self.low:g}-{self.high:g}"

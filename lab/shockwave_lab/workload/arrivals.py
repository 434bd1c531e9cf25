"""Arrival processes for generated workloads beyond the reference's Poisson stream (`shockwave trace generate
--arrivals diurnal`, `--bursts N,SIZE,SPAN`).

* **Submissions** (`submission_times`): the first at 0, then either Poisson with mean gap `mean_gap` (the reference's
  formula, exponential gaps), or **diurnal**: a non-homogeneous Poisson process with rate
  (1 / mean_gap) x (1 + a cos(2 pi (clock - peak_hour) / 24 h)), a = (R - 1) / (R + 1), so the rate at `peak_hour`
  is R times the rate twelve hours later and the mean rate over a day is 1 / mean_gap.  Arrival 0 is at clock hour
  `start_hour`.  Drawn by thinning (Lewis and Shedler): candidate gaps at the peak rate, each kept with probability
  rate(t) / peak rate.
* **Sweeps** (`sweep_offsets`): a sweep is one submission that becomes SIZE jobs, the first at the submission time
  and the others at uniform offsets in [0, SPAN] seconds after it (a user launching a hyper-parameter sweep);
  `pick_sweeps` chooses which submissions are sweeps, uniformly.

Every draw comes from the caller's seeded `random.Random`, so a seed gives the same arrivals.
"""

from __future__ import annotations

import math

DAY = 86400.0


def diurnal_amplitude(ratio: float) -> float:
    """a of the rate 1 + a cos(...) whose peak is `ratio` times its trough."""
    return (ratio - 1.0) / (ratio + 1.0)


def diurnal_rate(t: float, mean_gap: float, ratio: float, peak_hour: float, start_hour: float) -> float:
    """Submissions per second at t seconds after arrival 0."""
    phase = 2 * math.pi * ((t + start_hour * 3600.0 - peak_hour * 3600.0) % DAY) / DAY
    return (1.0 + diurnal_amplitude(ratio) * math.cos(phase)) / mean_gap


def submission_times(
    rng,
    n: int,
    mean_gap: float,
    process: str = "poisson",
    ratio: float = 1.0,
    peak_hour: float = 15.0,
    start_hour: float = 9.0,
) -> list[float]:
    """n submission times, the first at 0, non-decreasing."""
    if n <= 0:
        return []
    out = [0.0]
    if mean_gap <= 0:
        return [0.0] * n
    if process == "poisson":
        t = 0.0
        for _ in range(n - 1):
            t += -math.log(1.0 - rng.random()) * mean_gap
            out.append(t)
        return out
    if process != "diurnal":
        raise ValueError(f"arrival process must be poisson or diurnal, got {process!r}")
    peak = (1.0 + diurnal_amplitude(ratio)) / mean_gap
    t = 0.0
    while len(out) < n:
        t += -math.log(1.0 - rng.random()) / peak
        if rng.random() * peak < diurnal_rate(t, mean_gap, ratio, peak_hour, start_hour):
            out.append(t)
    return out


def pick_sweeps(rng, submissions: int, sweeps: int) -> set[int]:
    """Which of the submissions (by index) are sweeps: `sweeps` of them, uniformly."""
    return set(rng.sample(range(submissions), sweeps)) if sweeps else set()


def sweep_offsets(rng, size: int, span: float) -> list[float]:
    """Seconds after a sweep's submission at which its jobs arrive: 0 for the first, sorted uniform in [0, span]."""
    return [0.0, *sorted(rng.uniform(0.0, span) for _ in range(size - 1))]


def clock_hour(t: float, start_hour: float) -> float:
    """Clock hour (0 <= h < 24) of the arrival t seconds after arrival 0."""
    return ((t / 3600.0) + start_hour) % 24.0

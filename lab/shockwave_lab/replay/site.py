"""The site the replay's cluster is configured as, and the same site in the simulator's terms.

Slurm as a site would configure it (the plain-Slurm run and the one under the controller alike), as the
simulator's model of it assumes (solver/policies/slurm_multifactor.py): multifactor priority with the Slurm docs'
example weights (age, fair-share, job size; the classic fair-share factor), backfill, users asking
TIME_LIMIT_FACTOR (run.py) x the job's run time alone at its first batch size.  Fair-share is real: slurmdbd and
MariaDB run beside the cluster, each user of the trace has an account of its own (1 share each) and usage is
billed in GPUs (localcluster/config.py).  The model's 14-day age and usage half-life are trace time, so they are
divided by the time scale in slurm.conf; the cluster's PriorityCalcPeriod (wall minutes) is multiplied by it for
the model.
"""
from __future__ import annotations

from slurm_shockwave.controller.config import ControllerConfig
from shockwave_lab.localcluster.config import PRIORITY_CALC_PERIOD_MIN

#: the cluster's scheduler passes, wall seconds: a site's (sched_interval 60 s, bf_interval 30 s) at the time scale,
#: at least Slurm's 1 s
SCHED_PASS_S = 1
SITE_WEIGHTS = ("PriorityWeightAge=1000", "PriorityWeightFairshare=10000", "PriorityWeightJobSize=1000",
                "PriorityFavorSmall=NO", "PriorityFlags=NO_FAIR_TREE", "MinJobAge=3600",
                f"SchedulerParameters=sched_interval={SCHED_PASS_S},bf_interval={SCHED_PASS_S},bf_continue")
#: RawShares of root's own user association, a sibling of the accounts that runs nothing (sshare: each of 4 users
#: has NormShares 0.2, not 0.25)
ROOT_USER_SHARES = 1
#: the model's PriorityMaxAge and PriorityDecayHalfLife (trace seconds)
SITE_DAYS_S = 14 * 86400.0


def site_priority(scale: float) -> tuple[str, ...]:
    """slurm.conf lines of the replay's site at time scale `scale` (minutes: Slurm's unit for both)."""
    minutes = max(1, round(SITE_DAYS_S / scale / 60))
    return (*SITE_WEIGHTS, f"PriorityMaxAge={minutes}", f"PriorityDecayHalfLife={minutes}")


def model_settings(scale: float) -> dict:
    """The `slurm-multifactor` settings of the same site, in trace seconds."""
    return {"max_age_s": SITE_DAYS_S, "decay_half_life_s": SITE_DAYS_S,
            "calc_period_s": PRIORITY_CALC_PERIOD_MIN * 60.0 * scale, "idle_shares": ROOT_USER_SHARES,
            "time_limit_unit_s": 60.0 * scale}


def model_round_s(scale: float) -> float:
    """The model's round, trace seconds: the cluster's scheduler pass (a plain-Slurm cluster starts jobs as its
    passes and job ends allow, not every 120 s; the controller's rounds stay 120 s)."""
    return SCHED_PASS_S * scale


#: the shortest poll and gap between rounds the replay's controller is given, wall seconds (a squeue per poll)
MIN_POLL_WALL_S = 0.5


def controller_timing(scale: float) -> tuple[float, float]:
    """The replay controller's `poll_seconds` and `min_round_seconds`, wall seconds: production's at 120 s rounds
    (ControllerConfig.early_round_timing) at the time scale, at least MIN_POLL_WALL_S (production's 5 s would be
    a poll every 0.17 s at time scale 30)."""
    prod = ControllerConfig(round_seconds=120.0).early_round_timing
    return (max(prod[0] / scale, MIN_POLL_WALL_S), max(prod[1] / scale, MIN_POLL_WALL_S))


def model_early_rounds(scale: float | None, round_s: float = 120.0) -> tuple[float, float]:
    """The simulator's `early_rounds` (poll, min gap), trace seconds: the replay controller's at time scale `scale`;
    production's at rounds of `round_s` when `scale` is None."""
    if scale is None:
        return ControllerConfig(round_seconds=round_s).early_round_timing
    poll, gap = controller_timing(scale)
    return (poll * scale, gap * scale)


def account_of(user: str) -> str:
    """The account of a trace user on the replay's cluster (one each, 1 share)."""
    return f"acct-{user}"[:30]

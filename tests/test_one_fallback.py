"""One fallback, the round loop's: a policy's failure at any depth reaches `RoundLoop.decide`, which runs
`fallback_decision` and counts it; a policy never answers a failure with an empty round of its own.  In the
controller's authoritative mode (the preemption gate on) a failing policy therefore preempts exactly what the
fallback preempts, and never every running job."""
from __future__ import annotations

import pytest

from slurm_shockwave.backends.base import ClusterBackend
from slurm_shockwave.controller.loop import RoundLoop, fallback_decision
from solver.policies.shockwave_base import PlanUnavailable
from solver.policies.shockwave_edf import ShockwaveEDF
from solver.types import ClusterView, JobView, Policy, RoundDecision

ROUND = 120.0
MIN_RUN_COST_S = 30.0      # the gate's default preemption cost (as the controller's authoritative mode passes)


def jv(i, running: bool, run_time: float) -> JobView:
    """A one-GPU job with an hour of work left, `run_time` s of service so far."""
    return JobView(job_id=i, arrival_time=0.0, num_gpus=1, batch_size=32, epochs_done=1, total_epochs=10,
                   samples_per_epoch=3200, steps_done=100.0, total_steps=36_100.0, throughput=10.0,
                   ran_last_round=running, run_time=run_time, epoch_duration_by_bs={32: 360.0},
                   bs_history=(32,))


class OneView(ClusterBackend):
    """A cluster that shows the same view once: 3 GPUs, jobs 1 and 2 running, 3 and 4 waiting."""

    def __init__(self) -> None:
        jobs = (jv(1, True, 100.0), jv(2, True, 5_000.0), jv(3, False, 0.0), jv(4, False, 0.0))
        self.view = ClusterView(now=10_000.0, round_index=7, round_length=ROUND, num_gpus=3, jobs=jobs)
        self.applied: list[RoundDecision] = []

    def observe(self) -> ClusterView:
        return self.view

    def apply(self, decision: RoundDecision) -> None:
        self.applied.append(decision)

    def advance(self) -> None:
        pass

    def done(self) -> bool:
        return bool(self.applied)


class RecoveryFails(Policy):
    """Its decision raises, and so does the recovery it tries itself."""

    name = "recovery-fails"

    def decide(self, view):
        try:
            raise ArithmeticError("the decision failed")
        except ArithmeticError:
            raise RuntimeError("and so did its own recovery") from None


class TheFallback(Policy):
    """What the loop's fallback decides, as a policy's own decision (the comparison)."""

    name = "the-fallback"

    def decide(self, view):
        return fallback_decision(view, "compared")


class WindowFails(ShockwaveEDF):
    """The default policy whose window cannot be planned (no earlier plan covers the round)."""

    def _plan_window(self, *args, **kwargs):
        raise FloatingPointError("the window's program failed")


def one_round(policy) -> RoundLoop:
    loop = RoundLoop(OneView(), policy, explain=True, mode="authoritative", preemption_cost_s=MIN_RUN_COST_S)
    loop.run()
    return loop


@pytest.mark.parametrize("failing", [RecoveryFails, WindowFails], ids=["decision-and-recovery", "window"])
def test_a_failing_policy_preempts_only_what_the_fallback_preempts(failing):
    failed, compared = one_round(failing()), one_round(TheFallback())
    assert failed.fallbacks == 1 and compared.fallbacks == 0
    assert failed.last_preemptions["preempted"] == compared.last_preemptions["preempted"] == [2]
    decision = failed.backend.applied[0]
    assert decision.path == "fallback" and set(decision.run) == {1, 3, 4}          # least attained service first
    assert decision.fallback_reason.startswith("policy raised")
    assert failed.preemptions["preempted"] == 1 < len([j for j in failed.backend.view.jobs if j.ran_last_round])


def test_the_default_policy_raises_instead_of_deciding_an_empty_round():
    with pytest.raises(PlanUnavailable, match="no earlier plan covers it"):
        WindowFails().decide(OneView().view)


def test_a_decision_that_is_not_one_is_rejected_and_counted():
    class NotADecision(Policy):
        name = "not-a-decision"

        def decide(self, view):
            return None

    loop = one_round(NotADecision())
    assert loop.fallbacks == 1 and loop.last_preemptions["preempted"] == [2]
    assert loop.backend.applied[0].fallback_reason.startswith("decision rejected")

"""The simulated cluster's round semantics, on hand-computed cases (docs/reference.md §4)."""
import pytest

from solver.types import Policy, RoundDecision
from slurm_shockwave.controller.loop import RoundLoop
from shockwave_lab.sim.cluster import SimulatedCluster
from tests.helpers import job, table

THR = table({("ResNet-18", 32, 1): 10.0, ("ResNet-18", 64, 1): 782 / 40, ("ResNet-18", 32, 2): 18.0})


class Alternate(Policy):
    """Run the job that did not run last round (lowest id first)."""
    name = "alternate"

    def decide(self, view):
        fresh = [j for j in view.jobs if not j.ran_last_round] or list(view.jobs)
        return RoundDecision(run=(min(j.job_id for j in fresh),))


class RunAll(Policy):
    name = "all"

    def decide(self, view):
        free, run = view.num_gpus, []
        for j in view.jobs:
            if j.num_gpus <= free:
                run.append(j.job_id)
                free -= j.num_gpus
        return RoundDecision(run=tuple(run))


def simulate(jobs, gpus, policy, table_=THR):
    c = SimulatedCluster(jobs, table_, gpus)
    RoundLoop(c, policy).run()
    return c, {r.job_id: r for r in c.finished}


def test_single_job_rounds_end_at_the_last_finish():
    c, done = simulate([job(0, 3000, isolated_runtime=300)], 1, RunAll())
    assert done[0].finish_time == pytest.approx(300.0)       # 1200 + 1200 + 600 steps at 10 it/s
    assert done[0].run_time == pytest.approx(300.0)
    assert c.round_index == 3


def test_restart_penalty_charged_to_a_job_that_did_not_run_the_round_before():
    _, done = simulate([job(0, 3000, isolated_runtime=300), job(1, 3000, isolated_runtime=300)], 1, Alternate())
    # A: 1200 | B: 1000 (penalised) | A: 1000 (penalised) | B: 1000 | A: 800 in 80 s | B: 1000 in 100 s
    assert done[0].finish_time == pytest.approx(560.0)
    assert done[1].finish_time == pytest.approx(660.0)
    assert done[0].restarts == 2 and done[1].restarts == 2
    assert done[0].rounds_run == 3 and done[1].rounds_run == 3


def test_gns_batch_size_change_keeps_completed_epochs():
    spe32, spe64 = 1563, 782                       # ceil(50000 / 32), ceil(50000 / 64)
    fast = table({("ResNet-18", 32, 1): spe32 / 60, ("ResNet-18", 64, 1): spe64 / 40})
    spec = job(0, 5 * spe32, mode="gns", gns_schedule=(32, 32, 64, 64, 64), isolated_runtime=1000)
    c = SimulatedCluster([spec], fast, 1)
    loop = RoundLoop(c, RunAll())
    loop.run_round()                                # 2 epochs at bs 32; the flag is raised for epoch 2
    sim_job = c.active[0]
    assert sim_job.big_bs and sim_job.bs == 32 and sim_job.epochs_done == 2
    loop.run_round()                                # runs at 32 (4 epochs), then doubles
    assert sim_job.bs == 64
    assert sim_job.epochs_done == 4 and sim_job.bs_history == [32] * 4
    assert sim_job.total_steps == 3908              # ceil(7815 / 2) keeps 5 epochs at 782 steps each
    loop.run()
    assert c.finished[0].finish_time == pytest.approx(240 + 780 / (spe64 / 40))


def test_deadline_guard_completes_a_job_over_one_and_a_half_times_its_exclusive_time():
    _, done = simulate([job(0, 100000, isolated_runtime=100)], 1, RunAll())
    assert done[0].finish_time == pytest.approx(240.0)       # 240 s > int(1.5 x 100)


def test_time_jumps_to_the_next_arrival_when_the_cluster_is_idle():
    _, done = simulate([job(0, 1200, isolated_runtime=120), job(1, 600, arrival=500, isolated_runtime=60)], 1,
                       RunAll())
    assert done[0].finish_time == pytest.approx(120.0)
    assert done[1].finish_time == pytest.approx(560.0)
    assert done[1].jct == pytest.approx(60.0)


def test_gang_jobs_use_all_their_gpus_and_wait_when_they_do_not_fit():
    jobs = [job(0, 1200, isolated_runtime=120), job(1, 1800, gpus=2, isolated_runtime=100)]
    c, done = simulate(jobs, 2, RunAll())
    assert done[0].finish_time == pytest.approx(120.0)
    assert done[1].finish_time == pytest.approx(220.0)       # waits for the 1-GPU job, then 100 s on 2 GPUs
    assert c.busy_gpu_seconds == pytest.approx(120 + 2 * 100)


def test_a_decision_over_capacity_is_rejected():
    class Greedy(Policy):
        def decide(self, view):
            return RoundDecision(run=tuple(j.job_id for j in view.jobs))

    c = SimulatedCluster([job(0, 1000, isolated_runtime=100), job(1, 1000, isolated_runtime=100)], THR, 1)
    rec = RoundLoop(c, Greedy()).run_round()
    # the loop checks the decision before the backend sees it: the round uses the one fallback instead
    assert rec.fallback and len(rec.run) == 1
    assert "uses 2 GPUs of 1" in rec.decision.fallback_reason


def test_a_failing_policy_falls_back_and_the_loop_goes_on():
    class Broken(Policy):
        def decide(self, view):
            raise RuntimeError("solver exploded")

    c = SimulatedCluster([job(0, 1200, isolated_runtime=120)], THR, 1)
    loop = RoundLoop(c, Broken(), keep_records=True)
    loop.run()
    assert c.finished and loop.records[0].fallback and loop.fallbacks == loop.rounds


def early(jobs, gpus, poll=5.0, gap=5.0):
    c = SimulatedCluster(jobs, THR, gpus, early_rounds=(poll, gap))
    loop = RoundLoop(c, RunAll(), keep_records=True)
    loop.run()
    return c, loop, {r.job_id: r for r in c.finished}


LONG = 10_000          # isolated run time, s: keeps the deadline guard out of these cases


def test_a_job_that_ends_while_another_waits_starts_an_early_round():
    jobs = [job(i, steps, isolated_runtime=LONG) for i, steps in enumerate((300, 3000, 1500))]
    c, loop, done = early(jobs, 2)
    assert [r.view.now for r in loop.records][:3] == pytest.approx([0.0, 30.0, 150.0])
    # job 1 goes on where it ran (no restart): 300 steps by 30 s, then 1200 per round
    assert done[1].restarts == 0 and done[1].finish_time == pytest.approx(300.0)
    # job 2 starts at 30, pays the 20 s restart penalty first: 1000 steps by 150, 500 more by 200
    assert done[2].finish_time == pytest.approx(200.0)
    # the reference's rounds: job 2 waits for the end of the first 120 s round
    _, ref = simulate(jobs, 2, RunAll())
    assert ref[2].finish_time == pytest.approx(290.0)


def test_the_early_round_waits_for_the_next_poll_and_the_min_gap():
    jobs = [job(i, steps, isolated_runtime=LONG) for i, steps in enumerate((300, 3000, 1500))]
    for poll, gap, at in ((7.0, 5.0, 35.0), (5.0, 40.0, 40.0), (5.0, 0.0, 30.0)):
        c, loop, done = early(jobs, 2, poll, gap)
        assert loop.records[1].view.now == pytest.approx(at)
        assert done[2].finish_time == pytest.approx(at + 20 + 150)   # 1500 steps at 10 it/s after the penalty


def test_no_early_round_when_nothing_waits():
    jobs = [job(0, 300, isolated_runtime=LONG), job(1, 3000, isolated_runtime=LONG)]
    c, loop, done = early(jobs, 2)
    assert loop.records[1].view.now == pytest.approx(120.0)
    assert done[0].finish_time == pytest.approx(30.0) and done[1].finish_time == pytest.approx(300.0)


def test_a_restart_penalty_a_cut_round_left_unpaid_is_paid_in_the_next():
    jobs = [job(0, 300, isolated_runtime=LONG), job(1, 400, isolated_runtime=LONG),
            job(2, 3000, isolated_runtime=LONG), job(3, 3000, isolated_runtime=LONG)]
    c, loop, done = early(jobs, 2, 5.0, 0.0)
    # 0: jobs 0, 1 | 30: job 0 ended, 1 goes on, 2 starts (20 s penalty) | 40: job 1 ended after 10 s of it
    assert [r.view.now for r in loop.records][:4] == pytest.approx([0.0, 30.0, 40.0, 160.0])
    # at 40 job 2 owes 10 s: 1100 steps by 160; job 3 starts with 20 s: 1000 steps by 160
    assert done[2].finish_time == pytest.approx(160 + 120 + 70)       # 1200 more, then the last 700
    assert done[3].finish_time == pytest.approx(160 + 120 + 80)       # 1200 more, then the last 800
    assert done[2].restarts == 0 and done[3].restarts == 0
    assert c.busy_gpu_seconds == pytest.approx(30 + 40 + 300 + 300)   # restart waits are not busy time


def test_early_rounds_must_be_positive():
    with pytest.raises(ValueError, match="early_rounds"):
        SimulatedCluster([job(0, 300)], THR, 1, early_rounds=(0.0, 5.0))

"""Slurm's own starts between rounds in the simulator (`slurm_starts`, the replay's model of a Slurm site): an
arrival the controller has not seen starts on its asked count as soon as its gang fits, and the next round sees it
running there; an elastic one the default grows then restarts, as on Slurm (docs/replay-elastic.md)."""
from __future__ import annotations

import pytest

from shockwave_lab.sim.cluster import SimulatedCluster
from shockwave_lab.sim.slurm_starts import place
from shockwave_lab.simulate import run_simulation
from solver.types import GPU, RoundDecision
from tests.helpers import job, table

LONG = 10.0 ** 7          # isolated run time: the deadline guard never ends a job here


def _job(i, steps, **kw):
    return job(i, steps, isolated_runtime=LONG, **kw)


THR = table({("ResNet-18", 32, n): t for n, t in {1: 10.0, 2: 18.0, 4: 32.0, 8: 56.0}.items()})
NODES = {"n00": ("v100", 4), "n01": ("v100", 4)}


def test_place_fits_at_arrival_or_when_a_run_frees_gpus():
    busy = [(0.0, 50.0, "v100", 3, ()), (0.0, 120.0, "v100", 4, ())]         # 7 of 8 busy, 3 free at 50
    cap = {"v100": 8}
    assert place(1, ["v100"], 10.0, 120.0, busy, cap, {}) == (10.0, "v100", ())
    assert place(2, ["v100"], 10.0, 120.0, busy, cap, {}) == (50.0, "v100", ())
    assert place(5, ["v100"], 10.0, 120.0, busy, cap, {}) is None
    assert place(2, ["v100"], 60.0, 120.0, busy, cap, {}) == (60.0, "v100", ())


def test_place_on_nodes_first_with_room_or_whole_free_nodes():
    busy = [(0.0, 120.0, "v100", 3, ("n00",))]
    assert place(1, ["v100"], 5.0, 120.0, busy, {}, NODES) == (5.0, "v100", ("n00",))
    assert place(2, ["v100"], 5.0, 120.0, busy, {}, NODES) == (5.0, "v100", ("n01",))
    assert place(8, ["v100"], 5.0, 120.0, busy, {}, NODES) is None              # n00 is not whole
    assert place(8, ["v100"], 5.0, 120.0, [], {}, NODES) == (5.0, "v100", ("n00", "n01"))
    assert place(1, ["a100"], 5.0, 120.0, [], {}, NODES) is None                # no node of that type


def _cluster(specs, starts):
    return SimulatedCluster(specs, THR, 2, round_length=120.0, restart_penalty=10.0, early_rounds=(5.0, 5.0),
                            slurm_starts=starts)


def test_an_arrival_starts_between_rounds_where_it_fits():
    specs = [_job(0, 100000, arrival=0.0), _job(1, 100000, arrival=30.0), _job(2, 100000, arrival=40.0, gpus=2)]
    c = _cluster(specs, True)
    c.apply(RoundDecision(run=(0,), placement={0: {GPU: 1}}))
    c.advance()
    v = {j.job_id: j for j in c.observe().jobs}
    assert v[1].ran_last_round and v[1].running_gpus == 1 and v[1].steps_done == int(10.0 * (120 - 30 - 10))
    assert not v[2].ran_last_round and v[2].steps_done == 0                      # 2 GPUs: did not fit
    assert c.usage_log[-1] == (1, 30.0, 120.0, 1) and c.busy_gpu_seconds == pytest.approx(120 + 80)
    # without the model it waits for the round, as the reference
    c = _cluster(specs, False)
    c.apply(RoundDecision(run=(0,), placement={0: {GPU: 1}}))
    c.advance()
    assert {j.job_id: j.ran_last_round for j in c.observe().jobs} == {0: True, 1: False, 2: False}


def test_slurm_starts_needs_the_controller_rounds():
    with pytest.raises(ValueError, match="early_rounds"):
        SimulatedCluster([job(0, 10)], THR, 2, slurm_starts=True)


def test_an_elastic_arrival_slurm_started_is_grown_through_a_restart():
    """On 8 GPUs with a rigid job running on 4, an elastic arrival starts on its asked 1 GPU between rounds; the next
    round grows it (the loop's `begun` rule), a restart the simulator without the model does not see."""
    specs = [_job(0, 200000, arrival=0.0, gpus=4), _job(1, 200000, arrival=50.0, gpus_range=(1, 8))]
    kw = dict(semantics="controller", keep_round_log=True)
    with_model = run_simulation(specs, THR, 8, "shockwave-edf", slurm_starts=True, **kw)
    without = run_simulation(specs, THR, 8, "shockwave-edf", **kw)
    first = next(r for r in with_model.round_log if any(j.job_id == 1 for j in r.view.jobs))
    seen = {j.job_id: j for j in first.view.jobs}[1]
    assert seen.ran_last_round and seen.running_gpus == 1 and seen.steps_done > 0
    assert sum(first.decision.placement[1].values()) > 1                        # grown at once
    restarts = {r.job_id: r.restarts for r in with_model.records}
    assert restarts[1] >= 1 and {r.job_id: r.restarts for r in without.records}[1] < restarts[1]


def test_the_rounds_keep_their_clock_while_the_cluster_is_idle():
    """The controller's rounds run from the trace's start whether jobs run or not: a first arrival at 63 s starts on
    its own count at once (Slurm), and the round at 120 s sees it running; a later arrival after a long idle spell
    likewise lands between two rounds of that clock."""
    specs = [_job(0, 1000, arrival=63.0), _job(1, 1000, arrival=1000.0)]
    c = _cluster(specs, True)
    assert c.now == 0.0
    c.apply(RoundDecision(run=()))
    c.advance()
    assert c.now == 120.0 and c.usage_log == [(0, 63.0, 120.0, 1)]
    assert [j.ran_last_round for j in c.observe().jobs] == [True]
    while c.now < 1000.0:
        c.apply(RoundDecision(run=tuple(j.job_id for j in c.observe().jobs),
                              placement={j.job_id: {GPU: 1} for j in c.observe().jobs}))
        c.advance()
    # job 0 ended at 173 and its round still lasted to 240 (the controller's clock, not the reference's round that
    # ends with its last job); job 1 started at its arrival, in the round from 960 to 1080
    assert c.usage_log[-1][:2] == (1, 1000.0) and c.now == 9 * 120.0


def test_a_round_lasts_its_length_unless_gpus_are_freed_while_a_job_waits():
    """Job 0 ends 60 s into a round: with nothing waiting the round still lasts 120 s, as the controller's (slurm/
    timing.py: only freed GPUs while a job waits end a round early); with job 1 waiting it ends at the next poll."""
    for waiting, ends_at in ((False, 120.0), (True, 60.0)):
        specs = [_job(0, 600), _job(1, 10**6, arrival=0.0)][: 2 if waiting else 1]
        c = SimulatedCluster(specs, THR, 1, round_length=120.0, restart_penalty=10.0, early_rounds=(5.0, 5.0),
                             slurm_starts=True)
        c.apply(RoundDecision(run=(0,), placement={0: {GPU: 1}}))
        c.advance()
        assert c.now == ends_at and c.finished[0].finish_time == 60.0

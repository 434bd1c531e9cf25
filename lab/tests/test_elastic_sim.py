"""Elastic GPU counts in the simulator (issue 34 parts 1 and 3): the job spec's `gpus_range` and `shockwave simulate
--elastic N`, the view a declared workload gives (only declared jobs list other counts), the default's counts at round
boundaries with the restart cost, a rigid job never resized, and the lower bound of an elastic workload."""
from __future__ import annotations

import json
from dataclasses import replace

import pytest
from click.testing import CliRunner

from shockwave_lab.simulate import elastic_jobs, run_simulation, workload_lower_bound
from shockwave_lab.sim.cluster import SimulatedCluster
from shockwave_lab.workload.errors import WorkloadError
from shockwave_lab.workload.spec import read_spec
from slurm_shockwave.cli.main import cli
from tests.helpers import job, table

#: ResNet-18 at batch size 32 on 1, 2, 4, 8 GPUs (it/s of the whole job): sublinear
THR = table({("ResNet-18", 32, n): t for n, t in {1: 10.0, 2: 18.0, 4: 32.0, 8: 56.0}.items()})


def jobs(n=6, gap=4000.0, gpus=1, steps=36000):
    return [job(i, steps, arrival=i * gap, gpus=gpus, isolated_runtime=steps / THR.get("ResNet-18", 32, gpus))
            for i in range(n)]


def run(specs, gpus=8, **kw):
    return run_simulation(specs, THR, gpus, "shockwave-edf", semantics="controller", keep_round_log=True, **kw)


def test_a_declared_workload_lists_counts_only_for_its_elastic_jobs():
    specs = jobs(2)
    legacy = SimulatedCluster(specs, THR, 8).observe()
    assert legacy.jobs[0].throughput_by_gpus and legacy.jobs[0].gpus_range is None  # Pollux's premise
    mixed = [replace(specs[0], gpus_range=(1, 4)), specs[1]]
    c = SimulatedCluster([replace(j, arrival_time=0.0) for j in mixed], THR, 8)
    views = {j.job_id: j for j in c.observe().jobs}
    assert set(views[0].throughput_by_gpus) == {1, 2, 4} and views[0].gpus_range == (1, 4)
    assert views[1].throughput_by_gpus == {} and views[1].gpus_range is None


def test_light_load_elastic_jobs_finish_sooner_and_a_rigid_one_is_never_resized():
    """Jobs arriving one at a time on 8 GPUs: elastic, each runs on 8 (5.6x its 1-GPU speed) less its restarts."""
    specs = jobs()
    rigid = run(specs)
    elastic = run(specs, elastic=8)
    assert elastic.metrics.avg_jct < 0.4 * rigid.metrics.avg_jct
    assert max(sum(p.values()) for r in elastic.round_log for p in r.decision.placement.values()) == 8
    # a mix: job 0 rigid, the rest elastic: job 0 always on its own count, the others grow
    mix = [specs[0]] + elastic_jobs(specs[1:], 8)
    res = run(mix)
    placed = [(jid, sum(p.values())) for r in res.round_log for jid, p in r.decision.placement.items()]
    assert {n for jid, n in placed if jid == 0} == {1}
    assert max(n for jid, n in placed if jid != 0) == 8
    assert res.metrics.avg_jct < rigid.metrics.avg_jct


def test_grown_jobs_give_gpus_back_and_every_change_is_a_restart():
    """Two jobs of 1 GPU, the second 1,000 s after the first: the first shrinks from 8 when the second arrives."""
    specs = elastic_jobs(jobs(2, gap=1000.0, steps=360000), 8)
    res = run(specs)
    first = [sum(r.decision.placement[0].values()) for r in res.round_log if 0 in r.decision.placement]
    assert first[0] == 8 and min(first) < 8 and first[-1] >= 4
    changes = sum(1 for a, b in zip(first, first[1:]) if a != b)
    record = next(r for r in res.records if r.job_id == 0)
    assert record.restarts >= changes >= 1  # each count change of a running job is a restart, charged
    assert res.metrics.lower_bound <= res.metrics.makespan


def test_the_lower_bound_of_an_elastic_job_is_its_fastest_count():
    (one,) = jobs(1)
    rigid = workload_lower_bound([one], THR, 8)
    elastic = workload_lower_bound(elastic_jobs([one], 8), THR, 8)
    assert rigid == pytest.approx(3600.0)  # 36,000 steps at 10 it/s
    assert elastic == pytest.approx(3600.0 * 10 / 56)  # at 56 it/s on 8 GPUs: the work is no bound here


def test_the_job_spec_range_and_the_cli_switch(tmp_path):
    good = tmp_path / "jobs.jsonl"
    good.write_text(json.dumps({"model": "ResNet-18", "batch_size": 32, "gpus": 2, "epochs": 1,
                                "gpus_range": [1, 8]}) + "\n")
    assert read_spec(good)[0].gpus_range == (1, 8)
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"model": "ResNet-18", "batch_size": 32, "gpus": 4, "epochs": 1,
                               "gpus_range": [1, 2]}) + "\n")
    with pytest.raises(WorkloadError, match="gpus_range"):
        read_spec(bad)
    with pytest.raises(ValueError, match="at least 1"):
        elastic_jobs(jobs(1), 0)
    out = CliRunner().invoke(cli, ["simulate", "--elastic", "0"])
    assert out.exit_code != 0 and "--elastic" in out.output

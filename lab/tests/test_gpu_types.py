"""Several GPU types in the simulator (issue 24): `--gpus v100:16,p100:8`, a job runs at the throughput of the type
it is placed on, a type change restarts it, its exclusive time is on its fastest type, every policy places gangs on
one type it can run on, a typed cluster of one type is the untyped pool."""
import dataclasses
import json

import pytest
from click.testing import CliRunner

from solver.placement import Packer, PlacementError, check_placement, place
from solver.policies import make_policy, policy_names
from solver.types import GPU, ClusterView, JobPlan, RoundDecision
from slurm_shockwave.cli.main import cli
from slurm_shockwave.controller.loop import RoundLoop
from shockwave_lab.data_files import experiment_paths
from shockwave_lab.metrics import dynamic_ftf
from shockwave_lab.sim.cluster import SimulatedCluster
from shockwave_lab.simulate import load_workload, run_simulation
from shockwave_lab.workload import gpu_types
from shockwave_lab.workload.throughputs import ThroughputTable
from tests.helpers import job, mkjob, random_workload, table

PATHS = experiment_paths("tacc_32gpus")
THR = PATHS["throughputs"]
FAST, SLOW = table({("ResNet-18", 32, 1): 10.0}), table({("ResNet-18", 32, 1): 5.0})


class Scripted:
    """Places job 0 on the types given per round."""
    name = "scripted"

    def __init__(self, types):
        self.types = list(types)

    def decide(self, view):
        if not view.jobs:
            return RoundDecision()
        t = self.types.pop(0) if self.types else "fast"
        return RoundDecision(run=(0,), placement={0: {t: 1}}, plans={0: JobPlan(0, rule="policy")})


def test_parse_gpus():
    assert gpu_types.parse_gpus("32") == 32
    assert gpu_types.parse_gpus("v100:16, p100:8") == {"v100": 16, "p100": 8}
    for bad in ("v100:0", "v100:2,v100:2", "abc", "v100:x", ":4", "0", "gpu:4"):
        with pytest.raises(ValueError):
            gpu_types.parse_gpus(bad)


def test_a_job_runs_at_its_types_throughput_and_restarts_when_its_type_changes():
    def run(types):
        c = SimulatedCluster([job(0, 3600, isolated_runtime=360)], {"fast": FAST, "slow": SLOW},
                             {"fast": 1, "slow": 1})
        RoundLoop(c, Scripted(types)).run()
        return c.finished[0]
    fast = run(["fast"] * 5)
    assert fast.finish_time == pytest.approx(360.0) and fast.restarts == 0
    slow = run(["slow"] * 10)
    assert slow.finish_time == pytest.approx(720.0) and slow.restarts == 0
    # fast, slow, fast: 1200 + 600 x 100/120 + 1200 x 100/120 steps (each change of type is a restart: 20 s of the
    # round lost), the 900 left at 10 it/s
    mixed = run(["fast", "slow", "fast", "fast", "fast"])
    assert mixed.restarts == 2
    assert mixed.finish_time == pytest.approx(360 + 900 / 10.0)


def test_with_the_controllers_rounds_a_running_job_asks_for_the_type_it_runs_on():
    """As the Slurm backend's view (slurm/gpu_types.py), with early rounds (the controller) a running job's view asks
    for the type it runs on: the controller moves it only by not running it; with the reference's rounds its
    user's (none here): a policy may move it, a restart."""
    for early, pinned in ((None, None), ((5.0, 0.0), "slow")):
        c = SimulatedCluster([job(0, 3600, isolated_runtime=360)], {"fast": FAST, "slow": SLOW},
                             {"fast": 1, "slow": 1}, early_rounds=early)
        assert c.observe().jobs[0].gpu_type is None
        c.apply(RoundDecision(run=(0,), placement={0: {"slow": 1}}, plans={0: JobPlan(0, rule="policy")}))
        c.advance()
        seen = c.observe().jobs[0]
        assert seen.running_type == "slow" and seen.gpu_type == pinned
        assert Packer(c.capacity).take_job(seen) == (pinned or "fast")
    one = SimulatedCluster([job(0, 3600, isolated_runtime=360)], FAST, 2, early_rounds=(5.0, 0.0))
    one.apply(RoundDecision(run=(0,), placement={0: {GPU: 1}}, plans={0: JobPlan(0, rule="policy")}))
    one.advance()
    assert one.observe().jobs[0].gpu_type is None                      # one type: nothing to pin


def test_the_view_lists_the_types_a_job_can_run_on():
    tables = {"fast": FAST, "slow": SLOW, "none": table({("LM", 10, 1): 3.0})}
    pinned = dataclasses.replace(job(1, 3600, isolated_runtime=360), gpu_type="slow")
    c = SimulatedCluster([job(0, 3600, isolated_runtime=360), pinned], tables, {"fast": 1, "slow": 1, "none": 4})
    views = {j.job_id: j for j in c.observe().jobs}
    assert views[0].throughput_by_type == {"fast": 10.0, "slow": 5.0}       # no throughput on "none"
    assert views[0].throughput == 10.0                                        # its reference type: the fastest
    assert views[1].throughput_by_type == {"slow": 5.0} and views[1].gpu_type == "slow"
    assert c.capacity == {"fast": 1, "slow": 1, "none": 4}
    with pytest.raises(ValueError, match="no GPU type"):
        SimulatedCluster([dataclasses.replace(pinned, gpu_type="other")], tables, {"fast": 1, "slow": 1})


def test_placement_takes_the_fastest_type_with_room_and_only_types_the_job_can_run_on():
    a = dataclasses.replace(mkjob(0, g=2), throughput_by_type={"v100": 4.0, "k80": 1.0})
    b = dataclasses.replace(mkjob(1, g=2), throughput_by_type={"v100": 4.0, "k80": 1.0})
    packer = Packer({"v100": 2, "k80": 4, "p100": 8})
    assert packer.take_job(a) == "v100" and packer.take_job(b) == "k80"     # never p100: no throughput there
    v = ClusterView(0.0, 0, 120.0, 14, (a, b), capacity={"v100": 2, "k80": 4, "p100": 8})
    with pytest.raises(PlacementError, match="type it has a throughput on"):
        check_placement(v, RoundDecision(run=(0,), placement={0: {"p100": 2}}))
    # chosen without speeds, the run set only fits largest gangs first on the types with the most free GPUs
    c = dataclasses.replace(mkjob(2, g=4), throughput_by_type={"v100": 1.0, "k80": 1.0})
    small = dataclasses.replace(mkjob(3, g=1), throughput_by_type={"v100": 9.0, "k80": 1.0})
    v = ClusterView(0.0, 0, 120.0, 6, (small, c), capacity={"v100": 4, "k80": 2})
    assert place(v, [3, 2]) == {3: {"k80": 1}, 2: {"v100": 4}}


def test_a_start_goes_where_it_leaves_out_the_fewest_gpus_of_jobs_pinned_to_a_type():
    """The replay of 2026-12-07 11:37: a 4-GPU start first in the round took the four V100s, the fastest type for
    it, and three running 1-GPU jobs pinned there (a running job's view asks for its type) had no room; on the K80s
    it leaves out one job's GPU instead of three."""
    speeds = {"v100": 4.0, "k80": 1.0}
    start = dataclasses.replace(mkjob(5, g=4), throughput_by_type=speeds)
    on_v100 = [dataclasses.replace(mkjob(i), throughput_by_type=speeds, gpu_type="v100") for i in (1, 2, 3)]
    on_k80 = dataclasses.replace(mkjob(6), throughput_by_type=speeds, gpu_type="k80")
    pinned, cap = on_v100 + [on_k80], {"v100": 4, "k80": 4}
    assert Packer(cap).take_job(start) == "v100"                            # nothing pinned: the fastest
    packer = Packer(cap, pinned)
    assert packer.take_job(start) == "k80"
    assert [packer.take_job(j) for j in pinned] == ["v100"] * 3 + [None]
    v = ClusterView(0.0, 0, 120.0, 8, (start, *pinned), capacity=cap)
    assert place(v, [5, 1, 2, 3]) == {5: {"k80": 4}, 1: {"v100": 1}, 2: {"v100": 1}, 3: {"v100": 1}}
    # where the pinned jobs leave the fastest type room, the start still goes there
    assert Packer({"v100": 8, "k80": 4}, pinned).take_job(start) == "v100"
    # a reservation is a preference, never room: a type the start alone fits is still taken
    assert Packer({"v100": 4}, on_v100).take_job(start) == "v100"
    # the policies' own rounds: the start first (its fair start has come), the three keep running (before: the
    # start on the V100s and job 6 alone kept)
    running = [dataclasses.replace(j, epochs_done=5, steps_done=5000 / 32, bs_history=(32,) * 5, ran_last_round=True,
                                   running_type=j.gpu_type, run_time=500.0) for j in pinned]
    v = ClusterView(600.0, 5, 120.0, 8, (start, *running), capacity=cap)
    for name in ("shockwave-edf", "shockwave-paper"):
        decision = make_policy(name).decide(v)
        assert decision.run == (5, 1, 2, 3), name
        assert decision.placement == {5: {"k80": 4}, 1: {"v100": 1}, 2: {"v100": 1}, 3: {"v100": 1}}


def test_a_cluster_of_one_type_is_the_untyped_pool():
    jobs = random_workload(3, 10, 4, ThroughputTable.load(THR))
    for policy in ("shockwave-edf", "max_min_fairness", "pollux"):
        untyped = run_simulation(jobs, THR, 4, policy).metrics
        one_type = run_simulation(jobs, THR, {"v100": 4}, policy).metrics
        assert (one_type.makespan, one_type.rho, one_type.ftf_dynamic) == \
            (untyped.makespan, untyped.rho, untyped.ftf_dynamic)


def test_exclusive_time_is_on_the_fastest_type():
    base = ThroughputTable.load(THR)
    p100 = ThroughputTable.load(THR, "p100")
    # Transformer bs 128 on 1 GPU: 1.15 it/s on the TACC file's V100 column, 3.07 on its P100 one
    t = load_workload_spec([{"model": "Transformer", "batch_size": 128, "total_steps": 3000}], base)[0]
    tables = {"v100": base, "p100": p100}
    assert gpu_types.reference_type(t, tables, {"v100": 4, "p100": 4}) == "p100"
    typed, = gpu_types.retype([t], base, tables, {"v100": 4, "p100": 4})
    ratio = base.get("Transformer", 128, 1) / p100.get("Transformer", 128, 1)
    assert typed.isolated_runtime == pytest.approx(t.isolated_runtime * ratio) and ratio < 0.5
    assert gpu_types.reference_type(dataclasses.replace(t, gpu_type="v100"), tables, {"v100": 4, "p100": 4}) == "v100"
    # its cluster counted at its speed: 4 V100s at 1.15 / 3.07 of a P100, plus 4 P100s
    g = gpu_types.cluster_gpus(t, tables, {"v100": 4, "p100": 4}, "p100")
    assert g == pytest.approx(4 + 4 * base.get("Transformer", 128, 1) / p100.get("Transformer", 128, 1))


def load_workload_spec(entries, thr, tmp=None):
    import tempfile
    from pathlib import Path
    path = Path(tempfile.mkdtemp()) / "jobs.json"
    path.write_text(json.dumps({"jobs": entries}))
    return load_workload(path, thr, 8)


def test_dynamic_ftf_counts_the_cluster_at_each_jobs_speed():
    # one job alone on 2 GPUs of which one is half as fast for it: entitled to all of it, finishing at once is 1.0
    assert dynamic_ftf([(0, 100, 100, 1, 1.5)], 2) == [1.0]
    # two 1-GPU jobs on the same cluster, both 100 s: each entitled to 1.5 / 2 of a fast GPU
    a, b = dynamic_ftf([(0, 200, 100, 1, 1.5), (0, 200, 100, 1, 1.5)], 2)
    assert a == b == pytest.approx(200 * 0.75 / 100)
    assert dynamic_ftf([(0, 200, 100, 1), (0, 200, 100, 1)], 2) == [2.0, 2.0]     # without: the GPU count


@pytest.mark.parametrize("policy", policy_names())
def test_every_policy_places_gangs_on_one_type_it_can_run_on(policy):
    capacity = {"v100": 4, "p100": 2, "k80": 2}
    base, tables = gpu_types.tables_for(THR, capacity)
    jobs = random_workload(5, 14, 4, base)
    jobs = [dataclasses.replace(j, gpu_type="p100") if j.job_id % 5 == 0 and j.num_gpus <= 2 else j for j in jobs]
    jobs = gpu_types.retype(jobs, base, tables, capacity)
    cluster = SimulatedCluster(jobs, tables, capacity)
    used_types = set()

    def check(record):
        view, placement = record.view, record.decision.placement
        free = dict(capacity)
        for jid in record.run:
            (t, n), = placement[jid].items()
            j = view.job(jid)
            assert t in j.throughput_by_type and (j.gpu_type is None or t == j.gpu_type)
            free[t] -= n
            used_types.add(t)
        assert min(free.values()) >= 0, "over a type's capacity"

    loop = RoundLoop(cluster, make_policy(policy), on_round=check)
    loop.run(max_rounds=5000)
    assert cluster.done() and len(cluster.finished) == len(jobs)
    assert loop.fallbacks == 0
    assert len(used_types) >= 2


def test_simulate_cli_takes_gpus_by_type(tmp_path):
    spec = tmp_path / "jobs.json"
    spec.write_text(json.dumps([{"model": "ResNet-18", "batch_size": 32, "epochs": 3, "gpus": 2},
                                {"model": "LM", "batch_size": 10, "epochs": 2, "gpu_type": "k80", "arrival": 60}]))
    r = CliRunner().invoke(cli, ["simulate", "--trace", str(spec), "--gpus", "v100:2,k80:2", "--policy",
                                 "gavel-het", "--json"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.output)
    assert out["gpus"] == {"v100": 2, "k80": 2}
    assert out["results"]["max_min_fairness_het"]["jobs"] == 2
    r = CliRunner().invoke(cli, ["simulate", "--trace", str(spec), "--gpus", "v100:2,p100:2"])
    assert r.exit_code == 2 and "k80" in r.output and "\n" not in r.output.strip()
    assert GPU not in gpu_types.capacity_of({"v100": 2})


class RunAll:
    """Runs every job, placed by the loop's check (the fastest type with room, in job order)."""
    name = "run-all"

    def decide(self, view):
        return RoundDecision(run=tuple(j.job_id for j in view.jobs),
                             plans={j.job_id: JobPlan(j.job_id, rule="policy") for j in view.jobs})


def test_with_the_controllers_rounds_a_long_job_started_on_a_slow_type_moves_to_a_faster_one_that_frees():
    """solver/type_moves.py in the loop: job 1 starts on the slow GPU (job 0 took the fast one); when job 0 ends the
    fast GPU is idle, and once job 1 has run the restart bound's 10 rounds it moves there: one restart, finished
    long before it would have on the slow type (with the restart cost that the gate charges, 30 s)."""
    def run(cost):
        c = SimulatedCluster([job(0, 3000, isolated_runtime=300), job(1, 36000, isolated_runtime=3600)],
                             {"fast": FAST, "slow": SLOW}, {"fast": 1, "slow": 1}, early_rounds=(5.0, 0.0))
        loop = RoundLoop(c, RunAll(), preemption_cost_s=cost)
        loop.run()
        return c.finished[1], loop
    moved, loop = run(30.0)
    assert loop.type_moves == 1 and moved.restarts == 1
    stayed, still = run(None)                                    # no gate: no restart cost known, no moves
    assert still.type_moves == 0 and stayed.restarts == 0
    assert stayed.finish_time == pytest.approx(7200.0)           # 36,000 steps at 5 per s
    assert moved.finish_time < 0.6 * stayed.finish_time

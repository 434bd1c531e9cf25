"""The replay's simulated column (shockwave_lab/replay/compare.py), no Slurm: plain Slurm's model decides at the
cluster's scheduler passes, and the spread of simulations with arrivals moved by up to a wall second."""
import pytest

from shockwave_lab.data_files import experiment_paths
from shockwave_lab.replay import compare
from shockwave_lab.replay.api import load
from shockwave_lab.workload.models import steps_per_epoch
from shockwave_lab.replay.site import model_round_s
from shockwave_lab.workload.generate import generate, trace_text
from shockwave_lab.workload.throughputs import ThroughputTable
from test_replay_slurm import CI_TRACE


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    thr = experiment_paths("tacc_32gpus")["throughputs"]
    trace = tmp_path_factory.mktemp("compare") / "t.trace"
    trace.write_text(trace_text(generate(CI_TRACE, ThroughputTable.load(thr))))
    _jobs, specs, table = load(trace, thr, 8, 3)
    return specs, table


def test_plain_slurms_model_decides_at_each_scheduler_pass_the_controllers_every_120_s(inputs):
    specs, table = inputs
    slurm = compare.simulate(specs, table, 8, 2, "slurm", 4.0, 30.0)
    shockwave = compare.simulate(specs, table, 8, 2, "shockwave-edf", 4.0, 30.0)
    assert model_round_s(30.0) == 30.0 and model_round_s(40.0) == 40.0
    assert slurm["policy"] == "slurm-multifactor" and slurm["jobs"] == shockwave["jobs"] == 12
    # rounds of 30 s against 120 s over makespans of the same order
    assert slurm["rounds"] / slurm["makespan_s"] > 2.5 * shockwave["rounds"] / shockwave["makespan_s"]


def test_the_spread_moves_arrivals_by_up_to_the_time_scale_and_summarises_each_figure(inputs, monkeypatch):
    specs, table = inputs
    seen = []
    real_simulate = compare.simulate

    def spy(moved, *a, **k):
        seen.append(sorted(m.arrival_time - s.arrival_time for m, s in zip(moved, specs)))
        return real_simulate(moved, *a, **k)

    monkeypatch.setattr(compare, "simulate", spy)
    out = compare.spread(specs, table, 8, 2, "slurm", 4.0, 30.0, runs=4)
    assert out["runs"] == 4 and out["jitter_s"] == 30.0 and len(seen) == 4
    assert all(0.0 <= d <= 30.0 for run in seen for d in run) and len({tuple(r) for r in seen}) == 4
    for key in compare.SPREAD_KEYS:
        v = out[key]
        assert v["min"] <= v["median"] <= v["max"] and v["min"] <= v["mean"] <= v["max"]
    again = compare.spread(specs, table, 8, 2, "slurm", 4.0, 30.0, runs=4)
    assert again == out                                   # seeded: the same spread for the same inputs


def test_the_simulators_view_declares_what_the_emulated_job_declares(tmp_path):
    """Both sides' predictors see the same declared batch-size range: a static job none above its own, an adaptive
    one the trace's maximum (not where its schedule happens to stop).  On the demo's trace: every mode."""
    from shockwave_lab.demo.emulated import demo_trace
    from shockwave_lab.replay.plan import plan_jobs, users
    from shockwave_lab.sim.cluster import SimulatedCluster
    from shockwave_lab.sim.job import SimJob
    _jobs, specs, table = load(*demo_trace(tmp_path), 8, 3)
    planned = {j.index: j for j in plan_jobs(specs, table, users(3))}
    cluster = SimulatedCluster(specs, table, 8)
    modes = set()
    for s in specs:
        view = cluster._view(SimJob(s, table))
        declared = planned[int(s.job_id)].spec(30.0)
        assert (view.min_batch_size, view.max_batch_size) == (declared["min_bs"], declared["max_bs"])
        assert f"max_bs={declared['max_bs']} " in planned[int(s.job_id)].comment(30.0)
        if s.mode == "static":
            assert view.max_batch_size == s.initial_bs
        else:
            assert view.max_batch_size == s.max_bs >= max(planned[int(s.job_id)].schedule)
        modes.add(s.mode)
    assert modes == {"static", "gns", "accordion"}



def test_the_replays_controller_and_its_model_start_early_rounds_alike(inputs, tmp_path):
    """The replay's controller polls for freed GPUs as production does at 120 s rounds (5 s), scaled, but no more
    often than every 0.5 wall s; its simulated column ends rounds early at the same times in trace seconds."""
    import shutil
    import types

    from slurm_shockwave.controller.config import ControllerConfig, load_config
    from shockwave_lab.replay.run import Replay
    from shockwave_lab.replay.site import controller_timing, model_early_rounds
    assert ControllerConfig(round_seconds=120.0).early_round_timing == (5.0, 5.0)
    assert controller_timing(4.0) == (1.25, 1.25) and controller_timing(30.0) == (0.5, 0.5)
    assert model_early_rounds(30.0) == (15.0, 15.0) and model_early_rounds(None) == (5.0, 5.0)
    run = Replay([], gpus=8, nodes=2, time_scale=30.0)
    try:
        run.cluster = types.SimpleNamespace(partition="gpu", bin_dir=None, env={"SLURM_CONF": "/nonexistent"})
        (tmp_path / "c.toml").write_text(run.config_text())
        cfg = load_config(tmp_path / "c.toml")
    finally:
        shutil.rmtree(run.root)
    assert cfg.round_seconds == 4.0 and cfg.early_round_timing == controller_timing(30.0)
    specs, table = inputs
    early = compare.simulate(specs, table, 8, 2, "shockwave-edf", 30.0, 30.0)
    plain = compare.simulate(specs, table, 8, 2, "shockwave-edf", 30.0, 30.0, early=False)
    assert early["rounds"] > plain["rounds"] and early["makespan_s"] != plain["makespan_s"]


def test_the_simulated_column_is_run_simulation_with_the_gate_at_the_measured_cost(inputs):
    """One driver: the replay's (and the demo's) simulated column is simulate.py `run_simulation` with the
    controller's preemption gate at the restart cost measured in the real run; the gate keeps the preemptions that
    would be wasted (the same jobs without it waste some).  Plain Slurm's model preempts nobody."""
    from shockwave_lab.replay.collect import figures
    from shockwave_lab.simulate import run_simulation
    specs, table = inputs
    off = run_simulation(specs, table, 8, "shockwave-edf", restart_penalty=12.5, gpus_per_node=4)
    on = run_simulation(specs, table, 8, "shockwave-edf", restart_penalty=12.5, gpus_per_node=4,
                        preemption_cost_s=12.5, mode="authoritative")
    assert off.preemptions["wasted"] > 0 and off.preemptions["kept"] == 0
    assert on.preemptions["wasted"] == 0 and on.preemptions["kept"] > 0
    column = compare.simulate(specs, table, 8, 2, "shockwave-edf", 12.5, None, early=False)
    assert column["restart_penalty_s"] == 12.5 and column["wasted_preemptions"] == 0
    assert column["preemptions"] == on.preemptions["preempted"] and column["rounds"] == on.rounds
    assert {k: column[k] for k in figures(on.metrics)} == figures(on.metrics)
    plain = compare.simulate(specs, table, 8, 2, "slurm", 12.5, 30.0)
    assert plain["preemptions"] == plain["restarts"] == 0


#: a static ResNet-50 job of 38,923 steps at batch size 16: 6.2 epochs of 6,250 steps (a trace's steps may end
#: mid-epoch; this line is job 15 of bench/results/replay/elastic-16jobs-seed5-1-3h.trace, made static)
MID_EPOCH = ("ResNet-50 (batch size 16)\tpython3 main.py -j 4 -a resnet50 -b 16 %s/imagenet/\t"
             "image_classification/imagenet\t--num_minibatches\t1\t38923\t1\tstatic\t1\t-1.000000\t3673\t0\n")


def test_the_replays_jobs_run_whole_epochs_as_the_emulated_program_does(tmp_path):
    """The emulated program sleeps every epoch of its schedule to its end (7 here); the simulated column runs the
    same 7 epochs, not the trace's 6.2: alone (started in the first round: no start cost), the simulated job takes
    the plan's work, to a round's rounding of steps."""
    thr = experiment_paths("tacc_32gpus")["throughputs"]
    trace = tmp_path / "one.trace"
    trace.write_text(MID_EPOCH)
    jobs, specs, table = load(trace, thr, 8, 1)
    (job,), (spec,) = jobs, specs
    assert job.epochs == spec.num_epochs == 7 and spec.total_steps == 7 * steps_per_epoch(spec.samples, 16)
    sim = compare.simulate(specs, table, 8, 2, "shockwave-edf", 4.0, 30.0)
    assert sim["avg_jct_s"] == pytest.approx(job.work_s, abs=5.0)
    assert job.work_s == pytest.approx(spec.isolated_runtime) and job.work_s > 38923 / table.get("ResNet-50", 16, 1) + 400


def test_every_nth_job_may_not_be_preempted_on_both_sides(inputs, tmp_path):
    """`--no-requeue-every N`: every N-th job by arrival is submitted with --no-requeue and simulated as
    `preemptible: false`; the simulated column counts their restarts (none: solver/pinned.py)."""
    thr = experiment_paths("tacc_32gpus")["throughputs"]
    trace = tmp_path / "t.trace"
    trace.write_text(trace_text(generate(CI_TRACE, ThroughputTable.load(thr))))
    jobs, specs, table = load(trace, thr, 8, 3, no_requeue_every=3)
    assert [j.requeue for j in jobs] == [i % 3 != 0 for i in range(len(jobs))]
    pinned = {j.index for j in jobs if not j.requeue}
    assert {s.job_id for s in specs if s.preemptible is False} == pinned and len(pinned) == 4
    sim = compare.simulate(specs, table, 8, 2, "shockwave-edf", 4.0, 30.0)
    assert sim["no_requeue_restarts"] == 0
    result = {"real": {"no_requeue_restarts": 0}, "simulated": sim, "no_requeue": ["t000"]}
    assert ["restarts of --no-requeue jobs", "0", "0", ""] in compare.rows(result)
    assert "no_requeue_restarts" not in compare.simulate(inputs[0], inputs[1], 8, 2, "shockwave-edf", 4.0, 30.0)


def test_on_several_gpu_types_each_job_sleeps_its_nodes_types_epochs_and_the_site_gets_one_speed_per_type(
        tmp_path, monkeypatch):
    """`shockwave replay` on nodes of several types (bench/replay_typed.py): a job's epochs on each type are the
    simulator's (samples / batch / its throughput there), the emulated program takes its node's, the controller's
    speeds are each type's median over the jobs, and the simulated column counts the moves between types."""
    from shockwave_lab.replay.api import site_speeds
    from shockwave_lab.replay.emujob import durations_at
    from shockwave_lab.workload.gpu_types import BASE
    thr = experiment_paths("tacc_32gpus")["throughputs"]
    trace = tmp_path / "t.trace"
    trace.write_text(trace_text(generate(CI_TRACE, ThroughputTable.load(thr))))
    types = ["v100", "v100", "k80", "k80"]
    jobs, specs, tables = load(trace, thr, 8, 3, gpu_types=types)
    assert set(tables) == {BASE, "v100", "k80"}
    j, s = jobs[0], min(specs, key=lambda s: (s.arrival_time, s.job_id))
    bs = j.schedule[0]
    assert j.epoch_s_by_type[bs]["k80"] == pytest.approx(s.samples / bs / tables["k80"].get(s.model, bs, s.num_gpus))
    assert j.epoch_s_by_type[bs]["v100"] == pytest.approx(j.epoch_s[bs])
    spec = j.spec(30.0)
    assert spec["node_types"] == {"node1": "v100", "node2": "v100", "node3": "k80", "node4": "k80"}
    for node, t in (("node1", "v100"), ("node4", "k80")):
        monkeypatch.setenv("SLURMD_NODENAME", node)
        assert durations_at(spec, j.gpus) == pytest.approx({int(b): at[t] for b, at in spec["epoch_s_by_type"].items()})
    monkeypatch.setenv("SLURMD_NODENAME", "node9")
    with pytest.raises(SystemExit, match="no epoch durations on node 'node9'"):
        durations_at(spec, j.gpus)
    speeds = site_speeds(jobs, types)
    assert speeds["v100"] == 1.0 and 0 < speeds["k80"] < 1
    # each job declares its own speed on each type (slurm/hints.py `speed=`), as its epochs on each give it
    from slurm_shockwave.slurm.hints import parse_hints
    for job in jobs:
        declared = dict(parse_hints(job.comment(30.0), "shockwave").speed)
        at = job.epoch_s_by_type[job.schedule[0]]
        assert declared == pytest.approx({t: min(at.values()) / s for t, s in at.items()}, abs=6e-4)
    # its time limit covers a run that does all its work on the slowest type (a K80-bound run ran out of time)
    import math
    slow = j.epochs * max(j.epoch_s_by_type[bs].values()) / 30.0 / 60.0
    assert j.time_limit_min(30.0, 1.5) == max(1, math.ceil(1.5 * slow)) > 1.5 * j.epochs * j.epoch_s[bs] / 30.0 / 60.0
    sim = compare.simulate(specs, tables, {"v100": 4, "k80": 4}, 4, "shockwave-edf", 4.0, 30.0)
    assert sim["type_moves"] >= 0 and sim["makespan_s"] > 0
    assert compare.changes(["v100", "k80", "k80", "v100"]) == 2


def test_uniform_speeds_make_the_controllers_speeds_every_jobs_own(tmp_path):
    """`--uniform`: each job's epoch on a type is its workload-column epoch over the type's site speed, so the
    controller's `gpu_type_speeds` are true for every job (the replay then measures the enactment alone)."""
    from shockwave_lab.replay.api import site_speeds
    thr = experiment_paths("tacc_32gpus")["throughputs"]
    trace = tmp_path / "t.trace"
    trace.write_text(trace_text(generate(CI_TRACE, ThroughputTable.load(thr))))
    types = ["v100", "k80"]
    own, _s, _t = load(trace, thr, 8, 3, gpu_types=types)
    jobs, specs, tables = load(trace, thr, 8, 3, gpu_types=types, uniform=True)
    speeds = site_speeds(own, types)
    assert site_speeds(jobs, types) == speeds
    for j in jobs:
        for bs, at in j.epoch_s_by_type.items():
            assert at["k80"] == pytest.approx(at["v100"] / speeds["k80"]) and at["v100"] == pytest.approx(j.epoch_s[bs])
    assert any(abs(a.epoch_s_by_type[b]["k80"] - j.epoch_s_by_type[b]["k80"]) > 1 for a, j in zip(own, jobs)
               for b in a.epoch_s_by_type)                     # each job's own speeds differ from the site's
    assert compare.simulate(specs, tables, {"v100": 4, "k80": 4}, 2, "shockwave-edf", 4.0, 30.0)["makespan_s"] > 0


def test_the_typed_replay_reads_one_real_run_against_the_simulated_spread(tmp_path):
    """bench/replay_typed.py: the simulated spread of a typed result (16 simulations, arrivals moved by up to 1 wall
    s) from the result's own inputs, and real against its mean and range in the doc's lines."""
    from shockwave_lab.bench.replay_typed import add_spread, spread_lines
    from shockwave_lab.data_files import DEFAULT_EXPERIMENT
    thr = experiment_paths(DEFAULT_EXPERIMENT)["throughputs"]
    trace = tmp_path / "t.trace"
    trace.write_text(trace_text(generate(CI_TRACE, ThroughputTable.load(thr))))
    res = {"trace": str(trace), "gpus": 8, "nodes": 2, "users": 3, "gpu_types": ["v100", "k80"], "uniform_speeds": False,
           "policy": "shockwave-edf", "time_scale": 30.0, "fair_share": "slurmdbd", "real": {"restart_cost_s": 20.0}}
    add_spread(res)
    spread = res["simulated_spread"]
    assert spread["runs"] == 16
    for k in ("makespan_s", "avg_jct_s"):
        assert 0 < spread[k]["min"] <= spread[k]["mean"] <= spread[k]["max"]
    res["real"].update(makespan_s=spread["makespan_s"]["mean"], avg_jct_s=2 * spread["avg_jct_s"]["max"])
    lines = spread_lines(res).splitlines()
    assert lines[0].startswith("- makespan against the mean of the simulated spread: yes (real / mean 1.000; inside")
    assert "average JCT against the mean of the simulated spread: **no**" in lines[1] and "outside its range" in lines[1]
    assert spread_lines({"real": {}}) == ""

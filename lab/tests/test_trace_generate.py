"""The trace generator (`shockwave trace generate`): reference semantics, determinism, mixes, arrivals, loading."""
from __future__ import annotations

import statistics

import pytest
from click.testing import CliRunner

from slurm_shockwave.cli.main import cli
from shockwave_lab.data_files import TRACES, THROUGHPUTS, experiment_paths
from shockwave_lab.simulate import load_workload
from shockwave_lab.workload import profiles
from shockwave_lab.workload.generate import GeneratorOptions, generate, trace_name, trace_text
from shockwave_lab.workload.throughputs import ThroughputTable
from shockwave_lab.workload.trace import read_trace

TACC = ThroughputTable.load(THROUGHPUTS / "tacc_throughputs.json")
WISR = ThroughputTable.load(THROUGHPUTS / "wisr_throughputs.json")


@pytest.mark.parametrize("jobs,lam,seed,ndur,table", [(120, 40, 25, 100, TACC), (220, 25, 4, 100, WISR),
                                                     (900, 5, 15, 1000, WISR)])
def test_reproduces_the_reference_traces_byte_for_byte(jobs, lam, seed, ndur, table):
    opts = GeneratorOptions(jobs=jobs, seed=seed, interarrival=lam, num_durations=ndur)
    name = trace_name(opts)
    assert (TRACES / name).exists(), name
    assert trace_text(generate(opts, table)) == (TRACES / name).read_text()


def test_deterministic_for_a_seed():
    a = trace_text(generate(GeneratorOptions(jobs=200, seed=7), TACC))
    b = trace_text(generate(GeneratorOptions(jobs=200, seed=7), TACC))
    c = trace_text(generate(GeneratorOptions(jobs=200, seed=8), TACC))
    assert a == b and a != c


def test_mode_and_gpu_mix_fractions():
    jobs = generate(GeneratorOptions(jobs=4000, seed=3, mode_mix=(0.2, 0.3, 0.5), gpu_mix=(0.5, 0.3, 0.15, 0.05)),
                    TACC)
    n = len(jobs)
    gns = sum(j.mode == "gns" for j in jobs) / n
    acc = sum(j.mode == "accordion" for j in jobs) / n
    static = sum(j.mode == "static" for j in jobs) / n
    assert abs(gns - 0.5) < 0.03
    # accordion jobs shorter than 1000 s become static (as in the reference): static + accordion keep 50%
    assert abs(static + acc - 0.5) < 0.03 and static >= 0.17
    assert all(j.mode != "accordion" or j.duration >= 1000 for j in jobs)
    dist = [j for j in jobs if j.model != "Recommendation"]          # Recommendation is single-GPU only
    assert all(j.gpus == 1 for j in jobs if j.model == "Recommendation")
    for g, p in zip((1, 2, 4, 8), (0.5, 0.3, 0.15, 0.05)):
        assert abs(sum(j.gpus == g for j in dist) / len(dist) - p) < 0.03, g


def test_poisson_arrivals_at_the_requested_rate():
    jobs = generate(GeneratorOptions(jobs=4001, seed=11, interarrival=30.0), TACC)
    gaps = [b.arrival - a.arrival for a, b in zip(jobs, jobs[1:])]
    assert jobs[0].arrival == 0 and min(gaps) >= 0
    assert abs(statistics.mean(gaps) - 30.0) < 1.5
    assert abs(statistics.pstdev(gaps) - 30.0) < 3.0          # exponential: std = mean


def test_gpus_limit_and_steps_from_throughputs():
    jobs = generate(GeneratorOptions(jobs=500, seed=2, gpu_mix=(0.2, 0.2, 0.3, 0.3), max_gpus=4), TACC)
    assert max(j.gpus for j in jobs) <= 4 and any(j.gpus == 4 for j in jobs)
    for j in jobs[:50]:
        assert j.total_steps == int(j.duration * TACC.get(j.model, j.batch_size, j.gpus))


def test_file_round_trips_through_the_loader(tmp_path):
    jobs = generate(GeneratorOptions(jobs=150, seed=5, max_gpus=16), TACC)
    path = tmp_path / "g.trace"
    path.write_text(trace_text(jobs))
    specs = read_trace(path, num_gpus=16, throughputs=TACC)
    assert len(specs) == len(jobs)
    for g, s in zip(jobs, specs):
        assert (s.model, s.initial_bs, s.num_gpus, s.mode, s.total_steps) == (g.model, g.batch_size, g.gpus,
                                                                             g.mode, g.total_steps)
        assert s.arrival_time == int(g.arrival)
    loaded = load_workload(path, TACC, 16)
    assert all(j.isolated_runtime > 0 for j in loaded)
    assert any(len(set(j.gns_schedule)) > 1 for j in loaded if j.mode == "gns")


def test_reference_patterns_equal_the_bundled_profile():
    """For a trace without a bundled profile we compute what the reference's profile generator computes."""
    p = experiment_paths("tacc_32gpus")
    jobs = read_trace(p["trace"], 32, TACC)
    ours = profiles.apply_reference_patterns(jobs, TACC)
    theirs = profiles.apply_profile(jobs, profiles.load_profile(p["profile"]))
    for a, b in zip(ours, theirs):
        assert a.gns_schedule == b.gns_schedule
        assert a.isolated_runtime == pytest.approx(b.isolated_runtime, abs=1e-3)


def test_cli_generate_writes_a_trace_simulate_reads(tmp_path):
    runner = CliRunner()
    res = runner.invoke(cli, ["trace", "generate", "--jobs", "12", "--gpus", "8", "--seed", "4", "--out",
                              str(tmp_path)])
    assert res.exit_code == 0, res.output
    files = list(tmp_path.glob("*.trace"))
    assert len(files) == 1 and files[0].name.startswith("12_0.2_5_100_40_4_")
    res = runner.invoke(cli, ["simulate", "--trace", str(files[0]), "--gpus", "8", "--policy", "max_min_fairness",
                              "--json", "--no-progress"])
    assert res.exit_code == 0, res.output
    assert '"makespan_over_lb"' in res.output


def test_cli_simulate_runs_the_policy_as_the_controller_does_unless_told_the_references_semantics(tmp_path):
    """--semantics controller (the default): the simulator starts a round when a job ends while another waits (the
    controller's 5 s poll and gap at 120 s rounds), so on a contended cluster it runs more, shorter rounds than
    under --semantics reference; the reference's shipped numbers are shown only beside the reference's semantics."""
    import json
    runner = CliRunner()
    assert runner.invoke(cli, ["trace", "generate", "--jobs", "12", "--gpus", "8", "--seed", "4", "--out",
                               str(tmp_path)]).exit_code == 0
    trace, = tmp_path.glob("*.trace")
    out = {}
    for flag in ([], ["--semantics", "reference"]):
        res = runner.invoke(cli, ["simulate", "--trace", str(trace), "--gpus", "2", "--policy", "shockwave-edf",
                                  "--no-progress", "-o", str(tmp_path / "r.json"), "--json", *flag])
        assert res.exit_code == 0, res.output
        full = json.loads((tmp_path / "r.json").read_text())
        out[full["semantics"]] = full["results"]["shockwave-edf"]
    ctl, ref = out["controller"], out["reference"]
    assert ctl["rounds"] > ref["rounds"]
    assert ctl["makespan"] != ref["makespan"]
    shown = {}
    for flag in ([], ["--semantics", "reference"]):
        res = runner.invoke(cli, ["simulate", "--policy", "fifo", "--json", "--no-progress", *flag])
        assert res.exit_code == 0, res.output
        shown[bool(flag)] = json.loads(res.output)["reference"]
    assert shown[False] == {} and shown[True]["allox"]["makespan"] > 0


@pytest.mark.parametrize("args,needle", [(["--jobs", "0"], "--jobs"), (["--jobs", "5", "--mode-mix", "1,1,1"],
                                                                      "--mode-mix"),
                                         (["--jobs", "5", "--gpu-mix", "a,b"], "--gpu-mix"),
                                         (["--jobs", "5", "--min-hours", "3", "--max-hours", "1"], "--min-hours"),
                                         (["--jobs", "5", "--gpus", "1", "--gpu-mix", "0,1,0,0"], "--gpu-mix"),
                                         (["--jobs", "5", "--seed", "-1"], "--seed"),
                                         (["--jobs", "5", "--interarrival", "nan"], "--interarrival"),
                                         (["--jobs", "5", "--throughputs", "/nonexistent.json"], "not found")])
def test_cli_bad_input_is_one_line(args, needle, tmp_path):
    res = CliRunner().invoke(cli, ["trace", "generate", *args, "--out", str(tmp_path / "x.trace")])
    assert res.exit_code == 2
    assert needle in res.output and len(res.output.strip().splitlines()) == 1
    assert not (tmp_path / "x.trace").exists()

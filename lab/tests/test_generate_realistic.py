"""The generator's realistic mode (issue 36): diurnal arrivals, sweeps, heavy-tailed lengths, offered load, the
`--realistic` preset (docs/workloads.md); the old options' traces unchanged."""

from __future__ import annotations

import hashlib
import json
import math
import statistics
from collections import Counter
from dataclasses import replace

import pytest
from click.testing import CliRunner

from shockwave_lab.data_files import THROUGHPUTS
from shockwave_lab.workload.arrivals import clock_hour, diurnal_amplitude
from shockwave_lab.workload.generate import GeneratorOptions, generate, realistic_options, trace_name, trace_text
from shockwave_lab.workload.lengths import LengthModel
from shockwave_lab.workload.throughputs import ThroughputTable
from shockwave_lab.workload.trace import read_trace
from slurm_shockwave.cli.main import cli

TACC = ThroughputTable.load(THROUGHPUTS / "tacc_throughputs.json")


def _quantile(xs, p):
    return sorted(xs)[int(p * len(xs))]


# sha256 of `shockwave trace generate` outputs made before realistic mode existed (the study's traces use these)
OLD_OUTPUTS = [
    ("--jobs 300 --seed 1", "3c80f4d524a43af0d8eeb86c7a85d76bbf82542da4002faaf02544410ef7271b"),
    (
        "--jobs 300 --gpus 64 --seed 401 --interarrival 30 --burst 50,14400",
        "c4926e17f6eec8fceecf4340029a5babc94ade45619783e6a8f4f9d8a889fe3a",
    ),
    (
        "--jobs 200 --gpus 16 --seed 403 --interarrival 60 --burst 25,7200 --mode-mix 0.2,0.3,0.5 "
        "--gpu-mix 0.5,0.3,0.15,0.05",
        "6caeaab8a81e4de09e217c5073a1de6f4fd6b6bdf149ef311fbd22ecab51c1b3",
    ),
]


@pytest.mark.parametrize("args,digest", OLD_OUTPUTS, ids=["plain", "burst", "mixes"])
def test_old_options_give_the_same_bytes(args, digest):
    res = CliRunner().invoke(cli, ["trace", "generate", *args.split()])
    assert res.exit_code == 0, res.output
    assert hashlib.sha256(res.stdout.encode()).hexdigest() == digest


def test_old_options_are_not_realistic_and_keep_their_name():
    opts = GeneratorOptions(jobs=120, seed=25)
    assert not opts.realistic
    assert trace_name(opts) == "120_0.2_5_100_40_25_0,0.5,0.5_0.6,0.3,0.09,0.01_multigpu_dynamic.trace"
    assert all(j.sweep == -1 for j in generate(opts, TACC))


def test_deterministic_for_a_seed():
    a = trace_text(generate(realistic_options(400, seed=7, max_gpus=48), TACC))
    b = trace_text(generate(realistic_options(400, seed=7, max_gpus=48), TACC))
    c = trace_text(generate(realistic_options(400, seed=8, max_gpus=48), TACC))
    assert a == b and a != c


@pytest.mark.parametrize("family", ["lognormal", "pareto"])
def test_lengths_follow_their_median_and_p90(family):
    opts = GeneratorOptions(
        jobs=4000, seed=5, lengths=family, length_median=1800, length_p90=7200, length_min=60, length_max=86400
    )
    jobs = generate(opts, TACC)
    d = [j.duration for j in jobs]
    assert abs(_quantile(d, 0.5) / 1800 - 1) < 0.08
    assert abs(_quantile(d, 0.9) / 7200 - 1) < 0.10
    assert min(d) >= 60 and max(d) <= 86400
    model = LengthModel(family, 1800, 7200, 60, 86400)
    # the tail beyond p90 is the family's: its p99 (pareto's, clipped at 86400 s, is far heavier than log-normal's)
    assert abs(_quantile(d, 0.99) / min(model.quantile(0.99), 86400) - 1) < 0.25
    # steps give the drawn length alone on its GPUs at its first batch size (as the reference's generator does)
    for j in jobs[:200]:
        assert j.total_steps == max(1, int(j.duration * TACC.get(j.model, j.batch_size, j.gpus)))


def test_preset_lengths_are_heavy_tailed_and_clipped():
    d = [j.duration for j in generate(realistic_options(4000, seed=2, max_gpus=64), TACC)]
    assert abs(_quantile(d, 0.5) / 874 - 1) < 0.15
    assert abs(_quantile(d, 0.9) / 20000 - 1) < 0.25
    assert min(d) == 60 and max(d) <= 7 * 86400
    share_short = sum(x == 60 for x in d) / len(d)  # Phi(ln(60 / 874) / sigma) below the clip
    sigma = math.log(20000 / 874) / 1.2816
    assert abs(share_short - statistics.NormalDist().cdf(math.log(60 / 874) / sigma)) < 0.03
    assert statistics.mean(d) > 5 * statistics.median(d)  # heavy tail: the mean far above the median


def test_diurnal_peak_to_trough_ratio():
    def ratio(arrivals):
        jobs = generate(
            GeneratorOptions(jobs=5000, seed=4, arrivals=arrivals, interarrival=300, lengths="lognormal"), TACC
        )
        hours = [clock_hour(j.arrival, 9.0) for j in jobs]
        near = [sum(abs((h - c + 12) % 24 - 12) < 2 for h in hours) for c in (15.0, 3.0)]
        return near[0] / near[1], jobs[-1].arrival

    got, span = ratio("diurnal")
    a = diurnal_amplitude(3.0)
    cos_int = 24 / math.pi * math.sin(math.pi / 6)  # integral of cos over +-2 h around the peak
    assert span > 10 * 86400
    assert abs(got - (4 + a * cos_int) / (4 - a * cos_int)) < 0.35  # 2.83
    flat, _ = ratio("poisson")
    assert abs(flat - 1) < 0.2
    # the mean rate over whole days is still 1 / interarrival
    assert abs(span / 5000 / 300 - 1) < 0.05


def test_sweeps_share_and_shape():
    opts = GeneratorOptions(
        jobs=3000, seed=9, interarrival=120, sweeps=40, sweep_size=25, sweep_span=1200, lengths="lognormal"
    )
    jobs = generate(opts, TACC)
    assert len(jobs) == 3000 and [j.arrival for j in jobs] == sorted(j.arrival for j in jobs)
    members = [j for j in jobs if j.sweep >= 0]
    assert len(members) / len(jobs) == pytest.approx(40 * 25 / 3000)
    by = {}
    for j in members:
        by.setdefault(j.sweep, []).append(j)
    assert len(by) == 40 and all(len(v) == 25 for v in by.values())
    for v in by.values():
        assert len({(j.model, j.batch_size, j.gpus) for j in v}) == 1
        assert max(j.arrival for j in v) - min(j.arrival for j in v) <= 1200
        assert len({j.duration for j in v}) > 1  # trials of a sweep run for different times

    # seen from the trace alone: 20-minute windows hold 25 arrivals, which Poisson at 120 s (10 expected) never does
    def busiest(js):
        t = [j.arrival for j in js]
        return max(sum(1 for x in t[i : i + 60] if x - t[i] <= 1200) for i in range(len(t)))

    assert busiest(jobs) >= 25 and busiest(generate(replace(opts, sweeps=0), TACC)) < 25


@pytest.mark.parametrize("assign", ["round-robin", "random"])
def test_a_sweep_is_one_users_submission(assign):
    from shockwave_lab.workload.users import with_users

    opts = GeneratorOptions(jobs=400, seed=4, interarrival=120, sweeps=6, sweep_size=20, sweep_span=600)
    jobs = generate(opts, TACC)
    entries = with_users(jobs, users=5, seed=4, assign=assign)
    assert [e["id"] for e in entries] == list(range(len(jobs)))  # no splitter: one entry per job, in order
    owners: dict[int, set] = {}
    for job, e in zip(jobs, entries):
        if job.sweep >= 0:
            owners.setdefault(job.sweep, set()).add(e["user"])
    assert len(owners) == 6 and all(len(u) == 1 for u in owners.values())
    assert len({u for us in owners.values() for u in us} | {e["user"] for e in entries}) > 1  # other jobs vary


def test_offered_load_and_gpu_mix_of_the_preset():
    loads, ones = [], []
    for seed in range(4):
        jobs = generate(realistic_options(300, seed=seed, max_gpus=48), TACC)
        span = jobs[-1].arrival - jobs[0].arrival
        loads.append(sum(j.duration * j.gpus for j in jobs) / (48 * span))
        ones.append(sum(j.gpus == 1 for j in jobs) / len(jobs))
        assert max(j.gpus for j in jobs) <= 8
    assert all(abs(x - 0.8) < 0.15 for x in loads), loads
    big = Counter(j.gpus for j in generate(realistic_options(6000, seed=3, max_gpus=48), TACC))
    assert abs(big[1] / 6000 - 0.70) < 0.04 and all(0.05 < big[g] / 6000 < 0.16 for g in (2, 4, 8)), big


def test_cli_realistic_trace_runs_in_simulate(tmp_path):
    runner = CliRunner()
    res = runner.invoke(
        cli,
        ["trace", "generate", "--jobs", "300", "--gpus", "48", "--seed", "3", "--realistic", "--out", str(tmp_path)],
    )
    assert res.exit_code == 0, res.output
    (path,) = tmp_path.glob("*.trace")
    assert "_diurnal3h15s9_sweeps3x25w1200_lognormal874p90-20000r60-604800_load0.8" in path.name
    assert path.read_text() == trace_text(generate(realistic_options(300, seed=3, max_gpus=48), TACC))
    specs = read_trace(path, num_gpus=48, throughputs=TACC)
    assert len(specs) == 300
    res = runner.invoke(
        cli,
        [
            "simulate",
            "--trace",
            str(path),
            "--gpus",
            "48",
            "--round-length",
            "1800",
            "--no-progress",
            "-o",
            str(tmp_path / "r.json"),
            "--json",
        ],
    )
    assert res.exit_code == 0, res.output
    (out,) = json.loads((tmp_path / "r.json").read_text())["results"].values()
    assert out["jobs"] == 300 and len(out["jobs_detail"]) == 300
    assert out["makespan"] >= max(s.arrival_time for s in specs)


def test_cli_options_override_the_preset(tmp_path):
    args = [
        "trace",
        "generate",
        "--jobs",
        "200",
        "--gpus",
        "32",
        "--seed",
        "1",
        "--realistic",
        "--bursts",
        "2,30,600",
        "--lengths",
        "pareto",
        "--length-median",
        "600",
        "--length-p90",
        "9000",
        "--length-range",
        "30,86400",
        "--diurnal-peak",
        "5",
        "--start-hour",
        "0",
        "--load",
        "1.2",
        "--gpu-mix",
        "0.7,0.1,0.1,0.1",
    ]
    res = CliRunner().invoke(cli, [*args, "--out", str(tmp_path)])
    assert res.exit_code == 0, res.output
    (path,) = tmp_path.glob("*.trace")
    expect = realistic_options(
        200,
        seed=1,
        max_gpus=32,
        sweeps=2,
        sweep_size=30,
        sweep_span=600.0,
        lengths="pareto",
        length_median=600.0,
        length_p90=9000.0,
        length_min=30.0,
        length_max=86400.0,
        diurnal_peak=5.0,
        start_hour=0.0,
        load=1.2,
        gpu_mix=(0.7, 0.1, 0.1, 0.1),
    )
    assert path.name == trace_name(expect)
    assert path.read_text() == trace_text(generate(expect, TACC))


@pytest.mark.parametrize(
    "args,needle",
    [
        (["--realistic"], "--realistic needs --gpus"),
        (["--arrivals", "weekly"], "--arrivals"),
        (["--diurnal-peak", "2"], "needs --arrivals diurnal"),
        (["--arrivals", "diurnal", "--diurnal-peak", "0.5"], "--diurnal-peak"),
        (["--arrivals", "diurnal", "--peak-hour", "24"], "--peak-hour"),
        (["--bursts", "3,25"], "--bursts"),
        (["--bursts", "3,1,60"], "SIZE >= 2"),
        (["--bursts", "20,25,60"], "more than --jobs"),
        (["--bursts", "2,25,nan"], "--bursts"),
        (["--lengths", "weibull"], "--lengths"),
        (["--lengths", "pareto", "--length-median", "100", "--length-p90", "50"], "median < p90"),
        (["--length-median", "5"], "need --lengths"),
        (["--lengths", "lognormal", "--length-range", "100,10"], "--length-range"),
        (["--load", "1"], "--load needs --gpus"),
        (["--gpus", "8", "--load", "1", "--interarrival", "3"], "not both"),
        (["--gpus", "8", "--realistic", "--burst", "5,100"], "--burst"),
    ],
)
def test_cli_bad_input_is_one_line(args, needle, tmp_path):
    res = CliRunner().invoke(cli, ["trace", "generate", "--jobs", "300", *args, "--out", str(tmp_path / "x.trace")])
    assert res.exit_code == 2, res.output
    assert needle in res.output and len(res.output.strip().splitlines()) == 1
    assert not (tmp_path / "x.trace").exists()

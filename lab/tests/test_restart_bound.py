"""No job is thrashed (issue 36): simulated as the controller runs it, the gate preempts a job at most once per 10
rounds of its run (3 per hour at 120 s rounds: solver/preemption.py) unless the GPUs go to the job the starvation
guard reserves them for or to a start past its latest fair start; on bursty workloads the default's worst restarts per hour of a job's run are a fraction of
what they are without the bound or under the reference's semantics (5-8 per hour)."""
from __future__ import annotations

import pytest

from shockwave_lab.data_files import THROUGHPUTS
from shockwave_lab.simulate import run_simulation
from shockwave_lab.workload.generate import GeneratorOptions, generate, trace_text
from shockwave_lab.workload.throughputs import ThroughputTable

THR = THROUGHPUTS / "tacc_throughputs.json"


def bursty(tmp_path, seed: int):
    """40 jobs of 12-120 min in two bursts of 20, three hours apart, on 8 GPUs."""
    opts = GeneratorOptions(jobs=40, seed=seed, interarrival=30, max_gpus=8, burst_size=20, burst_gap=3 * 3600,
                            min_hours=0.2, max_hours=2)
    path = tmp_path / f"bursty{seed}.trace"
    path.write_text(trace_text(generate(opts, ThroughputTable.load(THR))))
    return path


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_gate_preempts_a_job_at_most_once_per_ten_rounds_of_its_run(tmp_path, seed, monkeypatch):
    from slurm_shockwave.controller import loop
    real, judged = loop.preemption.gate, []

    def gate(view, decision, *args):
        out, verdicts = real(view, decision, *args)
        judged.extend((view.round_length, {j.job_id: j for j in view.jobs}[i], v) for i, v in verdicts.items())
        return out, verdicts

    monkeypatch.setattr(loop.preemption, "gate", gate)
    trace = bursty(tmp_path, seed)
    bounded = run_simulation(trace, THR, 8, "shockwave-edf", semantics="controller").metrics
    monkeypatch.undo()
    preempted = [(r, j, v) for r, j, v in judged if v.pays]
    assert preempted and any(not v.pays and "rounds of run" in v.why for _, _, v in judged)
    for r, j, v in preempted:
        assert (j.restarts + 1) * 10 * r <= j.run_time or v.why.endswith(
            ("waited the starvation bound longest", "a job past its latest fair start"))
    unbounded = run_simulation(trace, THR, 8, "shockwave-edf", early_rounds=(5.0, 5.0), preemption_cost_s=30.0,
                               mode="authoritative", rounds_per_restart=0).metrics
    reference = run_simulation(trace, THR, 8, "shockwave-edf", semantics="reference").metrics
    assert unbounded.restarts_per_hour_worst > 3.0 and reference.restarts_per_hour_worst > 3.0
    assert bounded.restarts_per_hour_worst < 0.6 * min(unbounded.restarts_per_hour_worst,
                                                       reference.restarts_per_hour_worst)
    assert bounded.restarts_mean < min(unbounded.restarts_mean, reference.restarts_mean)

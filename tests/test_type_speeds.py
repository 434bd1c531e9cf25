"""A job's own speed on each GPU type on Slurm (slurm/type_speeds.py): the site's speeds, over them the job's
``speed=`` hint, over both what it measured on each type it ran on; a report of the run before a move is never taken
for the type it moved to, and a waiting job's events are read on the type they were measured on, not the fastest."""
from __future__ import annotations

import math
from dataclasses import replace

import pytest

from slurm_shockwave.events.progress import JobProgress
from slurm_shockwave.slurm.hints import HintError, parse_hints
from slurm_shockwave.slurm.type_speeds import TypeRates, by_type, describe, relative, sourced
from tests.slurm_backend_fakes import fake_backend, me, report, slurm_job, slurm_node

SITE = {"v100": 1.0, "k80": 0.25}


def test_the_relative_speeds_site_then_hint_then_measured():
    types = ["v100", "k80", "p100"]
    assert relative(types, {**SITE, "p100": 0.5}) == {"v100": 1.0, "k80": 0.25, "p100": 0.5}
    assert relative(types, SITE) is None                               # a type without a speed: none at all
    # the hint's types at its factors; the others at the site's, scaled by the hint's ratio to the site (x2 here)
    rel = relative(types, {**SITE, "p100": 0.5}, (("v100", 2.0), ("k80", 0.5), ("a100", 9.0)))
    assert rel == {"v100": 2.0, "k80": 0.5, "p100": 1.0}               # a100: not a type of this cluster
    assert relative(["v100", "k80"], {}, (("v100", 1.0), ("k80", 0.7))) == {"v100": 1.0, "k80": 0.7}
    # measured at the same batch size and count on two types: their ratio wins over the hint and the site
    measured = {"k80": {(32, 2): 1.0, (64, 2): 0.6}, "v100": {(32, 2): 1.6}}
    rel = relative(["v100", "k80"], SITE, (("v100", 1.0), ("k80", 0.3)), measured, ref="k80")
    assert rel == pytest.approx({"v100": 0.48, "k80": 0.3})             # 1.6 x the k80's 0.3
    # measured at no common point: nothing learned
    assert relative(["v100", "k80"], SITE, None, {"k80": {(32, 2): 1.0}, "v100": {(64, 2): 5.0}}, "k80") == SITE


def test_where_each_speed_comes_from_is_named():
    rel, why = sourced(["v100", "k80", "p100"], {**SITE, "p100": 0.5}, (("v100", 2.0), ("k80", 0.5)))
    assert why == {"v100": "hint", "k80": "hint", "p100": "site, scaled to the hint"}
    assert describe(rel, why) == "v100 1 (hint), p100 0.5 (site, scaled to the hint), k80 0.25 (hint)"
    measured = {"k80": {(32, 2): 1.0}, "v100": {(32, 2): 1.6}, "p100": {(64, 2): 1.0}}
    rel, why = sourced(["v100", "k80", "p100"], {**SITE, "p100": 0.5}, None, measured, "k80")
    assert why == {"v100": "measured", "k80": "measured", "p100": "site"}      # p100: at no common point
    assert describe(rel, why) == "p100 1 (site), v100 0.8 (measured), k80 0.5 (measured)"
    assert sourced(["v100", "k80"], {"v100": 1.0}) == (None, {})


def test_the_throughput_per_type_from_the_measured_rate_else_the_view_read_on_its_type():
    rel = {"v100": 1.0, "k80": 0.25}
    assert by_type(2.0, rel, "v100", (32, 1)) == {"v100": 2.0, "k80": 0.5}             # the view's, on v100
    assert by_type(2.0, rel, "v100", (32, 1), src="k80") == {"v100": 8.0, "k80": 2.0}  # it was measured on a k80
    measured = {"k80": {(32, 1): 1.5}}
    assert by_type(9.0, rel, "v100", (32, 1), measured) == {"v100": 6.0, "k80": 1.5}
    assert by_type(9.0, rel, "v100", (64, 1), measured) == {"v100": 9.0, "k80": 2.25}  # no rate at this batch


def test_the_speed_hint_is_validated_like_every_hint():
    assert parse_hints("shockwave speed=v100x1/k80x0.3/rtx6000x0.55", "shockwave").speed == (
        ("k80", 0.3), ("rtx6000", 0.55), ("v100", 1.0))
    for bad in ("v100x1/v100x2", "v100", "x1", "v100x0", "v100xnan", "v100x1e9", "a*bx1", "v100x1/",
                "/".join(f"t{i}x1" for i in range(17)), "k80x²"):
        with pytest.raises(HintError, match="speed"):
            parse_hints(f"shockwave speed={bad}", "shockwave")
    with pytest.raises(HintError, match="twice"):
        parse_hints("shockwave speed=v100x1 speed=k80x1", "shockwave")


def test_only_a_report_of_the_running_run_is_taken_and_the_state_keeps_them(tmp_path):
    from slurm_shockwave.journal.store import StateStore

    state = StateStore(tmp_path / "state.db")
    rates = TypeRates(state)
    job = slurm_job(5, state="RUNNING", restart_count=1)
    before_move = JobProgress(last_throughput=64.0, last_throughput_bs=32, last_throughput_gpus=2, last_throughput_run=0)
    rates.update(job, "v100", before_move)
    assert rates.of(5) == {}                                    # its run on the k80, not this one on a v100
    for thr in (math.nan, math.inf, -1.0, 0.0):
        rates.update(job, "v100", replace(before_move, last_throughput=thr, last_throughput_run=1))
    assert rates.of(5) == {}
    rates.update(job, "v100", replace(before_move, last_throughput_run=1))
    rates.update(replace(job, job_id=6), "k80", replace(before_move, last_throughput_run=1))
    rates.keep([5])
    again = TypeRates(StateStore(tmp_path / "state.db"))
    assert again.of(5) == {"v100": {(32, 2): 2.0}} and again.last == {"5": "v100"} and again.of(6) == {}
    # what another program (or a bad disk) left in the state is read as nothing, never a crash or a NaN
    state.put(TypeRates.KEY, {"rates": {"5": {"k80": {"32/2": "nan", "x/y": 3, "64/1": -2}, "v": 7}}, "last": 3})
    assert TypeRates(state).of(5) == {} and TypeRates(state).last == {}
    state.put(TypeRates.KEY, [1, 2])
    assert TypeRates(state).by_job == {}


def test_the_elastic_rates_kept_in_the_state_are_read_tolerantly_and_forgotten_with_the_job(tmp_path):
    from slurm_shockwave.journal.store import StateStore
    from slurm_shockwave.slurm.resize import Measured

    state = StateStore(tmp_path / "state.db")
    m = Measured(state)
    m.update(5, JobProgress(last_throughput=64.0, last_throughput_bs=32, last_throughput_gpus=2))
    m.update(6, JobProgress(last_throughput=30.0, last_throughput_bs=30, last_throughput_gpus=1))
    m.keep([5, 6])
    m.keep([5])                                             # 6 left: forgotten
    assert Measured(StateStore(tmp_path / "state.db")).by_job == {"5": {"2": [32, 2.0]}}
    state.put(Measured.KEY, {"5": {"2": [32, "nan"], "4": [0, 1.0], "1": "x", "8": [64, 3.0]}, "6": [1], "7": None})
    again = Measured(state)
    assert again.by_job == {"5": {"8": [64, 3.0]}} and again.at(5, 64) == {8: 3.0} and again.at(5, 32) == {}
    state.put(Measured.KEY, "junk")
    assert Measured(state).by_job == {}


def _epoch(b, job_id, restart, epoch, duration):
    from slurm_shockwave.events.writer import EventWriter

    EventWriter.for_job(b.cfg.event_store, str(job_id), restart).emit(
        "epoch_end", epoch=epoch, batch_size=32, duration_s=duration, samples=3200, gpus=2, total_epochs=40)


def test_on_slurm_a_job_learns_its_speed_on_each_type_it_runs_on(tmp_path):
    nodes = [slurm_node("node1", {"v100": 2}, ["v100"]), slurm_node("node2", {"k80": 2}, ["k80"])]
    base = dict(gpus=2, gpus_per_node=2, user_id=me(), comment="shockwave bs=32 samples=3200 epochs=40")
    on_k80 = slurm_job(7, state="RUNNING", nodes="node2", start_time=1, gres_detail=("gpu:k80:2(IDX:0-1)",), **base)

    def views(job, root="r", hint=""):
        b = fake_backend(tmp_path / root, [replace(job, comment=job.comment + hint)], nodes, clock=lambda: 4000.0)
        b.cfg = b.cfg.model_copy(update={"gpu_type_speeds": SITE})
        return b, {j.job_id: j for j in b.observe().jobs}[7]

    b, v = views(on_k80)
    report(b, 7, "start", batch_size=32, gpus=2)
    _epoch(b, 7, 0, 0, 100.0)                           # 100 steps in 100 s on a k80: 1 step/s
    assert b.round_context().jobs["7"].gpu_speeds == "v100 1 (site), k80 0.25 (site)"   # what `explain` shows
    b, v = views(on_k80)
    assert v.throughput_by_type == pytest.approx({"v100": 4.0, "k80": 1.0}) and v.throughput == pytest.approx(1.0)
    # requeued, waiting: read on the k80 it was measured on (not as 1 step/s on the fastest type)
    b, v = views(replace(on_k80, state="PENDING", restart_count=1, nodes="", gres_detail=(), start_time=None))
    assert v.throughput_by_type == pytest.approx({"v100": 4.0, "k80": 1.0}) and v.throughput == pytest.approx(4.0)
    assert v.epoch_duration_by_bs == pytest.approx({32: 25.0})           # its epoch time on the v100 it waits for
    # its hint says a k80 runs it at 0.8 of a v100: believed until it has run on both
    _b, v = views(replace(on_k80, state="PENDING", restart_count=1, nodes="", gres_detail=()), hint=" speed=v100x1/k80x0.8")
    assert v.throughput_by_type == pytest.approx({"v100": 1.25, "k80": 1.0})
    assert _b.round_context().jobs["7"].gpu_speeds == "v100 1 (hint), k80 0.8 (hint)"
    # moved to a v100: until its new run reports, its k80 report is not taken for the v100
    on_v100 = replace(on_k80, restart_count=1, nodes="node1", gres_detail=("gpu:v100:2(IDX:0-1)",))
    b, v = views(on_v100)
    assert v.throughput_by_type == pytest.approx({"v100": 4.0, "k80": 1.0})
    _epoch(b, 7, 1, 1, 30.0)                            # its resumed epoch: partial, not timed
    b, v = views(on_v100)
    assert v.throughput_by_type == pytest.approx({"v100": 4.0, "k80": 1.0})
    _epoch(b, 7, 1, 2, 50.0)                            # 2 steps/s on the v100: this job gains 2x, not 4x
    b, v = views(on_v100)
    assert v.throughput_by_type == pytest.approx({"v100": 2.0, "k80": 1.0}) and v.throughput == pytest.approx(2.0)
    assert b.types.rates.last == {"7": "v100"}
    assert b.round_context().jobs["7"].gpu_speeds == "v100 1 (measured), k80 0.5 (measured)"
    # `explain` says it, from the round's record
    from click.testing import CliRunner

    from slurm_shockwave.cli.status import explain
    from slurm_shockwave.journal.record import RoundRecord
    from solver.types import RoundDecision

    view = b.observe()
    b.state.begin_round(view.round_index, view.now)
    b.state.record_round(RoundRecord(view, RoundDecision(run=(7,), placement={7: {"v100": 2}}),
                                     context=b.round_context()), 1)
    b.state.finish_round(view.round_index)
    out = CliRunner().invoke(explain, ["7", "--state-dir", b.cfg.state_dir])
    assert out.exit_code == 0 and "speed per GPU type (fastest = 1): v100 1 (measured), k80 0.5 (measured)" in (
        out.output), out.output

"""Several GPU types on a real Slurm cluster, on every version: the backend reads capacity and pins by type, and a
pending job the round placed on a type runs there (24.11 / 26.05: its GRES request; 22.05: its constraint).

Two nodes: node1 with 2 v100, node2 with 2 k80 (each type also a node Feature).  Job A asks for ``gpu:k80:2``
(pinned), B and C for ``gpu:2`` (any type).  The partition is down while they are submitted, so nothing starts
before the controller's first round, which defers (holds) all three.  The second round runs B on k80 and C on v100:
the opposite of what Slurm does by itself (it gives the first job node1, checked below with an unmanaged job), so
B on node2 shows the steering.  The third round (B cancelled) runs A, whose request is never changed; the fourth
moves C, requeued, from v100 to k80 (the type the controller wrote is not taken for its user's pin).  A second test
moves a running job from k80 to v100 as the controller does when that pays (solver/type_moves.py): held, signalled,
requeued held, then steered to v100, pinned to node1 and released.

The backend and enactment are driven directly (observe, a decision checked and placed by the round loop's own
check, apply), so each round's placement is known; every wait is a poll with a timeout, no duration is asserted.
"""
from __future__ import annotations

import contextlib
import io
from pathlib import Path

import pytest

from slurm_shockwave.backends.base import check_decision
from slurm_shockwave.cli.status import _print_status
from slurm_shockwave.cli.statusview import status_rows
from slurm_shockwave.controller.config import load_config
from slurm_shockwave.journal.record import RoundRecord
from slurm_shockwave.journal.store import StateStore
from slurm_shockwave.slurm.backend import SlurmBackend
from solver.types import RoundDecision
from tests.slurm_fixtures import cluster_up, make_root, version_test_versions, wait_for

pytestmark = pytest.mark.slurm


@pytest.fixture(scope="module", params=version_test_versions(), ids=lambda v: f"slurm{v}")
def cluster(request):
    yield from cluster_up("shockwave-typed-", version=request.param, gpus_per_node=2, cpus_per_node=4,
                          gpu_types=["v100", "k80"])


def _submit(c, gres: str, managed: bool = True) -> int:
    argv = ["sbatch", "--parsable", "--chdir=/", "--output=/dev/null", f"--gres={gres}", "--wrap", "sleep 300"]
    out = c.run(argv[:2] + (["--comment=shockwave epochs=5"] if managed else []) + argv[2:])
    assert out.returncode == 0, out.stderr
    return int(out.stdout.strip().split(";")[0])


def _job(c, job_id: int):
    return next(j for j in c.cli.squeue_jobs(job_ids=[job_id]))


def _running(c, job_id: int, what: str):
    return wait_for(lambda: (lambda j: j if j.state == "RUNNING" else None)(_job(c, job_id)), 40, what=what)


def _backend(c, root: Path, extra: str = "") -> SlurmBackend:
    (root / "events").mkdir(exist_ok=True)
    conf = root / "controller.toml"
    conf.write_text("[controller]\n" + extra +
                    f'round_seconds = 2\npartition = "{c.partition}"\n'
                    f'state_dir = "{root}/state"\nevent_store = "{root}/events"\n'
                    + (f'[slurm]\nbin_dir = "{c.bin_dir}"\n' if c.bin_dir else "")
                    + f'[slurm.env]\nSLURM_CONF = "{c.env["SLURM_CONF"]}"\n')
    cfg = load_config(conf)
    return SlurmBackend.from_config(cfg, StateStore(cfg.state_path), None)


def _round(b: SlurmBackend, run: tuple, placement: dict):
    view = b.observe()
    decision = check_decision(view, RoundDecision(run=run, placement=placement))   # the loop's own check
    b.apply(decision)
    return view, decision


def test_pending_jobs_are_steered_to_their_placed_type_and_a_pinned_one_is_never_touched(cluster):
    c, root = cluster, make_root("shockwave-typed-ctl-")
    v22 = c.slurm_version == "22.05"

    # what Slurm does by itself: the first untyped job goes to node1 (v100)
    probe = _submit(c, "gpu:2", managed=False)
    assert _running(c, probe, "the probe job running").nodes == "node1"
    c.cli.cancel([probe])
    wait_for(lambda: _job(c, probe).finished, 30, what="the probe job gone")

    assert c.run(["scontrol", "update", f"PartitionName={c.partition}", "State=DOWN"]).returncode == 0
    a, b_, cc = _submit(c, "gpu:k80:2"), _submit(c, "gpu:2"), _submit(c, "gpu:2")
    a_request = _job(c, a).gpu_request
    backend = _backend(c, root)

    view, _d = _round(backend, (), {})              # round 1: all deferred (held by the controller)
    assert dict(view.capacity) == {"v100": 2, "k80": 2} and view.num_gpus == 4
    types = {j.job_id: j.gpu_type for j in view.jobs}
    assert types == {a: "k80", b_: None, cc: None}
    wait_for(lambda: all(_job(c, j).held for j in (a, b_, cc)), 20, what="the three jobs held")
    assert c.run(["scontrol", "update", f"PartitionName={c.partition}", "State=UP"]).returncode == 0

    _round(backend, (b_, cc), {b_: {"k80": 2}, cc: {"v100": 2}})      # round 2: B on k80, C on v100
    jb, jc = _running(c, b_, "B running"), _running(c, cc, "C running")
    assert (jb.nodes, jc.nodes) == ("node2", "node1")
    assert any("k80" in d for d in jb.gres_detail) and any("v100" in d for d in jc.gres_detail)
    verb = "place_features" if v22 else "place_tres"
    placed = {int(r["job_id"]): r["value"] for r in backend.state.actions(verb=verb, status="done")}
    assert set(placed) == {b_, cc} and "k80" in placed[b_] and "v100" in placed[cc]
    if v22:     # 22.05: through the constraint; the GRES request is left as the user wrote it
        assert (jb.features, jc.features) == ("k80", "v100") and jb.gpu_type is None and jc.gpu_type is None
    else:
        assert (jb.gpu_type, jc.gpu_type) == ("k80", "v100") and jb.features == ""
    ja = _job(c, a)
    assert ja.held and ja.gpu_request == a_request and ja.features == ""

    c_places = len(backend.state.actions(job_id=cc, verb=verb))
    backend.cli.cancel([b_])
    wait_for(lambda: _job(c, b_).finished, 30, what="B gone")
    view, decision = _round(backend, (a, cc), {a: {"k80": 2}, cc: {"v100": 2}})   # round 3: A on its own type
    by_id = {j.job_id: j for j in view.jobs}
    assert by_id[a].gpu_type == "k80" and by_id[cc].gpu_type == "v100"      # C: the type it runs on
    jobs = backend.round_context().jobs
    assert jobs[str(cc)].gpu_type_by == "slurm" and jobs[str(a)].gpu_type_by == "user"
    ja = _running(c, a, "A running")
    assert ja.nodes == "node2" and ja.gpu_request == a_request and ja.features == ""
    assert not [r for v in ("place_tres", "place_features") for r in backend.state.actions(job_id=a, verb=v)]
    assert len(backend.state.actions(job_id=cc, verb=verb)) == c_places      # a running job is never updated
    # status: the type each job runs on (C, from Slurm) or is placed on this round (A), and the cluster's types
    st = backend.state
    st.begin_round(view.round_index, view.now)
    st.record_round(RoundRecord(view, decision, context=backend.round_context()), 4)
    st.finish_round(view.round_index)
    summary, rows = status_rows(st)
    assert summary["gpu_types"] == {"v100": 2, "k80": 2}
    assert {r["job_id"]: (r["gpu_type"], r["gpu_type_by"]) for r in rows} == {
        str(a): ("k80", "placement"), str(cc): ("v100", "slurm")}
    out = io.StringIO()
    with contextlib.redirect_stdout(out):               # the table shows them in its type column
        _print_status(summary, rows)
    table = out.getvalue()
    assert "type" in table and "k80 (placement)" in table and "v100 (slurm)" in table, table

    # round 4: C requeued (pending again, its request or constraint still the v100 the controller wrote): not taken
    # for its user's pin, so the round may move it to k80
    c.cli.cancel([a])
    wait_for(lambda: _job(c, a).finished, 30, what="A gone")
    c.cli.requeue([cc])
    wait_for(lambda: _job(c, cc).state == "PENDING", 30, what="C requeued")
    view, _d = _round(backend, (cc,), {cc: {"k80": 2}})
    assert {j.job_id: j.gpu_type for j in view.jobs} == {cc: None}
    jc = _running(c, cc, "C running again")
    assert jc.nodes == "node2" and any("k80" in d for d in jc.gres_detail)
    assert (jc.features, jc.gpu_type) == (("k80", None) if v22 else ("", "k80"))
    st.close()
    c.cli.cancel([cc])


def test_a_running_job_moved_to_a_faster_type_is_requeued_and_restarts_there(cluster):
    c, root = cluster, make_root("shockwave-typed-move-")
    from solver.nodes import assign_nodes
    from solver.type_moves import unpinned
    b = _backend(c, root, 'mode = "authoritative"\ngrace_seconds = 1\nmin_run_seconds = 0\n'
                          "gpu_type_speeds = {v100 = 1.0, k80 = 0.25}\n")
    assert c.run(["scontrol", "update", f"PartitionName={c.partition}", "State=DOWN"]).returncode == 0
    out = c.run(["sbatch", "--parsable", "--chdir=/", "--output=/dev/null", "--gres=gpu:2",
                 "--comment=shockwave epochs=5", "--wrap", "trap '' USR1; sleep 300"])
    assert out.returncode == 0, out.stderr
    x = int(out.stdout.strip().split(";")[0])
    try:
        _round(b, (), {})                                          # deferred: held before it starts
        assert c.run(["scontrol", "update", f"PartitionName={c.partition}", "State=UP"]).returncode == 0
        _round(b, (x,), {x: {"k80": 2}})                           # started on k80 (steered)
        assert _running(c, x, "X running on k80").nodes == "node2"
        view = b.observe()
        seen = view.job(x)
        assert (seen.running_type, seen.gpu_type) == ("k80", "k80")
        assert seen.throughput_by_type == {"v100": 4 * seen.throughput, "k80": seen.throughput}

        def move_round():                                          # the loop's check and nodes, on the moved view
            v = unpinned(b.observe(), {x})
            d = assign_nodes(v, check_decision(v, RoundDecision(run=(x,), placement={x: {"v100": 2}})))
            assert d.nodes == {x: ("node1",)}
            b.apply(d)
            return _job(c, x)

        j = move_round()
        assert j.held and "moving to node1" in j.admin_comment
        runs = j.restart_count
        wait_for(lambda: move_round().restart_count > runs, 30, what="X requeued")
        wait_for(lambda: _job(c, x).state == "PENDING", 20, what="X pending after its requeue")
        seen = b.observe().job(x)                                  # seen where the move takes it (slurm/moving.py)
        assert (seen.ran_last_round, seen.nodes, seen.running_type, seen.gpu_type) == (True, ("node1",), "v100", "v100")
        move_round()                                               # steered to v100, pinned to node1, released
        j = _running(c, x, "X running on v100")
        assert j.nodes == "node1" and any("v100" in d for d in j.gres_detail) and j.restart_count == runs + 1
        steps = [r["verb"] for r in reversed(b.state.actions(job_id=x, status="done"))]
        requeued = steps.index("requeue_hold")
        assert steps.index("signal") < requeued < steps.index("place_nodes") < steps.index("release", requeued)
        assert ("place_features" if c.slurm_version == "22.05" else "place_tres") in steps[requeued:]
    finally:
        c.run(["scontrol", "update", f"PartitionName={c.partition}", "State=UP"])
        c.cli.cancel([x])
        b.state.close()

"""Elastic GPU counts on Slurm (issue 34, part 4): the ``gpus=MIN-MAX`` hint, the base count kept in the job's
AdminComment mark, the counts an elastic job's view lists, and resizes enacted on a real cluster.

The real-cluster tests (2 nodes x 4 fake GPUs, the host's Slurm, 22.05 here) drive the backend directly (observe, a
hand-made decision checked by the round loop's own check, apply), as tests/test_typed_slurm.py does: an elastic
pending job is released at a larger count than its request, then shrunk while running (held, signalled, requeued
held after the grace period, updated while pending, released), a rigid job is refused any other count, and the
controller is killed (SIGKILL, in a child process) right after the base mark, right after ``requeuehold`` and right
after the update of the request: a fresh backend on the same state finishes each resize and leaves nothing held.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from slurm_shockwave.backends.base import check_decision
from slurm_shockwave.cli.statusview import status_rows
from slurm_shockwave.controller.config import load_config
from slurm_shockwave.journal.record import RoundRecord
from slurm_shockwave.journal.store import StateStore
from slurm_shockwave.slurm.backend import SlurmBackend
from slurm_shockwave.slurm.enact import Action, Enactor, Observed, reconcile
from slurm_shockwave.slurm.hints import HintError, check_gpus_range, parse_hints
from slurm_shockwave.slurm.jobview import is_submitit
from slurm_shockwave.slurm.ownership import base_of, cleared, marked, parse_mark, status_of, unmarked, with_base
from slurm_shockwave.slurm.resize import Elastic, counts, throughputs
from solver.placement import PlacementError
from solver.types import GPU, RoundDecision
from tests.slurm_backend_fakes import FakeSlurm
from tests.slurm_fixtures import cluster_up, die_after, killed, make_root, version_test_versions, wait_for


# ---------------------------------------------------------------------- without Slurm
@pytest.mark.parametrize("comment, rng, gpus", [
    ("shockwave gpus=1-8 bs=64", (1, 8), None),
    ("shockwave gpus=2", None, 2),                       # a plain count works as before
    ("shockwave gpus=3-3", (3, 3), None),
])
def test_good_gpu_hints(comment, rng, gpus):
    h = parse_hints(comment, "shockwave", 8)
    assert (h.gpus_range, h.gpus) == (rng, gpus)


@pytest.mark.parametrize("comment, words", [
    ("shockwave gpus=0-4", "1 <= MIN <= MAX"),
    ("shockwave gpus=4-2", "1 <= MIN <= MAX"),
    ("shockwave gpus=1-16", "the partition has 8 GPU(s)"),
    ("shockwave gpus=1-\u0668", "ASCII digits"),              # an Arabic-Indic eight
    ("shockwave gpus=1-4 gpus=2", "given twice"),
    ("shockwave gpus=2 gpus=1-4", "given twice"),
    ("shockwave gpus=1-", "ASCII digits"),
])
def test_bad_gpu_ranges_raise_one_line(comment, words):
    with pytest.raises(HintError) as e:
        parse_hints(comment, "shockwave", 8)
    assert words in str(e.value) and "\n" not in str(e.value)


def test_the_job_own_count_must_lie_in_its_range():
    check_gpus_range((1, 4), 4)
    check_gpus_range(None, 64)
    with pytest.raises(HintError, match=r"gpus=2-4: the job asks for 1 GPU\(s\), outside its range"):
        check_gpus_range((2, 4), 1)
    # submitit writes its task count into its own script: such a job with a range is quarantined, without one managed
    with pytest.raises(HintError, match="submitit job cannot change its GPU count"):
        check_gpus_range((1, 4), 2, submitit=True)
    check_gpus_range(None, 2, submitit=True)
    job = SimpleNamespace(command="/home/u/log/.submission_file_0a1b.sh", std_out="")
    assert is_submitit(job) and not is_submitit(SimpleNamespace(command="/home/u/train.sbatch", std_out=""))


def test_the_base_count_lives_in_the_mark_and_survives_hold_and_release():
    ac = with_base("admin's note", 2)
    assert ac == "admin's note | shockwave:elastic base=2" and status_of(ac) == "elastic" and base_of(ac) == 2
    held = marked(ac, "held", "deferred")
    assert parse_mark(held).reason == "deferred" and base_of(held) == 2 and status_of(held) == "held"
    assert unmarked(held) == ac                                   # released: not ours to release, base kept
    assert cleared(held) == "admin's note"                        # uninstall removes all of ours
    assert base_of(marked("", "held", "base=3 reasons")) is None  # a reason never reads as a base count


def test_counts_divide_the_batch_and_fit_a_node_or_whole_nodes_and_are_scaled_by_the_exponent():
    assert counts((1, 8), 2, 48, 4, 2) == [1, 2, 3, 4, 8]         # 6 does not fit whole nodes, 5, 7 do not divide
    assert counts((1, 8), 2, 48, 4, 1) == [1, 2, 3, 4]            # one node of 4
    assert counts((3, 4), 3, 8, 4, 2) == [3, 4]                   # its base is kept though 8 % 3 != 0
    thr = throughputs([1, 2, 4], {}, 2, 10.0, 0.5)
    assert thr[2] == 10.0 and thr[4] == pytest.approx(10.0 * 2**0.5) and thr[1] == pytest.approx(10.0 / 2**0.5)
    own = throughputs([1, 2, 4], {4: 30.0}, 2, 10.0, 0.5)          # its own report at 4 wins, and anchors the rest
    assert own[4] == 30.0 and own[2] == pytest.approx(30.0 / 2**0.5)


def test_an_elastic_update_names_its_nodes_and_a_running_one_is_preempted_first():
    pend = Observed(1, "PENDING", True, "JobHeldAdmin", 1, 0, 4, wanted_gpus=8, wanted_nodes=2, mark="held")
    run = Observed(2, "RUNNING", False, "", 0, 5, 4, wanted_gpus=2, wanted_nodes=1, running_for=99.0)
    acts = {(a.verb, a.value): a.job_ids for a in reconcile([pend, run], {1, 2}, "authoritative", 5, 0, {}, 1,
                                                            lambda *_: False)}
    assert acts[("update_gpus", "4/2")] == (1,) and ("release", "") in acts
    holds = [ids for (verb, _v), ids in acts.items() if verb == "hold"]
    assert ("update_gpus", "1/1") not in acts and holds == [(2,)]   # a running one: preempted, updated once pending


def test_a_job_slurm_started_before_its_round_grows_at_once_but_shrinks_and_preemptions_wait_min_run(tmp_path):
    # Slurm starts a job on its own count before the round that grows it (`begun`): min_run dropped that growth
    el, base, ids = Elastic(StateStore(tmp_path / "s.sqlite")), "shockwave:elastic base=1", [1, 2, 3]
    el.node_gpus, el.whole_nodes, el.bases, el.ranges = 8, 2, dict.fromkeys(ids, 1), {j: [1, 4] for j in ids}
    obs = {j: Observed(j, "RUNNING", False, "", 0, 5, n, running_for=3.0, admin_comment=base, run_reported=j != 3)
           for j, n in [(1, 1), (2, 4), (3, 1)]}
    el.prepare(RoundDecision(run=(1, 2, 3), placement={1: {GPU: 4}, 2: {GPU: 1}, 3: {GPU: 4}}), {1, 2, 3}, obs,
               SimpleNamespace(execute=lambda *a: []), 3, {})
    assert [(o.wanted_gpus, o.grow) for o in obs.values()] == [(4, True), (1, False), (4, True)]
    acts = reconcile(list(obs.values()), {1, 2, 3}, "authoritative", 5, 0, {}, 1, lambda *_: False, min_run=8)
    assert {(a.verb, a.job_ids) for a in acts} == {("hold", (1,)), ("signal", (1,))}  # 2: a shrink waits; 3: unreported
    assert reconcile([obs[1]], set(), "authoritative", 5, 0, {}, 1, lambda *_: False, min_run=8) == []  # a preemption
    cli, journal = FakeSlurm(), SimpleNamespace(intend_many=lambda _r, ids, *a: list(ids), settle=lambda *a: None)
    Enactor(cli, journal).execute(4, [Action("update_gpus", (2, 3), "4/1")], {})    # two grown in one round: one
    assert cli.calls == [("update_each", [2, 3], {"TresPerNode": "gres:gpu:4", "NumNodes": "1-1"})]  # line each


# ---------------------------------------------------------------------- a real cluster
@pytest.fixture(scope="module", params=version_test_versions(), ids=lambda v: f"slurm{v}")
def cluster(request):
    yield from cluster_up("shockwave-elastic-", version=request.param, gpus_per_node=4, cpus_per_node=8)


def _config(c, root: Path) -> Path:
    (root / "events").mkdir(exist_ok=True)
    conf = root / "controller.toml"
    if not conf.exists():
        conf.write_text("[controller]\n"
                        'round_seconds = 600\nmode = "authoritative"\ngrace_seconds = 1\nmin_run_seconds = 0\n'
                        f'partition = "{c.partition}"\nstate_dir = "{root}/state"\nevent_store = "{root}/events"\n'
                        + (f'[slurm]\nbin_dir = "{c.bin_dir}"\n' if c.bin_dir else "")
                        + f'[slurm.env]\nSLURM_CONF = "{c.env["SLURM_CONF"]}"\n')
    return conf


def _backend(conf: Path) -> SlurmBackend:
    cfg = load_config(conf)
    return SlurmBackend.from_config(cfg, StateStore(cfg.state_path), None, cli=None)


def _submit(c, comment: str, gres: str = "gpu:1", hold: bool = False) -> int:
    out = c.run(["sbatch", "--parsable", "--chdir=/", "--output=/dev/null", f"--gres={gres}", f"--comment={comment}",
                 *(["--hold"] if hold else []), "--wrap", "trap '' USR1; sleep 300"])
    assert out.returncode == 0, out.stderr
    return int(out.stdout.strip().split(";")[0])


def _partition(c, state: str) -> None:
    """The partition DOWN: jobs submitted meanwhile wait for the controller's first round; UP: they may start."""
    out = c.run(["scontrol", "update", f"PartitionName={c.partition}", f"State={state}"])
    assert out.returncode == 0, out.stderr


def _job(c, jid: int):
    return next(iter(c.cli.squeue_jobs(job_ids=[jid])), None)


def _round(b: SlurmBackend, placement: dict, check: bool = True):
    view = b.observe()
    decision = RoundDecision(run=tuple(placement), placement={j: {GPU: n} for j, n in placement.items()})
    b.apply(check_decision(view, decision) if check else decision)
    b.last_round = (view, decision)
    return {v.job_id: v for v in view.jobs}


def _status(b: SlurmBackend) -> dict:
    """`shockwave status`'s rows of the backend's last round, journalled as the round loop does."""
    view, decision = b.last_round
    b.state.begin_round(view.round_index, view.now)
    b.state.record_round(RoundRecord(view, decision, context=b.round_context()), 4)
    b.state.finish_round(view.round_index)
    b.round_index += 1
    return {r["job_id"]: r for r in status_rows(b.state)[1]}


def _running_at(c, jid: int, n: int):
    return wait_for(lambda: (lambda j: j if j and j.state == "RUNNING" and j.gpus == n else None)(_job(c, jid)),
                    40, what=f"job {jid} running on {n} GPUs")


def _resize_running(c, b, jid: int, placement: dict, n: int):
    """A running elastic job to n GPUs: held and signalled, requeued held after the grace, updated and released."""
    _round(b, placement)
    j = _job(c, jid)
    assert j.held and status_of(j.admin_comment) == "held"     # held (marked) before its signal
    _requeued(c, b, jid, placement)
    seen = b.observe().job(jid)                                   # on its way: seen at its new count (moving.py)
    assert (seen.ran_last_round, seen.running_gpus) == (True, n)
    _round(b, placement)                                          # updated while pending, released
    j = _running_at(c, jid, n)
    steps = [r["verb"] for r in reversed(b.state.actions(job_id=jid, status="done"))
             if r["verb"] in ("hold", "signal", "requeue_hold", "update_gpus", "release")]
    assert steps[-5:] == ["hold", "signal", "requeue_hold", "update_gpus", "release"], steps   # each journalled
    return j


def _requeued(c, b, jid: int, placement: dict) -> None:
    """Rounds until the controller requeued the job held (after the grace; no round after it), then until Slurm
    shows it pending."""
    runs = _job(c, jid).restart_count

    def requeued():
        if _job(c, jid).restart_count > runs:
            return True
        _round(b, placement)
        return False

    wait_for(requeued, 20, what=f"job {jid} requeued")
    wait_for(lambda: _job(c, jid).state == "PENDING", 20, what=f"job {jid} pending after its requeue")


@pytest.mark.slurm
def test_quarantine_of_bad_ranges_and_views_of_good_ones(cluster):
    c, root = cluster, make_root("shockwave-elastic-q-")
    b = _backend(_config(c, root))
    bad = {_submit(c, f"shockwave gpus={r}", hold=True): words for r, words in [
        ("0-2", "1 <= MIN <= MAX"), ("1-9", "the partition has 8 GPU(s)"), ("2-4", "outside its range")]}
    good = _submit(c, "shockwave gpus=1-8 bs=16", gres="gpu:2", hold=True)
    try:
        views = {v.job_id: v for v in b.observe().jobs}
        for jid, words in bad.items():
            assert "invalid hints" in b.quarantined[jid] and words in b.quarantined[jid], b.quarantined
        v = views[good]
        assert v.gpus_range == (1, 8) and v.num_gpus == 2 and v.running_gpus is None
        assert sorted(v.throughput_by_gpus) == [1, 2, 4, 8]
    finally:
        c.run(["scancel", *map(str, [*bad, good])])


@pytest.mark.slurm
def test_a_range_valid_on_the_partition_is_not_quarantined_while_a_node_is_drained(cluster):
    """The hint's bound is every GPU of the partition's nodes: a drained node (or one that reads `unknown` for a few
    seconds after slurmctld restarts) comes back, and quarantining the job would hand it to Slurm meanwhile."""
    c, root = cluster, make_root("shockwave-elastic-drain-")
    b = _backend(_config(c, root))
    out = c.run(["scontrol", "update", "NodeName=node2", "State=DRAIN", "Reason=shockwave-test"])
    assert out.returncode == 0, out.stderr
    whole = _submit(c, "shockwave gpus=1-8 bs=16", hold=True)
    over = _submit(c, "shockwave gpus=1-9 bs=16", hold=True)
    try:
        view = b.observe()
        assert whole not in b.quarantined and {v.job_id: v for v in view.jobs}[whole].gpus_range == (1, 8)
        assert "the partition has 8 GPU(s)" in b.quarantined[over], b.quarantined
        assert b.round_context().partition_gpus == 4 and view.num_gpus == 4   # what can run now: node1's
    finally:
        c.run(["scancel", str(whole), str(over)])
        out = c.run(["scontrol", "update", "NodeName=node2", "State=RESUME"])
        assert out.returncode == 0, out.stderr
        wait_for(lambda: all(n.available for n in c.cli.sinfo_nodes()), 20, what="node2 back")  # for the next tests


@pytest.mark.slurm
def test_an_elastic_job_grows_while_pending_shrinks_while_running_and_a_rigid_one_is_never_resized(cluster):
    c, root = cluster, make_root("shockwave-elastic-run-")
    conf = _config(c, root)
    b = _backend(conf)
    _partition(c, "DOWN")
    el = _submit(c, "shockwave epochs=5 bs=8 gpus=1-4")
    rigid = _submit(c, "shockwave epochs=5")
    try:
        _round(b, {})                                             # both deferred: held (ours) before they start
        _partition(c, "UP")
        assert _job(c, el).state == "PENDING" and _job(c, el).held
        _round(b, {el: 4, rigid: 1})                              # grows before its release
        j = _running_at(c, el, 4)
        assert j.gpu_request.endswith("gpu:4") and base_of(j.admin_comment) == 1
        views = _round(b, {el: 4, rigid: 1})
        assert (views[el].num_gpus, views[el].running_gpus, views[el].gpus_range) == (1, 4, (1, 4))
        assert views[rigid].gpus_range is None and not views[rigid].throughput_by_gpus
        rows = _status(b)                                         # status: its count now, and its base beside it
        assert (rows[str(el)]["gpus"], rows[str(el)]["gpus_base"]) == (4, 1)
        assert (rows[str(rigid)]["gpus"], rows[str(rigid)]["gpus_base"]) == (1, None)
        with pytest.raises(PlacementError, match=f"job {rigid} placed on"):
            _round(b, {el: 4, rigid: 2})                          # the decision check refuses it
        _round(b, {el: 4, rigid: 2}, check=False)                 # the backend too, unchecked
        r = _job(c, rigid)
        assert r.state == "RUNNING" and r.gpus == 1 and not r.held and r.restart_count == 0
        j = _resize_running(c, b, el, {el: 2, rigid: 1}, 2)
        assert j.restart_count == 1 and not j.held and status_of(j.admin_comment) == "elastic"
        views = _round(b, {el: 2, rigid: 1})
        assert (views[el].num_gpus, views[el].running_gpus) == (1, 2)
        assert b.elastic.log.counts == {"started": 2, "done": 2, "wasted": 1}   # 4 GPUs for less than a round
    finally:
        _partition(c, "UP")
        c.run(["scancel", str(el), str(rigid)])


@pytest.mark.slurm
def test_jobs_slurm_started_before_their_round_grow_at_once_despite_min_run_and_a_shrink_waits(cluster):
    c, conf = cluster, _config(cluster, make_root("shockwave-elastic-begun-"))
    conf.write_text(conf.read_text().replace("min_run_seconds = 0", "min_run_seconds = 600"))
    b, els = _backend(conf), [_submit(c, "shockwave epochs=5 bs=8 gpus=1-4") for _ in range(2)]
    try:
        assert [_running_at(c, j, 1) for j in els]                # Slurm started them on their own count
        grow = dict.fromkeys(els, 4)
        _round(b, grow)
        assert all(_job(c, j).held for j in els)                  # held and signalled in their first round
        wait_for(lambda: _round(b, grow) and all(_job(c, j).gpus == 4 for j in els), 40, what="both grown")
        assert [_running_at(c, j, 4) for j in els]
        assert not b.state.actions(status="failed")               # two updates in a round: each its own line
        _round(b, {els[0]: 1, els[1]: 4})
        j = _job(c, els[0])
        assert j.state == "RUNNING" and j.gpus == 4 and not j.held   # a shrink waits min_run, as a preemption
    finally:
        c.run(["scancel", *map(str, els)])


@pytest.mark.slurm
def test_an_elastic_job_grows_onto_whole_nodes(cluster):
    c, root = cluster, make_root("shockwave-elastic-nodes-")
    b = _backend(_config(c, root))
    _partition(c, "DOWN")
    el = _submit(c, "shockwave epochs=5 bs=8 gpus=4-8", gres="gpu:4")
    try:
        views = _round(b, {})
        assert sorted(views[el].throughput_by_gpus) == [4, 8]     # 5-7 do not divide 8 or fit whole nodes
        _partition(c, "UP")
        _round(b, {el: 8})                                        # 4 per node on 2 nodes
        j = _running_at(c, el, 8)
        assert j.num_nodes == 2 and j.gpus_per_node == 4 and base_of(j.admin_comment) == 4
    finally:
        _partition(c, "UP")
        c.run(["scancel", str(el)])


# -- kill -9 of the controller: a child process runs one round and SIGKILLs itself right after a Slurm call
def _child(conf: str, placement: str, token: str) -> None:
    die_after(token)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr)
    b = _backend(Path(conf))
    _round(b, {int(k): v for k, v in json.loads(placement).items()})


def _killed_round(conf: Path, placement: dict, token: str) -> None:
    killed(f"from tests.test_elastic_slurm import _child; _child({str(conf)!r}, {json.dumps(placement)!r}, {token!r})")


@pytest.mark.slurm
def test_kill9_after_the_base_mark_the_requeue_and_the_update_the_resize_completes_after_restart(cluster):
    c, root = cluster, make_root("shockwave-elastic-k9-")
    conf = _config(c, root)
    _partition(c, "DOWN")
    el = _submit(c, "shockwave epochs=5 bs=12 gpus=1-4", gres="gpu:2")
    try:
        _killed_round(conf, {el: 3}, "base=")                     # its first round: killed right after its base mark
        j = _job(c, el)
        assert base_of(j.admin_comment) == 2 and j.gpus == 2 and j.state == "PENDING"
        _round(_backend(conf), {el: 3})                           # a restart updates it (planned: not held)
        _partition(c, "UP")
        _running_at(c, el, 3)
        b = _backend(conf)
        _round(b, {el: 4})                                        # held and signalled
        assert _job(c, el).held and _job(c, el).state == "RUNNING"  # its trap ignores the signal
        time.sleep(1.2)                                           # the grace
        _killed_round(conf, {el: 4}, "requeuehold")               # killed right after requeuehold, before its hold
        j = wait_for(lambda: (lambda j: j if j.state == "PENDING" else None)(_job(c, el)), 20, what="pending")
        assert j.gpus == 3 and j.held and j.restart_count == 1
        _round(_backend(conf), {el: 4})
        j = _running_at(c, el, 4)
        assert not j.held and base_of(j.admin_comment) == 2 and j.restart_count == 1
        b = _backend(conf)
        _round(b, {el: 2})
        _requeued(c, b, el, {el: 2})
        _killed_round(conf, {el: 2}, "TresPerNode=")              # killed right after the update, before the release
        j = _job(c, el)
        assert j.state == "PENDING" and j.gpus == 2 and j.held
        _round(_backend(conf), {el: 2})
        j = _running_at(c, el, 2)
        assert not j.held and status_of(j.admin_comment) == "elastic" and j.restart_count == 2
        assert _backend(conf).elastic.log.counts["started"] == 3
    finally:
        _partition(c, "UP")
        c.run(["scancel", str(el)])

"""Nodes on Slurm (slurm/nodes.py): the view's GPUs per node (less the unmanaged jobs on each), where a managed job runs
(hostlists expanded), the node pin of a pending planned job (never over its user's own node list), a running job moved
to other nodes preempted like one that lost its round (authoritative mode only), and uninstall clearing only our
pins."""
from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest

from slurm_shockwave.journal.store import StateStore
from slurm_shockwave.slurm.enact import Action, Enactor, Observed, reconcile
from slurm_shockwave.slurm.nodes import VERB, NodePins, expand_hostlist, journal_pins, per_node_gpus
from slurm_shockwave.slurm.ownership import format_mark
from slurm_shockwave.slurm.parse import parse_squeue_json
from solver.types import GPU, JobPlan, RoundDecision
from tests.slurm_backend_fakes import fake_backend, sent, slurm_node

DATA = Path(__file__).parent / "data" / "slurm"
VERSIONS = ["22.05", "24.11", "26.05"]
HIGH = 1000


@pytest.mark.parametrize("text, names", [
    ("node1", ("node1",)), ("", ()), ("(null)", ()), (None, ()),
    ("gpu[01-03],x5", ("gpu01", "gpu02", "gpu03", "x5")),
    ("node[1-2,5]", ("node1", "node2", "node5")),
    ("node[8-10]", ("node8", "node9", "node10")),
    ("rack[1-2]-gpu[01,03]", ("rack1-gpu01", "rack1-gpu03", "rack2-gpu01", "rack2-gpu03")),
    ("a1,a1,b", ("a1", "b")),
])
def test_hostlists_expand_to_node_names(text, names):
    assert expand_hostlist(text) == names


@pytest.mark.parametrize("bad", ["a[1-", "a[x]", "a[3-1]", "a b", "a[1-999999999]", "a[1-99999]b[1-99999]"])
def test_a_bad_hostlist_raises(bad):
    with pytest.raises(ValueError):
        expand_hostlist(bad)


def _jobs(version="24.11", **required) -> dict:
    """The recorded mixed queue (1-3 running on node1/node1/node2, 4/6/7/8 pending), with required node lists."""
    data = json.loads((DATA / version / "squeue_mixed.json").read_text())
    for r in data["jobs"]:
        r["required_nodes"] = required.get(f"j{r['job_id']}", r.get("required_nodes", ""))
    return {j.job_id: j for j in parse_squeue_json(json.dumps(data))}


@pytest.mark.parametrize("version", VERSIONS)
def test_recorded_queues_read_the_required_node_list_and_running_nodes(version):
    jobs = _jobs(version, j4="node[1-2]", j6="node2")
    assert (jobs[4].required_nodes, jobs[6].required_nodes, jobs[7].required_nodes) == ("node[1-2]", "node2", "")
    assert NodePins.running_on(jobs[1]) == ("node1",) and NodePins.running_on(jobs[3]) == ("node2",)
    assert NodePins.running_on(jobs[4]) == ()


def _node(name, by_type, partitions=("gpu",), state="idle"):
    return slurm_node(name, by_type, (), partitions, state)


def test_the_view_lists_each_nodes_gpus_less_the_unmanaged_running_jobs_on_it():
    jobs = _jobs()
    nodes = [_node("node1", {GPU: 4}), _node("node2", {GPU: 4}), _node("node3", {GPU: 4}, state="down"),
             _node("node4", {GPU: 4}, partitions=("other",)), _node("cpu1", {})]
    # 1 and 2 (2 GPUs each on node1) are ours; 3 (2 GPUs on node2) is not; a 2-node unmanaged job of another
    # partition holds 1 GPU on node2 and 3 on node4 (gres_detail, one entry per node); one spread evenly
    spread = replace(jobs[3], job_id=50, partition="other", nodes="node[2,4]", gpus=4, gpus_per_node=None,
                     gres_detail=("gpu:1(IDX:0)", "gpu:3(IDX:0-2)"))
    even = replace(jobs[3], job_id=51, nodes="node[1-2]", gpus=2, gpus_per_node=None, gres_detail=())
    pins = NodePins()
    view = pins.observe(nodes, [*jobs.values(), spread, even], {1, 2, 4, 6, 7, 8}, "gpu")
    assert view == {"node1": (GPU, 3), "node2": (GPU, 0)}
    assert pins.capacity() == {GPU: 3}
    assert per_node_gpus(spread, ("node2", "node4")) == {"node2": 1, "node4": 3}
    assert per_node_gpus(replace(even, gpus=3), ("node1", "node2")) == {"node1": 2, "node2": 1}


def test_typed_nodes_and_a_node_of_several_types():
    pins = NodePins()
    assert pins.observe([_node("n1", {"v100": 4}), _node("n2", {"k80": 2})], [], set(), "gpu") == \
        {"n1": ("v100", 4), "n2": ("k80", 2)}
    assert pins.capacity() == {"v100": 4, "k80": 2}
    assert pins.observe([_node("n1", {"v100": 2, "k80": 2})], [], set(), "gpu") == {} and pins.capacity() == {}


def _round(version="24.11", **required):
    jobs = _jobs(version, **required)
    pins = NodePins()
    pins.observe([_node("node1", {GPU: 4}), _node("node2", {GPU: 4})], list(jobs.values()),
                 {1, 2, 3, 4, 6, 7, 8}, "gpu")
    return pins, jobs


def test_pending_planned_jobs_are_pinned_one_action_per_node_value_never_over_the_users_node_list():
    pins, jobs = _round(j7="node1")          # 7: the user's own --nodelist; 4: an 8-GPU gang on 2 nodes (-N 2)
    assigned = {4: ("node1", "node2"), 6: ("node2",), 7: ("node2",), 8: ("node2",), 1: ("node2",)}
    acts = pins.pins(assigned, {1, 4, 6, 7, 8})
    assert acts == [Action(VERB, (4,), "node1,node2"), Action(VERB, (6, 8), "node2")]
    assert pins.user_pinned(jobs[7]) and not pins.user_pinned(jobs[4])
    assert pins.user_nodes(jobs[7]) == ("node1",) and pins.user_nodes(jobs[4]) == ()
    # Slurm now shows our pins (as a hostlist): not the user's, nothing sent again; a job not run keeps its pin
    shown = {4: "node[1-2]", 6: "node2", 8: "node2"}
    for j, text in shown.items():
        pins.jobs[j] = replace(pins.jobs[j], required_nodes=text)
    assert not any(pins.user_pinned(pins.jobs[j]) for j in shown)
    assert pins.user_nodes(pins.jobs[4]) == ()                 # our pin is not the user's: the solver may move it
    assert pins.pins(assigned, {4, 6, 8}) == []
    assert pins.pins({6: ("node1",)}, {6}) == [Action(VERB, (6,), "node1")]          # re-pinned where it now goes
    # a planned job the round gave no nodes (a view without nodes) loses our pin (NodeList=)
    assert pins.pins({8: ()}, {8}) == [Action(VERB, (8,), "")]
    # a per-node request put on another number of nodes would ask for other GPUs: left to Slurm
    assert pins.pins({6: ("node1", "node2"), 4: ("node1",)}, {4, 6}) == []


def test_a_hostile_node_list_constrains_nothing_and_raises_nothing():
    """A user's unreadable --nodelist (a typo as long as Slurm accepts, bad names, control characters): no nodes for
    the solver, no pin kept off it, and the round goes on (slurm/backend.py `_view` reads it for every job)."""
    pins, jobs = _round(j6="node[1-999999999]", j7="node1;rm -rf /", j8="\x00node\n")
    assert [pins.user_nodes(jobs[j]) for j in (6, 7, 8)] == [(), (), ()]
    assert not any(pins.user_pinned(jobs[j]) for j in (6, 7, 8))


def test_our_pins_are_read_back_from_the_journal_intents_included(tmp_path):
    state = StateStore(tmp_path / "state.db")
    state.settle(state.intend_many(3, [4], VERB, "node2", {}), "done")
    state.intend_many(4, [6], VERB, "node1,node2", {})              # a crash right after the call
    state.intend_many(4, [8], VERB, "", {})                         # a clear is no pin
    assert journal_pins(state) == {4: {frozenset({"node2"})}, 6: {frozenset({"node1", "node2"})}}
    pins = NodePins(state)
    state.close()
    jobs = _jobs(j4="node2", j6="node[1-2]", j7="node2")
    pins.observe([_node("node1", {GPU: 4}), _node("node2", {GPU: 4})], list(jobs.values()), set(jobs), "gpu")
    assert [pins.user_pinned(jobs[j]) for j in (4, 6, 7)] == [False, False, True]


def test_a_running_job_assigned_other_nodes_is_a_move_unless_its_user_chose_its_nodes():
    pins, jobs = _round(j2="node1")
    assigned = {1: ("node2",), 2: ("node2",), 3: ("node2",), 4: ("node1",)}
    assert pins.moves(assigned, {1, 2, 3, 4}) == {1: ("node2",)}       # 2: its user's; 3: stays; 4: pending
    assert pins.moves(assigned, {2, 3, 4}) == {}
    assert pins.moves({1: ("node1",)}, {1}) == {} and pins.moves({}, {1}) == {}


def obs(i, state="RUNNING", held=False, ac=""):
    return Observed(i, state, held, "", 0, HIGH, 2, admin_comment=ac, mark="held" if ac else None)


def test_a_move_is_preempted_like_a_lost_round_in_authoritative_mode_only():
    jobs = [obs(1), obs(2)]
    moving = {a.verb: a.job_ids for a in reconcile(jobs, {1, 2}, "authoritative", HIGH, 100.0, {}, 60,
                                                    lambda *a: False, reasons={1: "moving to node2"}, moves={1: ("node2",)})}
    assert moving == {"hold": (1,), "signal": (1,)}
    later = reconcile([obs(1, held=True, ac=format_mark("held", "moving to node2"))], {1}, "authoritative", HIGH,
                      200.0, {1: [100.0, 0]}, 60, lambda *a: False, reasons={1: "moving to node2"}, moves={1: ("node2",)})
    assert [a.verb for a in later] == ["requeue_hold"]
    assert reconcile(jobs, {1, 2}, "advisory", HIGH, 100.0, {}, 60, lambda *a: False, moves={1: ("node2",)}) == []


class _CLI:
    def __init__(self):
        self.calls = []

    def scontrol_update(self, ids, **fields):
        self.calls.append(("list", list(ids), fields))

    def scontrol_update_each(self, ids, **fields):
        self.calls.append(("each", list(ids), fields))

    def scontrol_update_jobs(self, updates):
        self.calls.append(("jobs", [(j, dict(f)) for j, f in updates], {}))
        return self.failed if hasattr(self, "failed") else {}

    def pending_ids(self, ids):
        return {int(j) for j in ids} - getattr(self, "started", set())

    def run(self, argv):  # `scontrol --oneliner show reservation`: one of ours, one an admin's (uninstall)
        assert argv == ["scontrol", "--oneliner", "show", "reservation"], argv
        text = "ReservationName=shockwave-restart-9 Nodes=node2\nReservationName=maint Nodes=node1\n"
        return SimpleNamespace(stdout=text)

    def reservation(self, name, fields=None):
        self.calls.append(("reservation", [name], {"fields": fields}))


class _State:
    def __init__(self):
        self.settled = []

    def intend_many(self, _r, ids, *a):
        return list(ids)

    def settle(self, ids, status, *a, **k):
        self.settled.append((list(ids), status))


def test_a_rounds_pins_are_one_scontrol_reading_a_line_per_job():
    """Slurm 22.05, 24.11 and 26.05 refuse `scontrol update JobId=2,4 NodeList=...` (Invalid job ID): each job is
    its own `update` line, all of a round's in one scontrol; a job the errors name fails its pin alone."""
    cli, state = _CLI(), _State()
    cli.failed = {8: "Invalid node name specified for job 8"}
    res = Enactor(cli, state).execute(1, [Action(VERB, (4, 6), "node2"), Action(VERB, (8,), "node3"),
                                          Action("release", (4,), None)], {})
    assert cli.calls[0] == ("jobs", [(4, {"NodeList": "node2"}), (6, {"NodeList": "node2"}),
                                     (8, {"NodeList": "node3"})], {})
    assert [r for _a, r in res] == ["done", "failed", "failed"]          # (the fake has no release)
    assert state.settled[:2] == [([4, 6], "done"), ([8], "failed")]
    from slurm_shockwave.slurm import SlurmCLI
    from slurm_shockwave.slurm.errors import SlurmError
    calls = []

    def run(argv, input=None, **k):
        calls.append((argv, input))
        if "NodeList=bad" in (input or ""):
            raise SlurmError("scontrol failed", cmd=argv, returncode=1, stderr=(
                "Invalid node name specified for job 6\n"
                "scontrol: error: Could not load state information for job 7: Invalid job id specified\n"))
    real = SlurmCLI.__new__(SlurmCLI)
    real.run = run
    real.scontrol_update_each([4, 6], NodeList="node1,node2")
    assert calls == [(["scontrol"], "update JobId=4 NodeList=node1,node2\nupdate JobId=6 NodeList=node1,node2\n")]
    assert real.scontrol_update_jobs([(4, {"NodeList": "n1"}), (6, {"NodeList": "bad"}), (7, {"NodeList": ""})]) \
        == {6: "Invalid node name specified for job 6",
            7: "scontrol: error: Could not load state information for job 7: Invalid job id specified"}
    with pytest.raises(SlurmError, match="job 6"):
        real.scontrol_update_each([4, 6], NodeList="bad")
    with pytest.raises(ValueError):                                      # a second command hidden in a value
        real.scontrol_update_jobs([(4, {"NodeList": "n1 cancel 5"})])


def test_a_job_no_longer_pending_right_before_the_pin_call_is_not_pinned():
    """Slurm may start a job between the round's read and its pin: a running job's NodeList is a resize in place (the
    real case: tests/test_safety_slurm.py), so the pinned jobs are read again right before the call."""
    cli, state = _CLI(), _State()
    cli.started = {6}
    res = Enactor(cli, state).execute(1, [Action(VERB, (4,), "node2"), Action(VERB, (6,), "node3")], {})
    assert cli.calls == [("jobs", [(4, {"NodeList": "node2"})], {})]
    assert [r for _a, r in res] == ["done", "failed"] and state.settled == [([4], "done"), ([6], "failed")]


def test_a_failed_pin_call_that_names_no_job_fails_every_pin_and_an_unreachable_slurm_skips_the_rest():
    from slurm_shockwave.slurm.errors import SlurmError
    cli, state = _CLI(), _State()

    def away(updates):
        raise SlurmError.from_command(["scontrol"], 1, "scontrol: error: Unable to contact slurm controller")
    cli.scontrol_update_jobs = away
    res = Enactor(cli, state).execute(1, [Action(VERB, (4,), "node2"), Action(VERB, (8,), "node3"),
                                          Action("release", (4,), None)], {})
    assert [r for _a, r in res] == ["failed", "skipped", "skipped"]
    assert state.settled == [([4], "failed"), ([8], "failed")]          # both journalled, both settled


@pytest.mark.parametrize("mode", ["advisory", "authoritative"])
def test_the_backend_pins_before_the_release_and_moves_only_in_authoritative_mode(mode, tmp_path):
    jobs = _jobs()          # 1 runs on node1 (for 600 s); 6 is pending, held by us, and asks for 3 GPUs on one node
    ours = dict(comment="shockwave", partition="gpu")
    running = replace(jobs[1], **ours, start_time=1000, gpus=2)
    waiting = replace(jobs[6], **ours, gpus=3, gpus_per_node=3, num_nodes=1, held=True, state_reason="JobHeldAdmin",
                      priority=0, admin_comment=format_mark("held", "deferred"))
    b = fake_backend(tmp_path, [running, waiting], [_node("node1", {GPU: 4}), _node("node2", {GPU: 4})], mode=mode,
                     clock=lambda: 1600.0)
    b.observe()
    b.apply(RoundDecision(run=(1, 6), placement={1: {GPU: 2}, 6: {GPU: 3}}, nodes={6: ("node2",), 1: ("node2",)},
                          plans={1: JobPlan(1, rule="deadline", reason="earliest deadline")}))
    sent_ = sent(b)
    verbs = [(a.verb, a.job_ids, a.value) for a in sent_]
    assert verbs.index((VERB, (6,), "node2")) < [v[0] for v in verbs].index("release")
    moved = [(v, ids) for v, ids, _ in verbs if 1 in ids]
    if mode == "authoritative":
        assert moved == [("hold", (1,)), ("signal", (1,)), ("reserve", (1,))]   # its new node kept for it
        assert [a.value for a in sent_ if a.verb == "hold"] == [format_mark("held", "moving to node2")]
    else:
        assert moved == []


def test_uninstall_clears_only_the_pins_the_controller_wrote(tmp_path):
    from slurm_shockwave.slurm.uninstall import uninstall

    state_dir = tmp_path / "state"
    state_dir.mkdir()
    state = StateStore(state_dir / "state.sqlite")
    state.settle(state.intend_many(1, [4, 6], VERB, "node2", {}), "done")
    state.settle(state.intend_many(1, [1], VERB, "node1", {}), "done")
    state.close()
    # 4: still our pin; 6: its user changed it since; 7: the user's own; 1: ours but running (left as it is)
    jobs = _jobs(j4="node2", j6="node1", j7="node2", j1="node1")
    cli = _CLI()
    cli.squeue_jobs = lambda: list(jobs.values())
    cli.release = lambda ids: cli.calls.append(("release", list(ids), {}))
    cfg = SimpleNamespace(state_dir=str(state_dir), state_path=str(state_dir / "state.sqlite"), partition="gpu",
                          managed_by="comment", marker="shockwave")
    done = uninstall(cfg, cli=cli)
    assert done["unpinned"] == ["4"]
    assert done["unreserved"] == ["9"]          # ours deleted; the admin's `maint` left alone
    assert [c for c in cli.calls if c[0] == "reservation"] == [("reservation", ["shockwave-restart-9"], {"fields": None})]
    assert [c for c in cli.calls if "NodeList" in c[2]] == [("each", [4], {"NodeList": ""})]

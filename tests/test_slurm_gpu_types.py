"""GPU types on Slurm without Slurm: gres strings, the recorded outputs of every version with typed GPUs, capacity
per type, a job's pin, the version branch of steering, the journal read back, the enactment and the local cluster's
typed config (slurm/gpu_types.py; the real clusters: tests/test_typed_slurm.py)."""
from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from slurm_shockwave.journal.store import StateStore
from shockwave_lab.localcluster.config import ClusterSettings, Paths, render_gres_conf, render_slurm_conf
from slurm_shockwave.slurm.enact import Action, Enactor, Observed, reconcile
from slurm_shockwave.slurm.gpu_types import GpuTypes, gpus_by_type, request_type, tres_steering
from slurm_shockwave.slurm.parse import parse_gpu_count, parse_nodes_json, parse_squeue_json
from solver.types import GPU

DATA = Path(__file__).parent / "data" / "slurm"
VERSIONS = ["22.05", "24.11", "26.05"]


@pytest.mark.parametrize("spec, by_type", [
    ("gpu:v100:4", {"v100": 4}), ("gpu:4", {GPU: 4}), ("gpu:v100:2(S:0),gpu:k80:1", {"v100": 2, "k80": 1}),
    ("gpu:v100:2(IDX:0-1)", {"v100": 2}), ("gres/gpu=4,gres/gpu:a100=4", {"a100": 4}),
    ("gres/gpu=6,gres/gpu:a100=4", {"a100": 4, GPU: 2}), ("", {}), ("nvme:1", {})])
def test_gpus_by_type_of_gres_strings(spec, by_type):
    assert gpus_by_type(spec) == by_type
    assert sum(by_type.values()) == (parse_gpu_count(spec) or 0)


@pytest.mark.parametrize("spec, expected", [
    ("gres:gpu:v100:2", ("v100", True)), ("gres/gpu:k80:1", ("k80", True)), ("gres:gpu:2", (None, True)),
    ("gres/gpu:2,gres/nvme:1", (None, False)), ("gres:gpu:v100:1,gres:nvme:1", ("v100", False)), ("", (None, False))])
def test_the_type_a_request_names(spec, expected):
    assert request_type(spec) == expected


@pytest.mark.parametrize("version, tres", [("22.05", False), ("23.02", False), ("23.11", True), ("24.11", True),
                                           ("26.05", True), ("", False), ("x", False)])
def test_steering_by_version(version, tres):
    assert tres_steering(version) is tres


def _typed_nodes(version: str) -> list:
    data = json.loads((DATA / version / "nodes_idle.json").read_text())
    node1, node2 = data["nodes"][:2]
    as_list = isinstance(node1.get("features"), list)      # 22.05 prints a string, newer versions a list
    for n, t in ((node1, "v100"), (node2, "k80")):
        n["gres"] = f"gpu:{t}:2(S:0)"
        n["features"] = n["active_features"] = [t] if as_list else t
    return parse_nodes_json(json.dumps(data))


def _typed_jobs(version: str) -> list:
    data = json.loads((DATA / version / "squeue_mixed.json").read_text())
    sep = "/" if version != "22.05" else ":"
    rows = data["jobs"][:3]
    for r in rows:
        r["job_state"] = "PENDING" if version == "22.05" else ["PENDING"]
    rows[0]["tres_per_node"], rows[0]["features"] = f"gres{sep}gpu:k80:2", ""
    rows[1]["tres_per_node"], rows[1]["features"] = f"gres{sep}gpu:2", "v100"
    rows[2]["tres_per_node"], rows[2]["features"] = f"gres{sep}gpu:2", ""
    data["jobs"] = rows
    return parse_squeue_json(json.dumps(data))


@pytest.mark.parametrize("version", VERSIONS)
def test_recorded_outputs_with_typed_gpus(version):
    nodes = _typed_nodes(version)
    assert [(n.by_type, n.features, n.gpus) for n in nodes] == [((("v100", 2),), ("v100",), 2),
                                                               ((("k80", 2),), ("k80",), 2)]
    pinned, constrained, free = _typed_jobs(version)
    assert (pinned.gpu_type, pinned.features, pinned.gpus_per_node) == ("k80", "", 2)
    assert (constrained.gpu_type, constrained.features) == (None, "v100")
    assert (free.gpu_type, free.features, free.gpu_request.endswith("gpu:2")) == (None, "", True)
    types = GpuTypes()
    partition = nodes[0].partitions[0] if nodes[0].partitions else None
    types.observe(nodes, [], set(), partition)
    assert types.capacity == {"v100": 2, "k80": 2} and types.feature_ok == {"v100", "k80"}
    assert [types.pinned(j) for j in (pinned, constrained, free)] == ["k80", "v100", None]


def _node(name, by_type, features=(), partitions=("gpu",), state="idle"):
    from tests.slurm_backend_fakes import slurm_node
    return slurm_node(name, by_type, features, partitions, state)


def _jobs(version="24.11"):
    return {j.job_id: j for j in _typed_jobs(version)}


def test_capacity_per_type_less_the_unmanaged_jobs_on_each_type():
    nodes = [_node("node1", {"v100": 4}, ["v100"]), _node("node2", {"k80": 2}, ["k80"]),
             _node("node3", {"k80": 2}, ["k80"], state="down"), _node("node4", {"v100": 8}, partitions=("other",))]
    jobs = list(_jobs().values())
    foreign = replace(jobs[2], job_id=99, state="RUNNING", gres_detail=("gpu:k80:1(IDX:0)",), gpus=1,
                      comment="", nodes="node2")
    unknown = replace(jobs[2], job_id=98, state="RUNNING", gres_detail=(), gpus=1, nodes="node[1-2]")
    types = GpuTypes()
    assert types.observe(nodes, [*jobs, foreign, unknown], {j.job_id for j in jobs}, "gpu") == {"v100": 3, "k80": 1}
    assert types.typed and types.running_type(foreign) == "k80" and types.running_type(unknown) is None
    # one untyped pool: exactly the old count (the partition's GPUs less the unmanaged running ones)
    flat = GpuTypes()
    untyped = replace(foreign, gres_detail=("gpu:1(IDX:0)",))
    assert flat.observe([_node("node1", {GPU: 4})], [untyped], set(), "gpu") == {GPU: 3} and not flat.typed
    assert GpuTypes().observe([], [], set(), "gpu") == {GPU: 0}


def test_a_feature_is_a_placement_route_only_when_exactly_the_nodes_of_its_type_carry_it():
    types = GpuTypes()
    types.observe([_node("n1", {"v100": 2}, ["v100"]), _node("n2", {"k80": 2}, ["k80", "v100"]),
                   _node("n3", {"p100": 2})], [], set(), "gpu")
    assert types.feature_ok == {"k80"}        # v100 is also a feature of a k80 node; no p100 node carries p100
    types.observe([_node("n1", {"v100": 2}, ["v100"]), _node("n2", {"k80": 2}, ["k80"]),
                   _node("n3", {"p100": 2})], [], set(), "gpu")
    assert types.feature_ok == {"v100", "k80"}


def _typed_round(version="24.11"):
    jobs = _jobs("22.05" if version == "22.05" else "24.11")
    types = GpuTypes()
    types.observe([_node("node1", {"v100": 2}, ["v100"]), _node("node2", {"k80": 2}, ["k80"])],
                  list(jobs.values()), set(jobs), "gpu")
    return types, jobs


def test_steering_on_24_11_writes_the_type_into_the_request_of_pending_unpinned_jobs_only():
    types, jobs = _typed_round()
    pinned, constrained, free = jobs
    placement = {pinned: {"k80": 2}, constrained: {"v100": 2}, free: {"k80": 2}}
    acts = types.steer(placement, {pinned, constrained, free}, "24.11", {})
    assert acts == [Action("place_tres", (free,), "gres:gpu:k80:2")]
    assert types.placed == {free: "k80"}
    # once Slurm shows our type in its request, it is not the user's pin, and nothing is sent again
    types.jobs[free] = replace(types.jobs[free], gpu_type="k80", gpu_request="gres/gpu:k80:2")
    assert types.pinned(types.jobs[free]) is None and types.meta(types.jobs[free])["gpu_type_by"] == "controller"
    assert types.steer(placement, {free}, "24.11", {}) == []
    assert types.steer({free: {"v100": 2}}, {free}, "26.05", {}) == [Action("place_tres", (free,), "gres:gpu:v100:2")]
    assert types.steer(placement, {free}, "24.11", {free: 1}) == [Action("place_tres", (free,), "gres:gpu:k80:1")]
    # not planned, running, other GRES in the request, or a single-type cluster: nothing
    assert types.steer(placement, set(), "24.11", {}) == []
    types.jobs[free] = replace(types.jobs[free], state="RUNNING")
    assert types.steer({free: {"v100": 2}}, {free}, "24.11", {}) == []
    types.jobs[free] = replace(types.jobs[free], state="PENDING", gpu_request="gres/gpu:2,gres/nvme:1", gpu_type=None)
    assert types.steer({free: {"v100": 2}}, {free}, "24.11", {}) == []
    flat = GpuTypes()
    flat.observe([_node("node1", {"v100": 4}, ["v100"])], list(jobs.values()), set(jobs), "gpu")
    assert flat.steer({free: {"v100": 2}}, {free}, "24.11", {}) == []


def test_steering_on_22_05_goes_through_the_nodes_features_never_the_gres_request():
    types, jobs = _typed_round("22.05")
    pinned, constrained, free = jobs
    placement = {pinned: {"k80": 2}, constrained: {"v100": 2}, free: {"k80": 2}}
    assert types.steer(placement, {pinned, constrained, free}, "22.05", {}) == [
        Action("place_features", (free,), "k80")]
    types.jobs[free] = replace(types.jobs[free], features="k80")         # as Slurm then shows it
    assert types.pinned(types.jobs[free]) is None
    assert types.steer({free: {"v100": 2}}, {free}, "22.05", {}) == [Action("place_features", (free,), "v100")]
    types.jobs[free] = replace(types.jobs[free], features="nvme")        # the user's own constraint: left alone
    assert types.steer({free: {"v100": 2}}, {free}, "22.05", {}) == []
    types.jobs[free] = replace(types.jobs[free], features="")
    types.feature_ok = {"k80"}                                           # v100 nodes without the Feature
    assert types.steer({free: {"v100": 2}}, {free}, "22.05", {}) == []


def test_placed_types_are_read_back_from_the_journal_intents_included(tmp_path):
    state = StateStore(tmp_path / "state.db")
    ids = state.intend_many(3, [7], "place_tres", "gres:gpu:k80:2", {})
    state.settle(ids, "done")
    state.intend_many(4, [7], "place_tres", "gres:gpu:v100:2", {})        # a crash right after the call
    state.intend_many(4, [8], "place_features", "k80", {})
    assert GpuTypes(state).placed == {7: "v100", 8: "k80"}
    state.close()


class _CLI:
    def __init__(self):
        self.calls = []

    def scontrol_update(self, ids, **fields):
        self.calls.append((list(ids), fields))


class _State:
    def intend_many(self, *a):
        return [1]

    def settle(self, *a, **k):
        pass


def test_enactment_of_place_actions_and_a_pinned_type_kept_on_a_gpu_count_update():
    cli = _CLI()
    Enactor(cli, _State()).execute(1, [Action("place_tres", (5,), "gres:gpu:k80:2"),
                                       Action("place_features", (6,), "v100")], {})
    assert cli.calls == [([5], {"TresPerNode": "gres:gpu:k80:2"}), ([6], {"Features": "v100"})]
    pinned = Observed(1, "PENDING", False, "", 0, 0, 2, wanted_gpus=1, gpu_type="v100")
    free = Observed(2, "PENDING", False, "", 0, 0, 2, wanted_gpus=1)
    acts = [a for a in reconcile([pinned, free], set(), "advisory", 100, 0.0, {}, 30, lambda *a: False)
            if a.verb == "update_gpus"]
    assert {a.job_ids: a.value for a in acts} == {(1,): "v100:1", (2,): 1}


def test_local_cluster_config_of_typed_nodes():
    s = ClusterSettings(nodes=2, gpus_per_node=2, cpus_per_node=4, partition="gpu", cluster_name="t", ctld_port=1,
                        node_ports=(2, 3), gpu_types=["v100", "k80"], accounting=True)
    p = Paths(Path("/x"))
    conf = render_slurm_conf(p, s)
    assert "Gres=gpu:v100:2 Features=v100 " in conf and "Gres=gpu:k80:2 Features=k80 " in conf
    assert "AccountingStorageTRES=gres/gpu,gres/gpu:v100,gres/gpu:k80" in conf and "GresTypes=gpu" in conf
    assert render_gres_conf(p, s).splitlines() == ["NodeName=node1 Name=gpu Type=v100 File=/x/dev/nvidia[0-1]",
                                                   "NodeName=node2 Name=gpu Type=k80 File=/x/dev/nvidia[0-1]"]
    untyped = replace(s, gpu_types=(), accounting=False)
    assert "Features" not in render_slurm_conf(p, untyped) and "Type=" not in render_gres_conf(p, untyped)
    from shockwave_lab.localcluster import LocalCluster
    with pytest.raises(ValueError):
        LocalCluster("/tmp/unused-typed", gpu_types=["v100", "bad type"])


def test_an_earlier_type_of_ours_left_by_a_failed_update_is_not_taken_for_the_users_pin():
    types, jobs = _typed_round()
    free = list(jobs)[2]
    assert types.steer({free: {"k80": 2}}, {free}, "24.11", {})
    assert types.steer({free: {"v100": 2}}, {free}, "24.11", {})       # that update fails: Slurm still shows k80
    types.jobs[free] = replace(types.jobs[free], gpu_type="k80", gpu_request="gres/gpu:k80:2")
    assert types.pinned(types.jobs[free]) is None
    assert types.steer({free: {"v100": 2}}, {free}, "24.11", {}) == [Action("place_tres", (free,), "gres:gpu:v100:2")]
    types2, jobs2 = _typed_round("22.05")
    types2.jobs[free] = replace(types2.jobs[free], features="k80,nvme")   # more than our one constraint: left alone
    types2.ours[free] = {"k80"}
    assert types2.steer({free: {"v100": 2}}, {free}, "22.05", {}) == []


def test_the_backend_steers_after_a_gpu_count_update_and_before_the_release(tmp_path):
    from slurm_shockwave.slurm.ownership import format_mark
    from solver.types import RoundDecision
    from tests.slurm_backend_fakes import fake_backend, me, report, sent, slurm_node

    jobs = _jobs()
    pinned, constrained, free = jobs
    held = dict(comment="shockwave", partition="gpu", held=True, state_reason="JobHeldAdmin", priority=0,
                admin_comment=format_mark("held", "deferred"), user_id=me())
    b = fake_backend(tmp_path, [replace(jobs[j], **held) for j in (pinned, free)],
                     [slurm_node("node1", {"v100": 2}, ["v100"]), slurm_node("node2", {"k80": 2}, ["k80"])])
    report(b, free, gpus=1)                        # the free job now asks for 1 GPU (per node) instead of 2
    b.observe()
    b.apply(RoundDecision(run=(free, pinned), placement={free: {"k80": 1}, pinned: {"k80": 2}}))
    sent = sent(b)
    verbs = [(a.verb, a.job_ids) for a in sent]
    assert verbs.index(("update_gpus", (free,))) < verbs.index(("place_tres", (free,))) < \
        verbs.index(("release", tuple(sorted((free, pinned)))))
    assert [a.value for a in sent if a.verb == "place_tres"] == ["gres:gpu:k80:1"]
    assert not [a for a in sent if a.verb.startswith("place") and pinned in a.job_ids]


def test_a_job_with_a_constraint_of_its_own_is_never_steered_on_any_version():
    for version in ("22.05", "24.11"):
        types, jobs = _typed_round(version)
        free = list(jobs)[2]
        types.jobs[free] = replace(types.jobs[free], features="v100|p100")
        assert types.pinned(types.jobs[free]) is None
        assert types.steer({free: {"k80": 2}}, {free}, version, {}) == []


def test_cluster_up_refuses_a_bad_gpu_type_before_starting_anything(tmp_path):
    from click.testing import CliRunner

    from slurm_shockwave.cli.main import cli
    r = CliRunner().invoke(cli, ["cluster", "up", "--root", str(tmp_path / "c"), "--gpu-types", "v100,k 80"])
    assert r.exit_code == 2 and "GPU types must be" in r.output, r.output
    assert not (tmp_path / "c").exists()

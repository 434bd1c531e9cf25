"""What the enactor relies on, checked on a real cluster of each Slurm version.

Runs once per version in ``SHOCKWAVE_TEST_SLURM``; by default on the host's Slurm and on every
version whose Debian root is already built under ``/var/cache/shockwave/roots`` (``.ci/setup``
builds them; ``shockwave cluster build-root --slurm 24.11``). Explicitly::

    SHOCKWAVE_TEST_SLURM=22.05,24.11,26.05 .venv/bin/python -m pytest -q -p no:cacheprovider \\
        tests/test_slurm_versions.py

Newer versions run from a Debian root (see ``shockwave_lab.localcluster.chroot``), so jobs are
submitted as root; on them the short demo (Shockwave run) also runs end to end. Every wait is a poll
with a generous timeout; nothing asserts a duration.
"""
from __future__ import annotations

import time
from pathlib import Path

import pytest

from shockwave_lab.localcluster.chroot import host_version
from slurm_shockwave.slurm import SlurmCLI
from tests.slurm_fixtures import ODD_COMMENT, job_state, settle_after_requeue, version_test_versions, wait_for

pytestmark = pytest.mark.slurm


@pytest.fixture
def lab(versions_cluster):
    """(cluster, cli, workdir); every job is cancelled afterwards."""
    work = Path(versions_cluster.root) / "work"
    work.mkdir(exist_ok=True)
    work.chmod(0o777)
    cli = versions_cluster.cli
    yield versions_cluster, cli, work
    active = [j.job_id for j in cli.squeue_jobs() if not j.finished]
    if active:
        cli.cancel(active)
        wait_for(lambda: not [j for j in cli.squeue_jobs(job_ids=active)
                              if j.state in ("RUNNING", "COMPLETING", "CONFIGURING")],
                 timeout=30, what="jobs to leave the nodes")


def submit(cli: SlurmCLI, work: Path, *args: str, wrap: str = "sleep 300") -> int:
    out = cli.run(["sbatch", "--parsable", "-D", str(work), "-o", str(work / "out.%j"), *args,
                   "--wrap", wrap]).stdout
    return int(out.strip().split(";")[0])


def state_of(cli: SlurmCLI, job_id: int):
    job = job_state(cli, job_id)
    assert job is not None, f"job {job_id} vanished from squeue"
    assert job.problem is None, job.problem
    return job


def test_version_is_the_one_asked_for(lab):
    cluster, cli, _ = lab
    cli.squeue_jobs()
    assert cli.slurm_version == cluster.slurm_version
    version = cluster.run(["sinfo", "-V"]).stdout.split()[-1]
    assert version.startswith(cluster.slurm_version)


def test_nodes_report_gpu_capacity_and_use(lab):
    cluster, cli, work = lab
    nodes = cli.sinfo_nodes()
    assert sorted(n.name for n in nodes) == ["node1", "node2"]
    assert all(n.gpus == 4 and n.available for n in nodes)
    job = submit(cli, work, "--gres=gpu:3")
    wait_for(lambda: state_of(cli, job).running, what="job running")
    used = wait_for(lambda: sum(n.gpus_used for n in cli.sinfo_nodes()) or None, what="gpus_used")
    assert used == 3
    assert sum(n.gpus_free for n in cli.sinfo_nodes()) == 5


def test_pending_running_held_and_site_factor(lab):
    cluster, cli, work = lab
    big = submit(cli, work, "-N", "2", "--gres=gpu:4")               # fills all 8 GPUs
    wait_for(lambda: state_of(cli, big).running, what="big job running")
    waiting = submit(cli, work, "--gres=gpu:1")
    held = submit(cli, work, "--gres=gpu:1")
    cli.hold([held])
    cli.scontrol_update([waiting], SiteFactor=5000)
    j = state_of(cli, waiting)
    assert (j.state, j.held, j.gpus, j.gpus_per_node) == ("PENDING", False, 1, 1)
    assert j.priority >= 5000                                       # priority reflects SiteFactor at once
    h = state_of(cli, held)
    assert (h.state, h.held, h.priority, h.state_reason) == ("PENDING", True, 0, "JobHeldAdmin")
    r = state_of(cli, big)
    assert (r.gpus, r.gpus_per_node, r.num_nodes) == (8, 4, 2) and r.gres_detail
    factors = wait_for(lambda: cli.site_factors().get(waiting) is not None and cli.site_factors(),
                       timeout=20, what="sprio to list the job")
    assert factors[waiting] == 5000 and held not in factors
    with_site = {x.job_id: x.site_factor for x in cli.squeue_jobs(with_site_factor=True)}
    assert with_site[waiting] == 5000
    cli.release([held])
    assert not state_of(cli, held).held
    cli.scontrol_update([waiting], SiteFactor=0)
    assert state_of(cli, waiting).priority < 5000


def test_admin_comment_written_and_read_back(lab):
    cluster, cli, work = lab
    job = submit(cli, work, "--gres=gpu:1", "--begin=now+3600")
    mark = "shockwave: deferred, planned at 14:32 " + ODD_COMMENT
    cli.scontrol_update([job], AdminComment=mark)
    assert state_of(cli, job).admin_comment == mark
    cli.scontrol_update([job], AdminComment="")
    assert state_of(cli, job).admin_comment == ""


def test_hold_release_and_requeuehold_reasons(lab):
    cluster, cli, work = lab
    later = submit(cli, work, "--gres=gpu:1", "--begin=now+3600")
    cli.hold([later])
    j = state_of(cli, later)
    assert (j.held, j.priority, j.state_reason) == (True, 0, "JobHeldAdmin")
    cli.release([later])
    j = state_of(cli, later)
    assert not j.held and j.state == "PENDING" and j.priority > 0
    run = submit(cli, work, "--gres=gpu:2", "--requeue")
    wait_for(lambda: state_of(cli, run).running, what="job running")
    cli.requeue([run], hold=True)
    j = wait_for(lambda: (x := state_of(cli, run)).state == "PENDING" and x, what="requeuehold pending")
    assert j.held and j.restart_count == 1
    assert j.state_reason in ("job_requeued_in_held_state", "JobHeldUser")
    wait_for(lambda: state_of(cli, run).state_reason == "JobHeldUser", what="user hold after requeuehold")
    cli.hold([run])                                                 # turn it into an admin hold
    assert state_of(cli, run).state_reason == "JobHeldAdmin"
    settle_after_requeue()
    cli.release([run])
    wait_for(lambda: state_of(cli, run).running, timeout=40, what="released job to run again")


def test_incremental_queue_read_matches_a_full_read(lab):
    """The controller's round read (a compact listing, then JSON only for changed jobs on 23.x and newer) gives
    what a full ``squeue --json`` gives, after a hold, a comment with a newline and separators, and a cancel."""
    cluster, cli, work = lab
    ids = [submit(cli, work, "--gres=gpu:4", "-N", "2", "--comment", f"shockwave epochs={i}") for i in range(4)]
    mine = SlurmCLI(env=cli.env, bin_dir=cli.bin_dir)

    def same():
        full = {j.job_id: j for j in cli.squeue_jobs(job_ids=ids)}
        inc = {j.job_id: j for j in mine.squeue_jobs(incremental=True) if j.job_id in ids}
        keep = ("state", "state_reason", "held", "comment", "admin_comment", "gpus", "restart_count", "nodes")
        return {k: [getattr(v, f) for f in keep] for k, v in inc.items()} == \
            {k: [getattr(v, f) for f in keep] for k, v in full.items()}
    wait_for(lambda: state_of(cli, ids[0]).running, timeout=30, what="the first job running")
    assert wait_for(same, timeout=10, what="the first reads to agree")
    if not cluster.slurm_version.startswith("22."):
        # a quiet queue (the scheduler's reasons settled): only changed records and the refresh turn are JSON
        assert wait_for(lambda: same() and mine.queue.last["mode"] == "changed"
                        and mine.queue.last["json_jobs"] < mine.queue.last["listed"], timeout=20,
                        what="a partial read of a quiet queue")
    assert same()
    quiet = mine.queue.last
    cli.hold([ids[2]])
    cli.run(["scontrol", "update", f"JobId={ids[3]}", "Comment=shockwave epochs=3\n~00~|odd"])   # as a user may
    cli.cancel([ids[1]])
    assert wait_for(same, timeout=10, what="the reads to agree after the changes")
    now = {j.job_id: j for j in mine.squeue_jobs(incremental=True)}
    assert now[ids[3]].comment == "shockwave epochs=3\n~00~|odd" and now[ids[2]].held and now[ids[1]].finished
    if cluster.slurm_version.startswith("22."):                     # 22.05 ignores -j in squeue --json
        assert quiet["mode"] == mine.queue.last["mode"] == "full"


def test_requeue_delay_and_start_time_now(lab):
    cluster, cli, work = lab
    job = submit(cli, work, "--gres=gpu:2", "--requeue")
    wait_for(lambda: state_of(cli, job).running, what="job running")
    cli.requeue([job])
    # only once the job is exactly PENDING, and not in the same second as the requeue: 24.11 kills a
    # restart whose credential is that young ("Job credential revoked", job FAILED)
    j = wait_for(lambda: (x := state_of(cli, job)).state == "PENDING" and x, timeout=30, what="requeued pending")
    assert j.restart_count == 1 and not j.held
    assert j.state_reason in ("BeginTime", "None", "Priority", "Resources")
    settle_after_requeue()
    cli.scontrol_update([job], StartTime="now")
    j = wait_for(lambda: (x := state_of(cli, job)).running and x, timeout=30, what="restart after StartTime=now")
    assert j.restart_count == 1


def test_a_pending_job_pinned_by_the_controller_runs_on_the_decisions_node(lab):
    """slurm/nodes.py on a real cluster: the view's GPUs per node less an unmanaged job's, a held managed job pinned
    (`scontrol update JobId=N NodeList=node2`, one call per job) and released starts on node2, where it then runs in
    the next view; a managed job's own node list (-w) is in its view (`allowed_nodes`), the controller's pin is not;
    uninstall clears the pin it wrote on a job still pending, never the user's own node list."""
    from slurm_shockwave.controller.config import config_from_dict
    from slurm_shockwave.events.reader import EventReader
    from slurm_shockwave.journal.store import StateStore
    from slurm_shockwave.slurm.backend import SlurmBackend
    from slurm_shockwave.slurm.ownership import marked
    from slurm_shockwave.slurm.uninstall import uninstall
    from solver.types import GPU, RoundDecision

    cluster, cli, work = lab
    (work / "events").mkdir(exist_ok=True)
    cfg = config_from_dict({"controller": {"round_seconds": 1, "mode": "advisory", "partition": cluster.partition,
                                           "state_dir": str(work / "state"), "event_store": str(work / "events")},
                            "policy": {"name": "fifo"}}, "test")
    user = submit(cli, work, "--gres=gpu:1", "-w", "node1")               # unmanaged, its user's node list
    wait_for(lambda: state_of(cli, user).running, what="unmanaged job running")
    hint = "--comment=shockwave epochs=10 bs=32 epoch_s=30"
    small, big = submit(cli, work, "--gres=gpu:2", "-H", hint), submit(cli, work, "--gres=gpu:4", "-H", hint)
    mine = submit(cli, work, "--gres=gpu:1", "-w", "node1", "-H", hint)   # managed, its user's node list
    cli.scontrol_update([small, big, mine], AdminComment=marked("", "held", "deferred"), Priority=0)   # our hold
    state = StateStore(cfg.state_path)
    try:
        backend = SlurmBackend.from_config(cfg, state, EventReader(cfg.event_store), cli=cli)
        view = backend.observe()
        assert dict(view.nodes) == {"node1": (GPU, 3), "node2": (GPU, 4)} and dict(view.capacity) == {GPU: 7}
        assert {j.job_id for j in view.jobs} == {small, big, mine} and all(j.nodes == () for j in view.jobs)
        assert {j.job_id: j.allowed_nodes for j in view.jobs} == {small: (), big: (), mine: ("node1",)}
        # big cannot fit on node2 beside small: it stays pending there, pinned
        backend.apply(RoundDecision(run=(small, big), placement={small: {GPU: 2}, big: {GPU: 4}},
                                    nodes={small: ("node2",), big: ("node2",)}))
        j = wait_for(lambda: (x := state_of(cli, small)).running and x, timeout=40, what="pinned job running")
        assert j.nodes == "node2" and j.required_nodes == "node2"
        assert state_of(cli, big).required_nodes == "node2" and state_of(cli, big).state == "PENDING"
        backend.round_index += 1
        view = backend.observe()
        assert {v.job_id: v.nodes for v in view.jobs}[small] == ("node2",)
        assert {v.job_id: v.allowed_nodes for v in view.jobs} == {small: (), big: (), mine: ("node1",)}
        assert dict(view.nodes) == {"node1": (GPU, 3), "node2": (GPU, 4)}          # ours are not subtracted
        assert {r["job_id"] for r in state.actions(verb="place_nodes")} == {str(small), str(big)}
    finally:
        state.close()
    done = uninstall(cfg, cli=cli)
    assert done["unpinned"] == [str(big)]
    assert state_of(cli, big).required_nodes == "" and state_of(cli, user).required_nodes == "node1"
    assert state_of(cli, mine).required_nodes == "node1"
    assert state_of(cli, small).required_nodes == "node2"                    # running: left as it is


@pytest.mark.parametrize("scope", ["batch", "full"])
def test_scancel_signal_forms_reach_the_job(lab, scope):
    cluster, cli, work = lab
    flag = work / f"sig-{scope}-{time.monotonic_ns()}"
    script = f"trap 'echo got >> {flag}' USR1; echo ready > {flag}.ready; while :; do sleep 0.2; done"
    job = submit(cli, work, "--gres=gpu:1", wrap=script)
    wait_for(lambda: Path(f"{flag}.ready").exists(), timeout=30, what="job script started")
    cli.signal([job], "USR1", scope=scope)
    wait_for(lambda: flag.exists() and "got" in flag.read_text(), timeout=20, what=f"USR1 via --{scope}")
    assert state_of(cli, job).running                               # a trapped signal does not end it


def test_accounting_shares_usage_and_budgets(lab):
    """Real accounting (issue 24): sshare's tree as the controller reads it (JSON from 24.11, text on 22.05), each
    user's job billed to its account, the usage of an ended job in sshare at once, budgets 3:1 from the shares."""
    from slurm_shockwave.slurm.budgets import compute
    from slurm_shockwave.slurm.shares import read_shares
    from tests.share_fixtures import sbatch_as

    cluster, cli, work = lab
    cli.squeue_jobs()                                               # the version the CLI speaks is known
    rows = {r.key: r for r in read_shares(cli)}
    assert {k: rows[k].raw_shares for k in [("teama", ""), ("teamb", ""), ("teama", "sw-ann"), ("teamb", "sw-bob")]} \
        == {("teama", ""): 3, ("teamb", ""): 1, ("teama", "sw-ann"): 1, ("teamb", "sw-bob"): 1}
    assert rows[("teama", "")].parent == rows[("teamb", "")].parent == "root"
    assert compute(rows.values(), [("teama", "sw-ann"), ("teamb", "sw-bob")]).budget[("teama", "sw-ann")] > 1
    ann = sbatch_as(cluster, "sw-ann", work, "--gres=gpu:2", "--wrap", "sleep 2")
    bob = sbatch_as(cluster, "sw-bob", work, "--gres=gpu:1", "--wrap", "sleep 2")
    jobs = wait_for(lambda: (x := {j.job_id: j for j in cli.squeue_jobs(job_ids=[ann, bob])}) and
                    all(j.finished for j in x.values()) and x, timeout=60, what="both jobs done")
    assert (jobs[ann].user, jobs[ann].account, jobs[bob].user, jobs[bob].account) == \
        ("sw-ann", "teama", "sw-bob", "teamb")
    used = wait_for(lambda: (r := {x.key: x.raw_usage for x in read_shares(cli)})[("teama", "sw-ann")] > 0 and
                    r[("teamb", "sw-bob")] > 0 and r, timeout=30, what="usage of the ended jobs in sshare")
    assert used[("teama", "")] >= used[("teama", "sw-ann")] > used[("teamb", "sw-bob")]   # 2 GPUs vs 1
    want = sorted([f"{ann}|sw-ann|teama|COMPLETED", f"{bob}|sw-bob|teamb|COMPLETED"])

    def accounted():
        # slurmctld sends a job's end to slurmdbd on its own schedule: sacct may still say PENDING for a job that
        # squeue already shows ended (seen once in CI on 22.05), so the accounting is waited for, not sampled
        acct = cluster.run(["sacct", "-X", "-n", "-P", "-o", "JobIDRaw,User,Account,State", "-j", f"{ann},{bob}"])
        assert acct.returncode == 0, acct.stderr
        return sorted(acct.stdout.split())

    rows_now = wait_for(lambda: (r := accounted()) == want and r, timeout=30, what="both jobs COMPLETED in sacct")
    assert rows_now == want


@pytest.mark.parametrize("version", version_test_versions())
def test_cluster_cli_up_down_leaves_nothing(version):
    """`shockwave cluster up --slurm V` / `down`: nodes idle with GPUs; afterwards no daemon, no job
    process and no mount of that cluster is left."""
    import json

    from click.testing import CliRunner

    from slurm_shockwave.cli.main import cli
    from shockwave_lab.localcluster.daemons import ProcId
    from tests.slurm_fixtures import ROOTS_DIR, make_root

    root = make_root("shockwave-cli-")
    try:
        r = CliRunner().invoke(cli, ["cluster", "up", "--root", str(root), "--slurm", version, "--roots-dir",
                                     ROOTS_DIR, "--nodes", "1", "--gpus-per-node", "2", "--json"])
        assert r.exit_code == 0, r.output
        up = json.loads(r.output)
        assert up["slurm_version"] == version and up["status"]["nodes"]["node1"]["gpus"] == 2
        state = json.loads((root / "cluster.json").read_text())
        procs = [ProcId.from_json(v) for v in state["daemons"].values()]
        down = CliRunner().invoke(cli, ["cluster", "down", "--root", str(root), "--json"])
        assert down.exit_code == 0 and json.loads(down.output)["still_alive"] == []
        assert not any(p.alive() for p in procs)
        assert f"{root} " not in Path("/proc/self/mountinfo").read_text()   # its bind mount is gone
    finally:
        from shockwave_lab.localcluster import LocalCluster
        LocalCluster(root).down()
        import shutil
        shutil.rmtree(root, ignore_errors=True)


@pytest.mark.parametrize("version", [v for v in version_test_versions() if v != (host_version() or "22.05")])
def test_short_demo_on_other_version(version):
    """`shockwave demo --short --slurm V` (Shockwave run only): every job trains to its last epoch on Slurm V
    run from its Debian root, and the demo leaves no daemon and no mount behind."""
    import json

    from click.testing import CliRunner

    from slurm_shockwave.cli.main import cli

    r = CliRunner().invoke(cli, ["demo", "--short", "--shockwave-only", "--json", "--slurm", version,
                                 "--round-seconds", "2", "--timeout", "300"])
    assert r.exit_code == 0, r.output[-2000:]
    res = json.loads(r.output[r.output.index("{"):])
    assert res["where"] == "slurm"
    run = res["runs"]["shockwave"]
    assert run["real"]["completed"] == run["real"]["jobs"] == 5
    assert all(j["state"] == "COMPLETED" for j in run["jobs"])
    assert all(j["epochs"].split("/")[0] == j["epochs"].split("/")[1] for j in run["jobs"])
    assert str(res["root"]) not in Path("/proc/self/mountinfo").read_text()
    leftovers = [p for p in Path("/proc").iterdir() if p.name.isdigit() and _cmdline_has(p, str(res["root"]))]
    assert leftovers == [], "the demo left processes running"


def _cmdline_has(proc: Path, text: str) -> bool:
    try:
        return text.encode() in (proc / "cmdline").read_bytes()
    except OSError:
        return False

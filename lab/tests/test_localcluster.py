"""Integration tests on a real local Slurm cluster (root + apt needed, else skipped)."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from shockwave_lab.localcluster import LocalCluster
from shockwave_lab.localcluster.daemons import ProcId
from tests.slurm_fixtures import (JOB_USER, ODD_NAME, ensure_user, job_state, make_cluster, make_root,
                                  settle_after_requeue, slurm_cluster, wait_for)  # noqa: F401

pytestmark = pytest.mark.slurm


@pytest.fixture(scope="module")
def workdir(slurm_cluster):  # noqa: F811
    """A job directory every user can write (jobs run as root and as JOB_USER)."""
    path = slurm_cluster.root / "work"
    path.mkdir(exist_ok=True)
    os.chmod(path, 0o777)
    return path


def write_script(path: Path, body: str) -> Path:
    path.write_text("#!/bin/bash\n" + body + "\n")
    path.chmod(0o755)
    return path


def test_nodes_idle_with_gpus(slurm_cluster):  # noqa: F811
    nodes = slurm_cluster.cli.sinfo_nodes()
    assert [n.name for n in nodes] == ["node1", "node2"]
    assert all(n.state == "idle" and n.gpus == 4 and n.available for n in nodes)
    status = slurm_cluster.status()
    assert status["running"] and set(status["daemons"]) == {"munged", "slurmctld", "slurmd.node1", "slurmd.node2"}
    assert status["nodes"]["node1"]["gpus"] == 4
    assert len(set(status["ports"].values())) == 3
    conf = Path(slurm_cluster.env["SLURM_CONF"]).read_text()
    assert "NodeAddr=127.0.0.1" in conf
    if slurm_cluster.slurm_version.startswith("22."):   # a fatal parse error on 22.05
        assert "PreemptParameters" not in conf and "preempt_send_user_signal" in conf
    else:                                               # ... and the old spelling on 23.02+
        assert "PreemptParameters=send_user_signal" in conf and "preempt_send_user_signal" not in conf
    assert slurm_cluster.up() is False  # already running: reported, not restarted


def test_gpu_job_as_root(slurm_cluster, workdir):  # noqa: F811
    cli = slurm_cluster.cli
    script = write_script(workdir / "gpu.sh", 'echo "user=$(id -un) gpus=$CUDA_VISIBLE_DEVICES"')
    out = workdir / "root.out"
    job_id = cli.sbatch(script, ["--gres=gpu:2", "-J", "root-gpu", "-o", str(out), "-D", str(workdir)])
    job = wait_for(lambda: (j := job_state(cli, job_id)) and j.finished and j, what="root job")
    assert job.state == "COMPLETED" and job.gpus == 2
    text = out.read_text()
    assert "user=root" in text and len(text.split("gpus=")[1].strip().split(",")) == 2


def test_gpu_job_as_non_root_user(slurm_cluster, workdir):  # noqa: F811
    ensure_user(JOB_USER)
    script = write_script(workdir / "user.sh", 'echo "user=$(id -un) gpus=$CUDA_VISIBLE_DEVICES"')
    out = workdir / "user.out"
    argv = ["sbatch", "--parsable", "--gres=gpu:2", "-J", ODD_NAME, "-o", str(out), "-D", str(workdir), str(script)]
    proc = subprocess.run(argv, env=slurm_cluster.full_env(), user=JOB_USER, capture_output=True,
                          text=True, stdin=subprocess.DEVNULL, timeout=30, cwd=str(workdir))
    if slurm_cluster.bin_dir is not None:   # another version, through a chroot: only root can submit
        assert proc.returncode != 0 and "chroot" in proc.stderr
        return
    assert proc.returncode == 0, proc.stderr
    job_id = int(proc.stdout.strip())
    cli = slurm_cluster.cli
    job = wait_for(lambda: (j := job_state(cli, job_id)) and j.finished and j, what="user job")
    assert (job.state, job.user, job.name) == ("COMPLETED", JOB_USER, ODD_NAME)
    assert f"user={JOB_USER} gpus=" in out.read_text()


def test_hold_release_update_site_factor(slurm_cluster, workdir):  # noqa: F811
    cli = slurm_cluster.cli
    script = write_script(workdir / "later.sh", "sleep 60")
    job_id = cli.sbatch(script, ["--gres=gpu:1", "--begin=now+300", "-o", "/dev/null", "-D", str(workdir)])
    cli.hold([job_id])
    job = job_state(cli, job_id)
    assert (job.held, job.priority, job.state_reason) == (True, 0, "JobHeldAdmin")
    cli.release([job_id])
    assert not job_state(cli, job_id).held
    cli.scontrol_update([job_id], SiteFactor=5000)
    assert job_state(cli, job_id).priority == 5000  # all weights 0: priority = site factor
    # sprio (the only place 22.05 shows SiteFactor) lists a pending job only once its priority
    # factors are computed: at submit for an eligible job, else at the next PriorityCalcPeriod.
    # Not for a future --begin, a dependency or a just-released hold. Use an eligible job that
    # waits for resources (a 1-GPU blocker leaves no room for 2 nodes x 4 GPUs).
    blocker = cli.sbatch(script, ["--gres=gpu:1", "-o", "/dev/null", "-D", str(workdir)])
    wait_for(lambda: job_state(cli, blocker).running, what="blocker running")
    big = cli.sbatch(script, ["-N", "2", "--gres=gpu:4", "-o", "/dev/null", "-D", str(workdir)])
    cli.scontrol_update([big], SiteFactor=-7)
    [job] = cli.squeue_jobs(job_ids=[big], with_site_factor=True)
    assert (job.site_factor, job.priority, job.state) == (-7, 1, "PENDING")  # priority floor is 1
    ids = [job_id, blocker, big]
    cli.cancel(ids)
    assert wait_for(lambda: all(j.state == "CANCELLED" for j in cli.squeue_jobs(job_ids=ids)),
                    what="cancel")


def wait_running(cluster, job_id: int, what: str, timeout: float = 40) -> None:
    """Wait for the job to run; on a timeout say where it stands (state, reason, slurmctld log)."""
    try:
        wait_for(lambda: job_state(cluster.cli, job_id).running, timeout=timeout, what=what)
    except AssertionError as exc:
        job = job_state(cluster.cli, job_id)
        log = (cluster.root / "log" / "slurmctld.log").read_text(errors="replace").splitlines()
        mine = [line for line in log if f"JobId={job_id} " in line or f"JobId={job_id}\n" in line
                or line.endswith(f"JobId={job_id}")][-8:]
        for path in sorted((cluster.root / "log").glob("slurmd.*.log")):
            mine += [line for line in path.read_text(errors="replace").splitlines()
                     if f"job {job_id} " in line or f"[{job_id}." in line or f"JOB {job_id} " in line][-6:]
        raise AssertionError(f"{exc}; Slurm {cluster.slurm_version}; job: {job.state} {job.state_reason} "
                             f"held={job.held} flags={job.state_flags} restarts={job.restart_count}; "
                             f"log: {' | '.join(mine)}") from None


def test_requeue_requeuehold_and_signal(slurm_cluster, workdir):  # noqa: F811
    cli = slurm_cluster.cli
    marker = workdir / "usr1.txt"
    ready = workdir / "usr1.ready"
    script = write_script(workdir / "loop.sh", f"trap 'echo usr1 >> {marker}' USR1\n"
                          f"echo ready > {ready}\nwhile true; do sleep 0.2; done")
    job_id = cli.sbatch(script, ["--gres=gpu:2", "--requeue", "-o", "/dev/null", "-D", str(workdir)])
    wait_for(lambda: job_state(cli, job_id).running, what="job to run")
    # RUNNING comes before the script has set its trap (a chroot's job starts slower): wait for it
    wait_for(lambda: ready.exists(), what="trap set in the job script")
    cli.signal([job_id], "USR1")  # --batch: the trap in the batch shell sees it
    wait_for(lambda: marker.exists(), what="USR1 in the batch script")

    cli.requeue([job_id])
    job = wait_for(lambda: (j := job_state(cli, job_id)).pending and j, what="requeued job pending")
    assert job.restart_count == 1 and not job.held
    settle_after_requeue()                          # 24.11: not in the second of the requeue
    cli.scontrol_update([job_id], StartTime="now")  # skip the cred_expire+1 s BeginTime wait
    wait_running(slurm_cluster, job_id, "restart after StartTime=now")

    cli.requeue([job_id], hold=True)
    job = wait_for(lambda: (j := job_state(cli, job_id)).pending and j, what="requeuehold pending")
    assert job.held and job.restart_count == 2 and job.state_reason == "JobHeldUser"
    cli.hold([job_id])  # turn the user hold into an admin hold
    assert job_state(cli, job_id).state_reason == "JobHeldAdmin"
    settle_after_requeue()
    cli.release([job_id])
    cli.scontrol_update([job_id], StartTime="now")
    wait_running(slurm_cluster, job_id, "restart after release")
    cli.cancel([job_id])
    wait_for(lambda: job_state(cli, job_id).finished, what="cancel")


def test_second_cluster_and_up_down_cycles(slurm_cluster):  # noqa: F811
    """A second cluster runs beside the fixture's on other ports; down() leaves none of its
    daemons; a second up/down cycle works; status()/down() work from a fresh process."""
    root = make_root("shockwave-cycle-")
    try:
        cluster = make_cluster(root, slurm_cluster.slurm_version, nodes=1, gpus_per_node=2, cpus_per_node=2)
        all_pids: list[ProcId] = []
        for _cycle in range(2):
            assert cluster.up(timeout=60) is True
            state = json.loads((root / "cluster.json").read_text())
            procs = [ProcId.from_json(v) for v in state["daemons"].values()]
            assert len(procs) == 3 and all(p.alive() for p in procs)
            assert not set(state["ports"].values()) & set(slurm_cluster.status()["ports"].values())
            [node] = cluster.cli.sinfo_nodes()
            assert (node.state, node.gpus) == ("idle", 2)
            all_pids += procs
            fresh = subprocess.run(
                [sys.executable, "-c", "import json,sys; from shockwave_lab.localcluster import "
                 "LocalCluster; print(json.dumps(LocalCluster(sys.argv[1]).status()))", str(root)],
                capture_output=True, text=True, timeout=60, check=True)
            assert json.loads(fresh.stdout)["running"] is True
            assert cluster.down() == []
            assert not any(p.alive() for p in all_pids)
            assert cluster.status()["running"] is False
            mounts = Path("/proc/self/mountinfo").read_text()
            assert f" {root} " not in mounts and f"{root} " not in mounts.replace(str(root) + "/", "")
            if cluster.chroot is not None:   # its bind mount is gone; the shared ones stay for the fixture's
                assert f"{cluster.chroot.path}{root} " not in mounts
                assert f"{cluster.chroot.path}/proc " in mounts
        assert cluster.down() == []  # idempotent
        assert slurm_cluster.status()["running"]  # the fixture's cluster is untouched
    finally:
        LocalCluster(root=root).down()
        shutil.rmtree(root, ignore_errors=True)

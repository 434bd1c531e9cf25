"""Pure tests (no Slurm, no root) of the local cluster's accounting option: slurm.conf and slurmdbd.conf, the
associations loaded with sacctmgr, the ports and daemons it counts, running commands as a user."""
from __future__ import annotations

from pathlib import Path

import pytest

from shockwave_lab.localcluster import LocalCluster
from shockwave_lab.localcluster import statefile
from shockwave_lab.localcluster.accounting import as_user, render_associations, render_slurmdbd_conf
from shockwave_lab.localcluster.config import ClusterSettings, Paths, render_slurm_conf


def settings(accounting: bool, version: str = "22.05") -> ClusterSettings:
    return ClusterSettings(nodes=1, gpus_per_node=8, cpus_per_node=8, partition="gpu", cluster_name="t",
                           ctld_port=20001, node_ports=(20002,), slurm_version=version, accounting=accounting,
                           dbd_port=20003 if accounting else 0, db_port=20004 if accounting else 0,
                           accounts=(("teama", 3), ("teamb", 1)) if accounting else (),
                           users=(("sw-ann", "teama"), ("sw-carl", "teama"), ("sw-bob", "teamb")) if accounting
                           else ())


@pytest.mark.parametrize("version", ["22.05", "24.11", "26.05"])
def test_slurm_conf_with_and_without_accounting(version):
    paths = Paths(Path("/x"))
    plain = render_slurm_conf(paths, settings(False, version)).splitlines()
    assert "AccountingStorageType=accounting_storage/none" in plain
    assert not any("TRESBillingWeights" in line for line in plain)
    conf = render_slurm_conf(paths, settings(True, version)).splitlines()
    for line in ("AccountingStorageType=accounting_storage/slurmdbd", "AccountingStoragePort=20003",
                 "AccountingStoragePass=/x/munge/munge.sock", "AccountingStorageEnforce=associations,limits",
                 "AccountingStorageTRES=gres/gpu", "PriorityCalcPeriod=1"):
        assert line in conf
    assert "AccountingStorageType=accounting_storage/none" not in conf
    partition = next(line for line in conf if line.startswith("PartitionName=gpu "))
    assert partition.endswith(' TRESBillingWeights="GRES/gpu=1.0"')      # usage is billed in GPU-seconds


def test_slurmdbd_conf_and_associations():
    s = settings(True)
    conf = render_slurmdbd_conf(Paths(Path("/x")), s, "pw").splitlines()
    for line in ("AuthInfo=socket=/x/munge/munge.sock", "DbdPort=20003", "StorageHost=127.0.0.1", "StoragePort=20004",
                 "StoragePass=pw", "PidFile=/x/run/slurmdbd.pid", "LogFile=/x/log/slurmdbd.log"):
        assert line in conf
    assert render_associations(s).splitlines() == [
        "Cluster - 't'", "Parent - 'root'", "Account - 'teama':Fairshare=3", "Account - 'teamb':Fairshare=1",
        "Parent - 'teama'", "User - 'sw-ann':Fairshare=1", "User - 'sw-carl':Fairshare=1",
        "Parent - 'teamb'", "User - 'sw-bob':Fairshare=1"]


def test_the_cluster_counts_the_database_and_slurmdbd(tmp_path):
    c = LocalCluster(tmp_path / "c", nodes=1, accounts={"teama": 3}, users={"sw-ann": "teama"})
    assert c._params["accounting"] and c._params["users"] == (("sw-ann", "teama"),)
    assert not LocalCluster(tmp_path / "d", nodes=1)._params["accounting"]
    assert LocalCluster(tmp_path / "e", nodes=1, accounting=True)._params["accounting"]
    with pytest.raises(ValueError, match="not created"):
        LocalCluster(tmp_path / "f", users={"sw-ann": "nope"})
    paths = Paths(tmp_path / "c")
    paths.root.mkdir()
    statefile.write(paths, paths.root, settings(True), {}, "up")
    state = statefile.read(paths)
    assert state["ports"] == {"slurmctld": 20001, "node1": 20002, "slurmdbd": 20003, "mariadbd": 20004}
    assert statefile.settings_from(state) == settings(True)
    # munged, slurmctld, one slurmd, mariadbd, slurmdbd: all five must be alive for "up"
    assert not statefile.all_alive({**state, "daemons": {f"d{i}": {"pid": 1, "start_time": 0} for i in range(3)}})


def test_commands_as_a_user_on_the_host_and_in_a_root(tmp_path):
    assert as_user(["sbatch", "x.sh"], "root") == ["runuser", "-u", "root", "--", "sbatch", "x.sh"]
    (tmp_path / "usr/bin").mkdir(parents=True)
    (tmp_path / "usr/bin/sbatch").write_text("")
    argv = as_user(["sbatch", "x.sh"], "root", tmp_path, cwd="/w")
    assert argv == ["chroot", "--userspec=0:0", str(tmp_path), "/usr/bin/env", "-C", "/w", "/usr/bin/sbatch", "x.sh"]

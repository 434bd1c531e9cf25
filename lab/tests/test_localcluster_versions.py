"""Pure tests (no Slurm, no root) of what the local cluster does differently per Slurm version:
config keys, cgroup.conf, the chroot wrappers and version choice."""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from shockwave_lab.localcluster import LocalCluster
from shockwave_lab.localcluster.chroot import SUITES, ChrootRoot, RootError, major_minor
from shockwave_lab.localcluster.config import (ClusterSettings, Paths, render_cgroup_conf,
                                                 render_slurm_conf)


def settings(version: str) -> ClusterSettings:
    return ClusterSettings(nodes=2, gpus_per_node=4, cpus_per_node=4, partition="gpu",
                           cluster_name="t", ctld_port=20001, node_ports=(20002, 20003),
                           slurm_version=version)


@pytest.mark.parametrize("version,new", [("22.05", False), ("23.02", True), ("24.11", True), ("26.05", True)])
def test_preempt_signal_key_follows_version(version, new):
    conf = render_slurm_conf(Paths(Path("/x")), settings(version))
    lines = conf.splitlines()
    assert ("PreemptParameters=send_user_signal" in lines) is new
    assert ("SlurmctldParameters=preempt_send_user_signal" in lines) is not new
    assert ("SwitchType=switch/none" in lines) is not new
    assert "NodeName=node1 NodeHostname=localhost NodeAddr=127.0.0.1 Port=20002" in conf


@pytest.mark.parametrize("version,disabled", [("22.05", False), ("23.11", False), ("24.05", True),
                                              ("24.11", True), ("26.05", True)])
def test_cgroup_conf_follows_version(version, disabled):
    text = render_cgroup_conf(Paths(Path("/x")), version)
    assert (text == "CgroupPlugin=disabled\n") is disabled
    if not disabled:
        assert "CgroupPlugin=cgroup/v1" in text and "CgroupMountpoint=/x/fakecg" in text


def test_versions_and_suites():
    assert SUITES == {"22.05": "bookworm", "24.11": "trixie", "26.05": "forky"}
    assert major_minor("24.11.5") == "24.11" and major_minor("26.05") == "26.05"
    assert ChrootRoot("24.11.5", "/r").path == Path("/r/trixie")
    with pytest.raises(RootError):
        ChrootRoot("23.02", "/r")


def test_host_version_needs_no_chroot(tmp_path):
    c = LocalCluster(tmp_path / "c", slurm=None)
    assert c.chroot is None and c.bin_dir is None and set(c.env) == {"SLURM_CONF"}


def test_other_version_runs_from_root(tmp_path):
    from shockwave_lab.localcluster.chroot import host_version
    other = next(v for v in SUITES if v != host_version())
    c = LocalCluster(tmp_path / "c", slurm=other, roots_dir=tmp_path / "roots")
    assert c.chroot is not None and c.slurm_version == other
    assert c.bin_dir == tmp_path / "c" / "bin"
    assert c.env["PATH"].split(":")[0] == str(c.bin_dir)
    assert c.cli.bin_dir == str(c.bin_dir)


def test_wrappers_run_the_roots_binary_via_chroot(tmp_path):
    root = ChrootRoot("24.11", tmp_path)
    (root.path / "usr/bin").mkdir(parents=True)
    (root.path / "usr/sbin").mkdir(parents=True)
    for rel in ("usr/bin/squeue", "usr/sbin/slurmctld"):
        (root.path / rel).write_text("#!/bin/sh\n")
        (root.path / rel).chmod(0o755)
    bin_dir = tmp_path / "cluster" / "bin"
    root.write_wrappers(bin_dir)
    assert sorted(p.name for p in bin_dir.iterdir()) == ["slurmctld", "squeue"]
    text = (bin_dir / "squeue").read_text()
    assert f"exec chroot '{root.path}' /usr/bin/env -C \"$d\" /usr/bin/squeue \"$@\"" in text
    assert os.access(bin_dir / "squeue", os.X_OK)
    assert subprocess.run(["sh", "-n", str(bin_dir / "squeue")]).returncode == 0   # valid shell

"""`shockwave cluster up|status|down` wire the local cluster to the CLI."""
import json
import os

import pytest
from click.testing import CliRunner

from slurm_shockwave.cli.main import cli
from tests.slurm_fixtures import make_root

pytestmark = pytest.mark.slurm


def test_up_status_down(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("needs root")
    root = make_root("shockwave-cli-") / "c"
    r = CliRunner()
    up = r.invoke(cli, ["cluster", "up", "--root", str(root), "--nodes", "1", "--gpus-per-node", "2", "--json"])
    if up.exit_code == 2 and "Slurm" in up.output:
        pytest.skip(up.output.strip())
    try:
        assert up.exit_code == 0, up.output
        env = json.loads(up.output)["env"]
        assert env["SLURM_CONF"].startswith(str(root))
        st = json.loads(r.invoke(cli, ["cluster", "status", "--root", str(root), "--json"]).output)
        assert st["running"] and all(d["alive"] for d in st["daemons"].values())
        assert {n["gpus"] for n in st["nodes"].values()} == {2}
    finally:
        down = r.invoke(cli, ["cluster", "down", "--root", str(root), "--json"])
    assert down.exit_code == 0 and json.loads(down.output)["still_alive"] == []
    st = json.loads(r.invoke(cli, ["cluster", "status", "--root", str(root), "--json"]).output)
    assert not st["running"]

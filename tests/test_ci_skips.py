"""Under CI=true a skipped test fails the run (conftest.py), so a green CI run means the Slurm tests ran."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def run_pytest(tmp_path, ci: str | None, *args: str):
    test = tmp_path / "test_probe_skip.py"
    test.write_text("import pytest\n\ndef test_needs_slurm():\n    pytest.skip('no Slurm here')\n")
    (tmp_path / "conftest.py").write_text((ROOT / "conftest.py").read_text()
                                          .replace('pytest_plugins = ["tests.slurm_fixtures"]', ""))
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    if ci is not None:
        env["CI"] = ci
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args, str(test)],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)


XDIST_AS_CI_RUNS = ("-n", "2", "--dist", "loadfile", "--no-loadscope-reorder")  # .ci/run


@pytest.mark.parametrize("args", [(), XDIST_AS_CI_RUNS], ids=["one-process", "xdist-as-ci-runs"])
def test_a_skip_fails_under_ci(tmp_path, args):
    r = run_pytest(tmp_path, "true", *args)
    assert r.returncode == 1, r.stdout
    assert "skipped under CI=true" in r.stdout and "no Slurm here" in r.stdout


def test_a_skip_is_a_skip_outside_ci(tmp_path):
    r = run_pytest(tmp_path, None)
    assert r.returncode == 0 and "1 skipped" in r.stdout, r.stdout

"""The test suite removes the directories it made, but never deletes through something mounted in one."""
import os
import subprocess
import tempfile
from pathlib import Path

import pytest

from tests.slurm_fixtures import remove_test_roots


def test_roots_are_removed(tmp_path):
    roots = [Path(tempfile.mkdtemp(prefix="shockwave-roots-test-")) for _ in range(2)]
    (roots[0] / "sub").mkdir()
    (roots[0] / "sub" / "f").write_text("x")
    assert remove_test_roots(roots) == [] and roots == []


@pytest.mark.skipif(os.geteuid() != 0, reason="bind mounts need root")
def test_a_root_with_a_mount_under_it_is_left_alone(tmp_path):
    keep = tmp_path / "keep"
    keep.mkdir()
    (keep / "precious").write_text("do not delete")
    root = Path(tempfile.mkdtemp(prefix="shockwave-roots-test-"))
    (root / "bound").mkdir()
    subprocess.run(["mount", "--bind", str(keep), str(root / "bound")], check=True, timeout=30)
    try:
        assert remove_test_roots([root]) == [root]
        assert (keep / "precious").read_text() == "do not delete" and root.exists()
    finally:
        subprocess.run(["umount", str(root / "bound")], check=True, timeout=30)
    assert remove_test_roots([root]) == [] and not root.exists()

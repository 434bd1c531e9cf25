import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

pytest_plugins = ["tests.slurm_fixtures"]


#: the suite's signal handlers while a session runs (entered at configure, left at unconfigure)
_TEARDOWN = []


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config):
    """SIGTERM or SIGHUP to a test run (CI's timeout, a kill of the run's process group, a closed terminal) ends it as
    Ctrl-C does: pytest finalizes the fixtures, which stop every Slurm cluster the tests started, by pid.  Python's
    default for those two signals ends a worker at once and left the test clusters' daemons running.  A later signal
    is reported and ignored until the teardown ends (`shockwave_lab.localcluster.signals`)."""
    from shockwave_lab.localcluster.signals import orderly_teardown
    ctx = orderly_teardown(interrupt=True)
    ctx.__enter__()
    _TEARDOWN.append(ctx)


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config):
    while _TEARDOWN:
        _TEARDOWN.pop().__exit__(None, None, None)


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() == "true"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """Under CI=true a skipped test is a failure: a green CI run must mean every test (above all the real-Slurm
    ones) ran."""
    outcome = yield
    report = outcome.get_result()
    if in_ci() and report.skipped and not hasattr(report, "wasxfail"):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        report.outcome = "failed"
        report.longrepr = f"skipped under CI=true (a skip is a failure in CI): {reason}"


def pytest_collection_modifyitems(config, items):
    """The modules with real-Slurm tests run first (a stable sort: each module's tests keep their order).  They are the
    long ones (2-3 minutes each for the longest): `.ci/run` runs the suite on two workers a file at a time, in this
    order (pytest-xdist, `-n 2 --dist loadfile --no-loadscope-reorder`), and with the long files first both workers
    end together on short ones."""
    slurm = {item.nodeid.split("::")[0] for item in items if item.get_closest_marker("slurm")}
    items.sort(key=lambda item: item.nodeid.split("::")[0] not in slurm)


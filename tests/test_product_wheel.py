"""The product alone (docs/architecture.md, "Two buildings"): the `slurm-shockwave` wheel, built from a copy of this
checkout and installed by itself in a fresh virtualenv (its dependencies from the package index, never the lab), runs
its commands and the prolog/epilog hook, and carries nothing of the lab: no `shockwave_lab`, no traces, no
throughput or profile data, no matplotlib.  About 15 s on 2 cores (the build ~3 s, the install ~9 s)."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PRODUCT_COMMANDS = {"controller", "status", "explain", "events"}
LAB_COMMANDS = {"simulate", "demo", "replay", "cluster", "report", "trace", "grafana", "whatif"}
#: what the checkout holds that a build neither needs nor may see stale copies of
SKIP = shutil.ignore_patterns(".git", ".venv", "build", "dist", "*.egg-info", "__pycache__", ".mypy_cache",
                              ".pytest_cache", ".hypothesis", "results", "shared")


class Product:
    def __init__(self, tmp: Path, wheel: Path, venv: Path):
        self.tmp, self.wheel, self.venv = tmp, wheel, venv
        self.bin = venv / "bin"
        self.env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
        self.env["PATH"] = f"{self.bin}{os.pathsep}{self.env.get('PATH', '/usr/bin:/bin')}"

    def run(self, *argv: str, check: bool = True, **env: str) -> subprocess.CompletedProcess:
        """A command of the fresh venv, from a directory outside the checkout (so nothing is imported from it)."""
        r = subprocess.run([str(self.bin / argv[0]), *argv[1:]], cwd=self.tmp, env={**self.env, **env},
                           capture_output=True, text=True, timeout=120)
        assert not check or r.returncode == 0, f"{argv}: rc={r.returncode}\n{r.stdout}\n{r.stderr}"
        return r

    def python(self, code: str, check: bool = True) -> subprocess.CompletedProcess:
        return self.run("python", "-I", "-c", code, check=check)


@pytest.fixture(scope="module")
def product(tmp_path_factory) -> Product:
    tmp = tmp_path_factory.mktemp("product")
    src = tmp / "src"                   # a copy: pip builds in the tree, and a stale build/ there would leak
    shutil.copytree(ROOT, src, ignore=SKIP, symlinks=True)
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "--no-input"]
    r = subprocess.run([*pip, "wheel", "--no-deps", "-q", "-w", str(tmp / "dist"), str(src)],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    (wheel,) = (tmp / "dist").glob("slurm_shockwave-*.whl")
    base = "/usr/bin/python3" if os.access("/usr/bin/python3", os.X_OK) else sys._base_executable
    venv = tmp / "venv"
    subprocess.run([base, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    # the wheel alone: its dependencies from the index (pip's own cache), nothing from this checkout or the lab
    r = subprocess.run([*pip, "--python", str(venv / "bin" / "python"), "install", "-q", str(wheel)],
                       capture_output=True, text=True, timeout=600, cwd=tmp)
    assert r.returncode == 0, r.stdout + r.stderr
    return Product(tmp, wheel, venv)


def test_the_wheel_holds_the_product_and_nothing_of_the_lab(product):
    names = zipfile.ZipFile(product.wheel).namelist()
    tops = {n.split("/")[0] for n in names}
    assert tops == {"solver", "slurm_shockwave", product.wheel.name.split("-py")[0] + ".dist-info"}, tops
    assert [n for n in names if "shockwave_lab" in n] == []
    assert [n for n in names if n.endswith(".trace")] == []
    data = [n for n in names if not n.endswith(".py") and ".dist-info/" not in n]
    assert [n for n in data if any(w in n for w in ("throughput", "profile", "reference_results"))] == []
    assert "slurm_shockwave/cli/main.py" in names and "solver/policies/registry.py" in names
    metadata = zipfile.ZipFile(product.wheel).read(
        next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    requires = [line for line in metadata.splitlines() if line.startswith("Requires-Dist:")]
    assert requires and not [r for r in requires if "matplotlib" in r or "lab" in r], requires


def test_shockwave_lists_the_product_commands_only(product):
    out = product.run("shockwave", "--help").stdout
    listed = {line.split()[0] for line in out.partition("Commands:")[2].splitlines() if line.strip()}
    assert listed == PRODUCT_COMMANDS, out
    assert not LAB_COMMANDS & listed
    r = product.run("shockwave", "simulate", "--help", check=False)
    assert r.returncode != 0 and "No such command" in r.stderr


def test_the_controller_and_the_wrapper_start(product):
    assert "--config" in product.run("shockwave", "controller", "check", "--help").stdout
    assert "shockwave-run" in product.run("shockwave-run", "--help").stdout
    for cmd in ("status", "explain", "events"):
        product.run("shockwave", cmd, "--help")
    # the example config validates with the product's own policies (no baseline from the lab needed)
    r = product.run("shockwave", "controller", "check", "--syntax-only", "--config",
                    str(ROOT / "docs" / "config.example.toml"))
    assert "config ok" in r.stdout.lower(), r.stdout + r.stderr


def test_the_lab_and_matplotlib_are_not_there(product):
    for mod in ("shockwave_lab", "matplotlib"):
        r = product.python(f"import {mod}", check=False)
        assert r.returncode != 0 and "ModuleNotFoundError" in r.stderr, (mod, r.stderr)
    r = product.python("import solver, slurm_shockwave, slurm_shockwave.controller.loop; "
                       "print(slurm_shockwave.__file__)")
    assert str(product.venv) in r.stdout  # the installed copy, not the checkout


def test_the_prolog_hook_runs_with_the_venv_python(product):
    """Installed as prolog_epilog/README.md says, its two shared modules copied from the installed wheel, the hook
    run by the venv's python records a managed job's prolog, and the product's `shockwave events` reads it back."""
    hooks, store = product.tmp / "hooks", product.tmp / "store"
    hooks.mkdir()
    store.mkdir(mode=0o755)
    for name in ("shockwave-hook.sh", "shockwave_hook.py"):
        shutil.copy(ROOT / "prolog_epilog" / name, hooks / name)
        os.chmod(hooks / name, 0o755)
    pkg = Path(product.python("import os, slurm_shockwave; print(os.path.dirname(slurm_shockwave.__file__))")
               .stdout.strip())
    for source, copy in (("events/layout.py", "shockwave_layout.py"), ("slurm/hints.py", "shockwave_hints.py")):
        shutil.copy(pkg / source, hooks / copy)
        os.chmod(hooks / copy, 0o644)
    log = product.tmp / "hook.log"
    env = {"SHOCKWAVE_STORE": str(store), "SHOCKWAVE_HOOK_PYTHON": str(product.bin / "python"),
           "SHOCKWAVE_HOOK_LOG": str(log), "SLURM_SCRIPT_CONTEXT": "prolog_slurmd", "SLURM_JOB_ID": "77",
           "SLURM_JOB_COMMENT": "shockwave", "SLURMD_NODENAME": "n1"}
    r = subprocess.run([str(hooks / "shockwave-hook.sh")], env={**product.env, **env}, cwd=product.tmp,
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 0
    assert (store / "_system" / "77.jsonl").exists(), log.read_text() if log.exists() else "(no hook log)"
    out = product.run("shockwave", "events", "77", "--store", str(store), "--json").stdout
    assert '"prolog_start"' in out and '"rejected": []' in out, out

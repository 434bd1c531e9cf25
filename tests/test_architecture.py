"""The shape of the code (docs/architecture.md): data flows one way, Slurm lives in one subpackage, the decision
core is pure, no import cycle, no file over 400 lines.  Read from the source with `ast`, so it runs everywhere."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("solver", "slurm_shockwave")
MAX_LINES = 400
#: modules whose use means reading files or running programs
FILE_MODULES = ("tomllib", "json", "pathlib", "subprocess", "shutil", "yaml", "pickle", "csv")


def modules() -> dict[str, Path]:
    out = {}
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join(parts)] = path
    return out


def imports(name: str, path: Path) -> set[str]:
    """Every project module `name` imports (module level and inside functions), resolved to a known module."""
    known = modules()
    is_pkg = path.name == "__init__.py"
    base = name.split(".") if is_pkg else name.split(".")[:-1]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        targets = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            mod = node.module or ""
            if node.level:
                prefix = base[:len(base) - node.level + 1]
                mod = ".".join(prefix + ([mod] if mod else []))
            # `from pkg import sub` imports the submodule; `from pkg import name` imports pkg itself
            targets = [f"{mod}.{a.name}" if f"{mod}.{a.name}" in known else mod for a in node.names]
        for t in targets:
            while t and t not in known:
                t = t.rpartition(".")[0]
            if t and t != name:
                found.add(t)
    return found


def graph() -> dict[str, set[str]]:
    return {name: imports(name, path) for name, path in modules().items()}


def _under(name: str, prefixes) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def _importers(prefixes, of) -> list[str]:
    return sorted(f"{m} -> {t}" for m, ts in graph().items() if _under(m, prefixes) for t in ts if _under(t, (of,)))


def test_the_loop_the_daemon_and_the_core_never_import_the_slurm_subpackage():
    assert _importers(("solver", "slurm_shockwave.controller", "slurm_shockwave.journal", "shockwave_lab.sim",
                       "slurm_shockwave.backends"), "slurm_shockwave.slurm") == []


def test_no_backend_reaches_up_into_the_controller():
    assert _importers(("slurm_shockwave.slurm", "shockwave_lab.sim", "slurm_shockwave.backends",
                       "slurm_shockwave.journal"), "slurm_shockwave.controller") == []


def test_the_decision_core_is_pure():
    """solver/ knows nothing of slurm_shockwave and reads no files (it is given plain data)."""
    bad = _importers(("solver",), "slurm_shockwave")
    for name, path in modules().items():
        if not _under(name, ("solver",)):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call):
                f = node.func
                if isinstance(f, ast.Name) and f.id == "open" or isinstance(f, ast.Attribute) and (
                        f.attr in ("read_text", "read_bytes", "open") or
                        f.attr in ("load", "loads") and isinstance(f.value, ast.Name) and f.value.id in FILE_MODULES):
                    bad.append(f"{name}:{node.lineno} reads a file")
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
                bad += [f"{name}:{node.lineno} imports {n}" for n in names if n.split(".")[0] in FILE_MODULES]
    assert bad == []


def test_no_import_cycle():
    g = graph()
    index, low, stack, on, cycles = {}, {}, [], set(), []

    def visit(v):                       # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in g.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                cycles.append(sorted(comp))
    for v in sorted(g):
        if v not in index:
            visit(v)
    assert cycles == []


@pytest.mark.parametrize("folder", ["solver", "slurm_shockwave", "tests", "bench", "prolog_epilog"])
def test_no_file_over_400_lines(folder):
    long = {str(p.relative_to(ROOT)): n for p in (ROOT / folder).rglob("*.py")
            if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert long == {}

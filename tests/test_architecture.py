"""The shape of the code (docs/architecture.md): two buildings, the product (solver/, slurm_shockwave/, the
prolog/epilog hook) and the lab (lab/shockwave_lab/) that leans on it, never the other way; data flows one way,
Slurm lives in one subpackage, the decision core is pure, no import cycle between modules or between packages, no
file over 400 lines, and the product stays small.  Read from the source with `ast`, so it runs everywhere.

`python tests/test_architecture.py` prints the module and line counts of each building (docs/architecture.md's
table)."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
#: each building's packages, by import name, at their folders (the lab's sits under lab/)
PRODUCT = {"solver": ROOT / "solver", "slurm_shockwave": ROOT / "slurm_shockwave"}
LAB = {"shockwave_lab": ROOT / "lab" / "shockwave_lab"}
PACKAGES = {**PRODUCT, **LAB}
#: the product's files outside its packages: the prolog/epilog hook (standard library only)
PRODUCT_SCRIPTS = ("prolog_epilog",)
MAX_LINES = 400
#: the guard on the product's size (issue 32's target: about 12k lines in at most about 90 modules; the product
#: was 12,499 lines before `ruff format`, 13,709 after it: the formatter's one-argument-per-line calls and
#: signatures, docs/architecture.md "Sizes")
PRODUCT_MAX_LINES, PRODUCT_MAX_MODULES = 14_000, 95
#: issue 33 and 35 added to the core: step-level resume and the ranks' agreement (wrapper/), the per-job checkpoint
#: signal and submitit jobs (slurm/), GPU share and fairness per account and user (controller/): about 480 lines
PRODUCT_MAX_LINES += 500
#: issue 34 (elastic GPU counts) added a stage to the core (solver/elastic.py and the loop's part), the Slurm resize
#: (slurm/resize.py, the base count in the mark, the hint) and the global batch across counts (wrapper/): about 800
#: lines (14,456 before, 15,259 after)
PRODUCT_MAX_LINES += 1_000
#: issue 34 again: a resized or moved job's new nodes reserved from its signal to its restart (slurm/reservations.py,
#: the create and delete in commands.py, the controller's uninstall): one module, about 130 lines (15,616 after)
PRODUCT_MAX_LINES, PRODUCT_MAX_MODULES = PRODUCT_MAX_LINES + 200, PRODUCT_MAX_MODULES + 1
#: issue 35 item 1's "whether it may be preempted": a running job that may not be (Slurm's --no-requeue, a job spec's
#: `preemptible: false`) is pinned in every round (solver/pinned.py, the loop's, the view's and the enactor's part):
#: one module, about 120 lines (15,789 after)
PRODUCT_MAX_LINES, PRODUCT_MAX_MODULES = PRODUCT_MAX_LINES + 150, PRODUCT_MAX_MODULES + 1
#: moves to a faster GPU type when they pay (issue 34/35's typed traces: a long job backfilled onto K80s stayed there):
#: one stage (solver/type_moves.py), the loop's part, the Slurm view's speeds per type and the move's enactment
#: (slurm/gpu_types.py), the site's `gpu_type_speeds`: one module, about 240 lines (16,091 after); then status's remaining
#: time at the GPUs a job gets (statusview.py), 16 lines (16,107), and `controller check`'s line on speeds that miss a
#: type of the partition (slurm/preflight.py), 14 lines (16,121)
PRODUCT_MAX_LINES, PRODUCT_MAX_MODULES = PRODUCT_MAX_LINES + 275, PRODUCT_MAX_MODULES + 1
#: a job's own speed on each GPU type on Slurm (its `speed=` hint, its rates measured on each type it ran on:
#: slurm/type_speeds.py), and its waiting view read on the type its events were measured on: one module, 160 lines
#: (16,279); the type moves' Prometheus counter, 5 lines, and the gate's keep of a job whose GPUs a start that went back
#: out would leave idle (solver/preemption.py), 23 lines (16,307)
PRODUCT_MAX_LINES, PRODUCT_MAX_MODULES = PRODUCT_MAX_LINES + 190, PRODUCT_MAX_MODULES + 1
#: each job's speed per type and where each comes from in `explain` and `status --json` (slurm/type_speeds.py
#: `sourced`, `describe`), 30 lines; one base for the two tables of measured rates kept in the state, which had
#: repeated their `keep`, and a tolerant read of the elastic one (slurm/kept_rates.py): one module, 34 lines (16,371)
PRODUCT_MAX_LINES, PRODUCT_MAX_MODULES = PRODUCT_MAX_LINES + 64, PRODUCT_MAX_MODULES + 1
#: a move or resize on its way seen where it goes (slurm/moving.py: a job requeued for a move was decided afresh as a
#: waiting job in the next round and could be placed back on the type it left): one module, 106 lines (16,477)
PRODUCT_MAX_LINES, PRODUCT_MAX_MODULES = PRODUCT_MAX_LINES + 106, PRODUCT_MAX_MODULES + 1
#: the gate keeps a job that restarted in the round before from the guard's reservation (solver/preemption.py, the
#: loop's run set of the round before): 7 lines (16,492)
PRODUCT_MAX_LINES += 7
#: the gate keeps no restart-bound job from a start past its latest fair start when its own slack covers that job (the
#: elastic study's Saturn workloads; solver/preemption.py), and the elastic stage lends no GPU to a job the restart
#: bound keeps, a job's first change free (solver/elastic.py): 34 lines (16,526)
PRODUCT_MAX_LINES += 34
#: a running job whose wrapper reported its run's end is neither signalled nor requeued while Slurm has not heard
#: (slurm/enact.py `RUN_END_S`: a requeue in a slurmctld outage ran a finished job again), less a shorter steer call
#: and node-pin error: 9 lines (16,535); its window starts again after a read of the queue that failed (a 60-s outage
#: outlasted it: slurm/jobview.py `RunEnds`): 20 lines (16,555); only a run that finished, not one whose own requeue
#: failed (events/progress.py `run_ended`): 1 line (16,556)
PRODUCT_MAX_LINES += 30
#: the framework integrations (wrapper/integrations/: Lightning, Hugging Face, Accelerate, submitit), counted apart:
#: optional modules, each imported only by users of its framework
INTEGRATIONS = ROOT / "slurm_shockwave" / "wrapper" / "integrations"
INTEGRATIONS_MAX_LINES, INTEGRATIONS_MAX_MODULES = 1_000, 6
#: package-level cycles known and not yet untangled (none may appear in the product, nor a new one in the lab)
KNOWN_PACKAGE_CYCLES: list[set[str]] = []
#: modules whose use means reading files or running programs
FILE_MODULES = ("tomllib", "json", "pathlib", "subprocess", "shutil", "yaml", "pickle", "csv")


def modules(packages: dict[str, Path] | None = None) -> dict[str, Path]:
    out = {}
    for pkg, folder in (PACKAGES if packages is None else packages).items():
        for path in sorted(folder.rglob("*.py")):
            parts = [pkg, *path.relative_to(folder).with_suffix("").parts]
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join(parts)] = path
    return out


def raw_imports(path: Path) -> list[tuple[int, str, int]]:
    """(line, module as written, relative level) of every import in a file, module level and inside functions;
    `import_module("x")` / `__import__("x")` with a literal name count too."""
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name, 0) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            mod = node.module or ""
            out += [(node.lineno, f"{mod}.{a.name}" if mod else a.name, node.level) for a in node.names]
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant) and isinstance(
                node.args[0].value, str) and getattr(node.func, "attr", getattr(node.func, "id", "")) in (
                "import_module", "__import__"):
            out.append((node.lineno, node.args[0].value, 0))
    return out


def imports(name: str, path: Path, known) -> set[str]:
    """Every project module `name` imports (module level and inside functions), resolved to a known module:
    `from pkg import sub` imports the submodule, `from pkg import name` the package itself."""
    base = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    found = set()
    for _, target, level in raw_imports(path):
        if level:
            target = ".".join(base[:len(base) - level + 1] + [target])
        while target and target not in known:
            target = target.rpartition(".")[0]
        if target and target != name:
            found.add(target)
    return found


_GRAPH: dict[str, set[str]] = {}


def graph() -> dict[str, set[str]]:
    """module -> the project modules it imports, over both buildings."""
    if not _GRAPH:
        known = modules()
        _GRAPH.update({name: imports(name, path, known) for name, path in known.items()})
    return _GRAPH


def _under(name: str, prefixes) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def _importers(prefixes, of) -> list[str]:
    return sorted(f"{m} -> {t}" for m, ts in graph().items() if _under(m, prefixes) for t in ts if _under(t, (of,)))


def package_of(module: str) -> str:
    """A module's package in the package graph: the decision core is one (`solver`); in slurm_shockwave and
    shockwave_lab each subpackage or top-level module is one (`slurm_shockwave.controller`, `shockwave_lab.sim`,
    `slurm_shockwave.loader`)."""
    parts = module.split(".")
    return "solver" if parts[0] == "solver" else ".".join(parts[:2])


def package_graph() -> dict[str, dict[str, list[str]]]:
    """package -> package it imports -> the module imports that make the arrow."""
    out: dict[str, dict[str, list[str]]] = {}
    for m, targets in graph().items():
        out.setdefault(package_of(m), {})
        for t in targets:
            if package_of(t) != package_of(m):
                out[package_of(m)].setdefault(package_of(t), []).append(f"{m} -> {t}")
    return out


def cycles(g) -> list[list[str]]:
    """The strongly connected components of more than one node (Tarjan), each sorted."""
    index, low, stack, on, found = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(g.get(v, ())):
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
                found.append(sorted(comp))
    for v in sorted(g):
        if v not in index:
            visit(v)
    return found


def counts() -> dict[str, tuple[int, int]]:
    """(modules, lines) of each part of the repository: .py files and their lines, as `wc -l` counts them."""
    parts = {"product (solver/, slurm_shockwave/)": [ROOT / "solver", ROOT / "slurm_shockwave"],
             "integrations (slurm_shockwave/wrapper/integrations/)": [INTEGRATIONS],
             "lab (lab/shockwave_lab/)": [ROOT / "lab" / "shockwave_lab"],
             "bench/ scripts": [ROOT / "bench"],
             "product tests (tests/)": [ROOT / "tests"], "lab tests (lab/tests/)": [ROOT / "lab" / "tests"]}
    out = {}
    for part, folders in parts.items():
        files = [p for f in folders for p in f.rglob("*.py")
                 if f == INTEGRATIONS or not p.is_relative_to(INTEGRATIONS)]  # the integrations: a part of their own
        out[part] = (len(files), sum(p.read_text().count("\n") for p in files))
    return out


# ------------------------------------------------------------------------ the two buildings
def test_the_product_never_imports_the_lab():
    """Nothing in solver/, slurm_shockwave/ or the prolog/epilog hook imports shockwave_lab, at module level, inside
    a function or by name (the lab plugs in through entry points only: slurm_shockwave/plugins.py)."""
    files = [p for folder in [*PRODUCT.values(), *(ROOT / s for s in PRODUCT_SCRIPTS)] for p in folder.rglob("*.py")]
    assert len(files) > 50
    bad = [f"{p.relative_to(ROOT)}:{line} imports {mod}" for p in files for line, mod, level in raw_imports(p)
           if not level and mod.split(".")[0] == "shockwave_lab"]
    assert bad == []


def test_the_packages_import_each_other_one_way():
    """The package graph (package_of) has no cycle in the product and none in the lab but the known ones (the lab
    imports the product, never the reverse: test_the_product_never_imports_the_lab)."""
    pg = package_graph()
    assert {"solver", "slurm_shockwave.controller", "slurm_shockwave.slurm", "shockwave_lab.sim"} <= set(pg)
    new = [c for c in cycles({p: set(ts) for p, ts in pg.items()}) if set(c) not in KNOWN_PACKAGE_CYCLES]
    assert new == [], {f"{a} -> {b}": pg[a][b] for c in new for a in c for b in c if b in pg[a]}


@pytest.mark.parametrize("building", ["product", "lab"])
def test_no_import_cycle(building):
    top = PRODUCT if building == "product" else LAB
    g = {m: {t for t in ts if _under(t, top)} for m, ts in graph().items() if _under(m, top)}
    assert len(g) > 50
    assert cycles(g) == []


def test_the_product_stays_small():
    parts = counts()
    modules_, lines = parts["product (solver/, slurm_shockwave/)"]
    assert modules_ <= PRODUCT_MAX_MODULES and lines <= PRODUCT_MAX_LINES, (modules_, lines)
    modules_, lines = parts["integrations (slurm_shockwave/wrapper/integrations/)"]
    assert modules_ <= INTEGRATIONS_MAX_MODULES and lines <= INTEGRATIONS_MAX_LINES, (modules_, lines)


# ------------------------------------------------------------------------ inside the product
def test_the_loop_the_daemon_and_the_core_never_import_the_slurm_subpackage():
    assert _importers(("solver", "slurm_shockwave.controller", "slurm_shockwave.journal", "shockwave_lab.sim",
                       "slurm_shockwave.backends"), "slurm_shockwave.slurm") == []


def test_no_backend_reaches_up_into_the_controller():
    assert _importers(("slurm_shockwave.slurm", "shockwave_lab.sim", "slurm_shockwave.backends",
                       "slurm_shockwave.journal"), "slurm_shockwave.controller") == []


def test_the_decision_core_is_pure():
    """solver/ knows nothing of slurm_shockwave and reads no files (it is given plain data)."""
    bad = _importers(("solver",), "slurm_shockwave")
    for name, path in modules(PRODUCT).items():
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


@pytest.mark.parametrize("folder", ["solver", "slurm_shockwave", "tests", "bench", "prolog_epilog",
                                    "lab/shockwave_lab", "lab/tests"])
def test_no_file_over_400_lines(folder):
    long = {str(p.relative_to(ROOT)): n for p in (ROOT / folder).rglob("*.py")
            if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert long == {}


if __name__ == "__main__":          # the table of docs/architecture.md
    print("| part | modules | lines |\n|---|---:|---:|")
    for part, (n, lines) in counts().items():
        print(f"| {part} | {n} | {lines:,} |")

"""`shockwave simulate`: replay a workload through the round loop on a simulated cluster."""
from __future__ import annotations

import json
from pathlib import Path

import click

from shockwave_lab.data_files import DEFAULT_EXPERIMENT, EXPERIMENTS, experiment_paths
from slurm_shockwave.strict_json import dumps
from slurm_shockwave.cli.common import OneLineError, console, emit_json, esc


class _SimulateCommand(click.Command):
    """Its help ends with every policy the registry knows, read when the help is shown (importing the
    policies costs most of a second, which other sub-commands should not pay)."""

    def format_epilog(self, ctx, formatter):
        from solver.policies import all_policies
        with formatter.section("Policies"):
            formatter.write_dl([(c.name, f"{c.label}: {c.description}"
                                 + (f" (also {', '.join(c.aliases)})" if c.aliases else ""))
                                for c in all_policies()])
        super().format_epilog(ctx, formatter)


@click.command(cls=_SimulateCommand)
@click.option("--trace", "workload", type=click.Path(dir_okay=False), default=None,
              help="A reference .trace or our job spec (.toml/.json/.jsonl). Default: the bundled 120-job trace.")
@click.option("--throughputs", type=click.Path(dir_okay=False), default=None,
              help="Gavel-format throughputs JSON. Default: the experiment's.")
@click.option("--gpus", default=None, metavar="N|TYPE:N,...",
              help="GPUs in the simulated cluster: a number (one pool at the throughputs file's v100 column), or "
                   "GPUs per type, e.g. v100:16,p100:8,k80:8 (each type at its column). Default: the experiment's.")
@click.option("--gpus-per-node", type=click.IntRange(1, 1024), default=None,
              help="Each gang on one node of this many GPUs (a larger gang on whole nodes), as on a real cluster. "
                   "Default: no nodes (each GPU type one pool, as the paper's simulator).")
@click.option("--experiment", type=click.Choice(sorted(EXPERIMENTS)), default=DEFAULT_EXPERIMENT,
              show_default=True, help="Bundled reference experiment providing the defaults.")
@click.option("--policy", "policy_name", default=None,
              help="A policy of the list below (its name or an alias), or 'all'. Default: the default policy.")
@click.option("--config", type=click.Path(dir_okay=False), default=None,
              help="The policy's settings (JSON/TOML), for every chosen policy whose settings the file describes. "
                   "Default: each policy's built-in configuration, the same for every workload (and the "
                   "controller's). The reference's per-experiment files are under data/configs/ (shockwave-paper "
                   "settings, for reproducing the reference only).")
@click.option("--round-length", type=float, default=120.0, show_default=True, help="Seconds per round.")
@click.option("--semantics", type=click.Choice(["controller", "reference"]), default="controller", show_default=True,
              help="controller: as the controller runs the policy in authoritative mode (a round starts early when "
                   "a job ends while another waits; a running job is preempted only when that pays for its "
                   "preemption cost). reference: the reference simulator's fixed rounds, every preemption the plan "
                   "makes (reproducing the paper's numbers).")
@click.option("--elastic", type=click.IntRange(1, 100000), default=None, metavar="N",
              help="Make every job elastic from 1 GPU up to N (or its own count, when larger), its global batch size "
                   "kept: the default then lends idle GPUs (solver/elastic.py). Default: the workload's own ranges "
                   "(a job spec's gpus_range).")
@click.option("--profile", type=click.Path(dir_okay=False), default=None,
              help="Job profile (ground-truth batch-size schedules); bundled ones are found automatically.")
@click.option("--json", "as_json", is_flag=True, help="Print results as JSON.")
@click.option("-o", "--output", type=click.Path(dir_okay=False), default=None,
              help="Also write the full results (per job, utilisation timeline) as JSON here.")
@click.option("--progress/--no-progress", default=None, help="Progress bar (default: on a terminal).")
def simulate(workload, throughputs, gpus, gpus_per_node, experiment, policy_name, config, round_length, semantics,
             elastic, profile, as_json, output, progress):
    """Simulate POLICY on a workload and print the paper's metrics."""
    from solver.policies import default_policy, policy_class, policy_names

    from shockwave_lab.simulate import run_simulation
    from shockwave_lab.workload.errors import WorkloadError
    from shockwave_lab.workload.gpu_types import parse_gpus

    exp = experiment_paths(experiment)
    workload = workload or str(exp["trace"])
    throughputs = throughputs or str(exp["throughputs"])
    try:
        gpus = parse_gpus(gpus) if gpus is not None else exp["gpus"]
    except ValueError as e:
        raise OneLineError(str(e)) from None
    if round_length <= 0:
        raise OneLineError(f"--round-length must be positive, got {round_length}")
    try:
        names = [c.name for c in ([policy_class(n) for n in policy_names()] if policy_name == "all" else
                                  [policy_class(policy_name) if policy_name else default_policy()])]
    except ValueError as e:
        raise OneLineError(str(e)) from None
    settings = _load_config(config, names) if config else {}
    results = {}
    for name in names:
        try:
            results[name] = run_simulation(workload, throughputs, gpus, name, round_length, settings.get(name),
                                           profile, on_round=_progress(name, progress, as_json),
                                           gpus_per_node=gpus_per_node, semantics=semantics, elastic=elastic)
        except (WorkloadError, ValueError) as e:
            raise OneLineError(str(e)) from None
    _finish_progress()
    # the reference's shipped numbers are of its simulator's semantics: shown beside runs of the same
    reference = _reference_rows(workload, gpus, round_length) if semantics == "reference" else {}
    if output:
        Path(output).write_text(dumps({"workload": str(workload), "gpus": gpus, "round_length": round_length,
                                            "semantics": semantics, "elastic": elastic,
                                            "results": {n: r.to_json() for n, r in results.items()},
                                            "reference": reference}, indent=1, default=str))
    if as_json:
        emit_json({"workload": str(workload), "gpus": gpus,
                   "results": {n: {k: v for k, v in r.to_json().items() if k not in ("jobs_detail",
                                                                                  "utilization_timeline")}
                               for n, r in results.items()},
                   "reference": reference})
        return
    _table(results, reference)


def _load_config(path, names) -> dict:
    """{policy: its settings from the file} for the chosen policies whose settings the file describes; a file
    that describes none of them is an error (the problems it has for each, one line)."""
    from pydantic import ValidationError

    from slurm_shockwave.loader import InputFileError
    from slurm_shockwave.policy_settings import from_file, settings_model
    from slurm_shockwave.validation import describe
    out, problems = {}, []
    for name in names:
        if settings_model(name) is None:
            continue
        try:
            out[name] = from_file(name, path)
        except InputFileError as e:
            raise OneLineError(str(e)) from None
        except ValidationError as e:
            problems.append(f"{name}: " + "; ".join(describe(e)))
    if not out:
        raise OneLineError(f"{path}: settings of none of {', '.join(names)}: " + " | ".join(problems))
    return out


_bar = {}


def _progress(name, progress, quiet):
    import sys
    if quiet or (progress is None and not sys.stdout.isatty()) or progress is False:
        return None
    from rich.progress import Progress
    if "p" not in _bar:
        _bar["p"] = Progress(transient=True)
        _bar["p"].start()
    task = _bar["p"].add_task(f"{name}", total=None)

    def on_round(record):
        _bar["p"].update(task, advance=1,
                         description=f"{name}: round {record.round_index}, t={record.view.now / 3600:.2f} h, "
                                     f"{len(record.view.jobs)} active")
    return on_round


def _finish_progress():
    if "p" in _bar:
        _bar.pop("p").stop()


def _reference_rows(workload, gpus, round_length):
    """The reference's shipped numbers when the workload is the bundled 120-job trace on 32 GPUs."""
    from shockwave_lab.data_files import REFERENCE_RESULTS
    exp = experiment_paths("tacc_32gpus")
    if Path(workload).name != exp["trace"].name or gpus != 32 or round_length != 120:
        return {}
    data = json.loads((REFERENCE_RESULTS / "shipped_result_pickles_summary.json").read_text())
    rows = {}
    for key, v in data.items():
        if key.startswith("tacc_32gpus/") and "old_" not in key and "new_orig" not in key:
            rows[v["policy"]] = {"makespan": v["makespan"], "avg_jct": v["avg_jct"], "worst_rho": v["worst_ftf"],
                                 "unfair_fraction": v["unfair_fraction_pct_gt1.05"], "utilization": v["cluster_util"]}
    return rows


def _table(results, reference):
    from rich.table import Table

    from solver.policies import policy_class
    t = Table(title="Simulation results" + (" (reference: shipped results of the Shockwave repository)"
                                             if reference else ""))
    for col in ("policy", "makespan s", "makespan/LB", "avg JCT s", "worst rho", "unfair % (>1.05)",
                "unfair % (>1.1)", "util", "rounds", "wall s"):
        if col == "policy":
            t.add_column(col, no_wrap=True, min_width=22)
        else:
            t.add_column(col, justify="right")
    for name, r in results.items():
        m = r.metrics
        t.add_row(name, f"{m.makespan:,.0f}", f"{m.makespan_over_lb:.3f}", f"{m.avg_jct:,.0f}", f"{m.worst_rho:.3f}", f"{m.unfair_fraction:.2f}",
                  f"{m.unfair_fraction_1_1:.2f}", f"{m.utilization:.3f}", str(r.rounds), f"{r.wall_seconds:.1f}")
        ref = reference.get(policy_class(name).reference_name)
        if ref:
            t.add_row("  reference", f"{ref['makespan']:,.0f}", "", f"{ref['avg_jct']:,.0f}", f"{ref['worst_rho']:.3f}",
                      f"{ref['unfair_fraction']:.2f}", "", f"{ref['utilization']:.3f}", "", "", style="dim")
    console().print(t)
    lb = next(iter(results.values())).metrics.lower_bound if results else 0
    if lb:
        console().print(f"LB = physical lower bound of the makespan: {lb:,.0f} s (docs/results.md)")
    _user_table(results)


def _user_table(results):
    """Each user's GPU share (while every user had an active job), its fair share and its worst dynamic FTF, when
    there are users."""
    from rich.table import Table
    users = sorted({u for r in results.values() for u in r.metrics.user_gpu_share})
    if not users:
        return
    t = Table(title="Per user: GPU share while every user had work (its max-min fair share) / worst dynamic FTF "
                    "(docs/fairness.md)")
    t.add_column("policy", no_wrap=True, min_width=22)
    for u in users:
        t.add_column(esc(u), justify="right")
    t.add_column("min share / fair", justify="right")
    for name, r in results.items():
        m = r.metrics
        t.add_row(name, *(f"{100 * m.user_gpu_share.get(u, 0):.1f}% ({100 * m.user_fair_share.get(u, 0):.1f}%) / "
                          f"{m.user_ftf_dynamic_worst.get(u, 0):.2f}" for u in users), f"{m.user_share_min:.3f}")
    console().print(t)

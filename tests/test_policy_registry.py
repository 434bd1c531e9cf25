"""Policies describe themselves: a new policy is one file (tests/toy_policy.py), and `shockwave simulate`, the
report and the study show it, with its label, without a change anywhere else."""
from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from pydantic import ValidationError

import solver.policies
from slurm_shockwave.cli.main import cli
from shockwave_lab.data_files import THROUGHPUTS
from shockwave_lab.report import make_report
from solver.policies import all_policies, make_policy, policy_class, policy_names, registry
from shockwave_lab.baselines.allox import AlloXConfig
from solver.policies.base import Policy


THR = THROUGHPUTS / "tacc_throughputs.json"
SPEC = [{"id": 0, "arrival": 0, "model": "ResNet-18", "batch_size": 32, "epochs": 2},
        {"id": 1, "arrival": 0, "model": "ResNet-50", "batch_size": 32, "epochs": 1, "gpus": 2},
        {"id": 2, "arrival": 60, "model": "Transformer", "batch_size": 32, "epochs": 2},
        {"id": 3, "arrival": 300, "model": "Recommendation", "batch_size": 1024, "epochs": 2}]
BASELINES = ["max_min_fairness", "max_min_fairness_het", "finish_time_fairness", "allox", "max_sum_throughput",
             "min_total_duration", "gandiva_fair", "pollux", "slurm-multifactor", "slurm-preempt"]


@pytest.fixture
def isolated(monkeypatch):
    """The registry as it is, restored after the test (classes defined in the test do not leak)."""
    monkeypatch.setattr(registry, "_classes", dict(registry._classes))
    return registry


@pytest.fixture
def toy(isolated, monkeypatch, tmp_path):
    """tests/toy_policy.py as if dropped into solver/policies/ (a folder added to the package's path)."""
    folder = tmp_path / "dropped"
    folder.mkdir()
    shutil.copy(Path(__file__).with_name("toy_policy.py"), folder / "toy_policy.py")
    monkeypatch.setattr(solver.policies, "__path__", [*solver.policies.__path__, str(folder)])
    monkeypatch.setattr(registry, "_discovered", False)
    yield "toy_lifo"
    sys.modules.pop("solver.policies.toy_policy", None)


@pytest.fixture
def spec(tmp_path):
    path = tmp_path / "spec.jsonl"
    path.write_text("".join(json.dumps(j) + "\n" for j in SPEC))
    return path


def _simulate(spec, *args):
    return CliRunner().invoke(cli, ["simulate", "--trace", str(spec), "--throughputs", str(THR), "--gpus", "4",
                                    "--no-progress", *args])


def test_the_built_in_policies_in_their_order():
    assert policy_names() == ["shockwave-edf", "shockwave-paper", *BASELINES, "fifo"]
    assert [c.name for c in all_policies() if c.baseline] == BASELINES
    assert [policy_class(n).label for n in policy_names()] == [
        "Shockwave-EDF", "Shockwave (paper)", "Gavel", "Gavel-het", "Themis", "AlloX", "MST", "OSSP", "Gandiva-Fair", "Pollux",
        "Slurm", "Slurm+preempt", "FIFO"]
    assert [c.name for c in all_policies() if c.default] == ["shockwave-edf"]
    assert policy_class("max_sum_throughput").reference_name == "max_sum_throughput_perf"
    assert all(c.description for c in all_policies())


def test_toy_in_simulate(toy, spec):
    help_text = _simulate(spec, "--help").output
    assert "toy_lifo" in help_text and "ToyLIFO" in help_text
    r = _simulate(spec, "--policy", "toy_lifo", "--json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.output)["results"]["toy_lifo"]["jobs"] == len(SPEC)
    r = _simulate(spec, "--policy", "all", "--json")
    assert r.exit_code == 0, r.output
    assert list(json.loads(r.output)["results"]) == ["shockwave-edf", "shockwave-paper", *BASELINES, "fifo",
                                                      "toy_lifo"]


def test_toy_in_the_report(toy, spec, tmp_path):
    results = tmp_path / "results.json"
    r = _simulate(spec, "--policy", "all", "-o", str(results))
    assert r.exit_code == 0, r.output
    summary = make_report([results], tmp_path / "report.html")
    assert summary["policies"][-1] == "toy_lifo"
    assert {"policy": "toy_lifo", "label": "ToyLIFO"}.items() <= summary["metrics"][-1].items()
    page = (tmp_path / "report.html").read_text()
    assert "toy_lifo (ToyLIFO)" in page and "max_min_fairness (Gavel)" in page
    from shockwave_lab.report.plots import colours
    assert len(set(colours(summary["policies"]).values())) == len(summary["policies"])


def test_toy_in_the_study(toy, tmp_path, monkeypatch):
    from shockwave_lab.bench import study
    from shockwave_lab.bench.study_report import write_report
    from shockwave_lab.bench.study_traces import TraceSpec
    assert study.baselines() == [*BASELINES, "toy_lifo"]
    spec = TraceSpec("tiny", gpus=4, jobs=6, seed=1, interarrival=60)
    out = tmp_path / "study"
    for policy in study.policies():
        assert study.run_one(spec, policy, None, out, tmp_path)["jobs"] == 6
    text = write_report(tmp_path, tmp_path / "results.md", [spec], out, []).read_text()
    assert "| ToyLIFO | " in text and "| Gavel | " in text and "| **Shockwave-EDF** | " in text


def test_names_aliases_and_reference_names_in_any_case():
    assert policy_class("Gavel").name == "max_min_fairness"
    assert policy_class("THEMIS").name == "finish_time_fairness"
    assert policy_class("max_sum_throughput_perf").name == "max_sum_throughput"
    assert policy_class("gandiva-fair").name == "gandiva_fair"
    assert make_policy("ossp").name == "min_total_duration"


def test_unknown_name_lists_the_known_ones(toy):
    with pytest.raises(ValueError, match=r"unknown policy 'nope'; choose from shockwave-edf, shockwave-paper, "
                                         r"max_min_fairness.*toy_lifo"):
        policy_class("nope")
    assert policy_class("TOY").label == "ToyLIFO"


def _problem(name, settings) -> tuple:
    with pytest.raises(ValidationError) as e:          # worded by the caller (slurm_shockwave.validation)
        make_policy(name, settings)
    err = e.value.errors()[0]
    return err["loc"], err["type"]


def test_settings_are_validated(toy):
    assert make_policy("toy", {"newest_first": True}).config.newest_first is True
    assert make_policy("toy").config.newest_first is False
    assert _problem("toy", {"newest_first": "yes"}) == (("newest_first",), "bool_type")
    assert _problem("toy", {"newest": True}) == (("newest",), "extra_forbidden")
    assert _problem("shockwave", {"future_rounds": 0}) == (("future_rounds",), "greater_than_equal")
    assert _problem("allox", {"alpha": 2.0}) == (("alpha",), "less_than_equal")
    with pytest.raises(ValueError, match="policy 'fifo' has no settings"):
        make_policy("fifo", {"alpha": 0.5})
    with pytest.raises(ValueError, match="policy 'shockwave-paper' takes a ShockwaveConfig, got AlloXConfig"):
        make_policy("shockwave", AlloXConfig())
    assert make_policy("allox", {"alpha": 0.5}).config.alpha == 0.5
    # a reference config's absolute k is used as given, whichever way the settings arrive
    assert make_policy("shockwave", {"k": 0.001}).config.k_norm is None


def test_helpers_without_a_label_are_not_listed_and_names_do_not_clash(isolated):
    class Scripted(Policy):          # like the tests' own scripted policies
        name = "scripted"

    assert "scripted" not in policy_names()

    class Variant(policy_class("gavel")):       # a new name and label: a new policy, without Gavel's other names
        name = "gavel_variant"
        label = "Gavel variant"

    assert policy_class("gavel_variant") is Variant and Variant.aliases == () and Variant.reference_name is None
    assert policy_class("gavel").name == "max_min_fairness"
    with pytest.raises(TypeError, match="'gavel' is taken by shockwave_lab.baselines.max_min_fairness.MaxMinFairness"):
        class Clash(Policy):
            name = "gavel"
            label = "Not Gavel"


def test_policies_of_other_packages_by_entry_point(isolated, monkeypatch):
    class EntryPoint:
        name, value = "plugin", "plugin:Plugin"

        def load(self):
            class Plugin(Policy):
                name = "plugin"
                label = "Plug-in"
            return Plugin

    from slurm_shockwave import plugins
    monkeypatch.setattr(plugins, "entry_points",
                        lambda group: [EntryPoint()] if group == plugins.POLICY_GROUP else [])
    monkeypatch.setattr(plugins, "_loaded", False)
    plugins.load_policy_plugins()
    assert policy_names()[-1] == "plugin" and policy_class("plugin").label == "Plug-in"

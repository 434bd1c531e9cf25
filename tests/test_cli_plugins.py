"""The lab's commands come through the ``slurm_shockwave.commands`` entry points: listed and run by name, and a
plug-in that cannot be imported is listed and, when run, says why in one line; it never hides the product's."""
from __future__ import annotations

from importlib.metadata import EntryPoint

from click.testing import CliRunner

from slurm_shockwave.cli import main


def test_the_labs_commands_are_listed_beside_the_products():
    r = CliRunner().invoke(main.cli, ["--help"])
    assert r.exit_code == 0
    for name in ("controller", "status", "explain", "events", "simulate", "demo", "replay", "cluster", "trace"):
        assert f"  {name} " in r.output, name


def test_a_broken_plugin_is_said_when_run_and_hides_nothing(monkeypatch):
    broken = EntryPoint("broken", "no_such_module_of_shockwave:cmd", "slurm_shockwave.commands")
    monkeypatch.setattr(main, "command_entry_points", lambda: {"broken": broken})
    r = CliRunner().invoke(main.cli, ["--help"])
    assert r.exit_code == 0 and "broken" in r.output and "controller" in r.output
    r = CliRunner().invoke(main.cli, ["broken", "--anything"])
    assert r.exit_code == 1
    assert "the broken command (no_such_module_of_shockwave:cmd) cannot be loaded: ModuleNotFoundError" in r.output
    assert CliRunner().invoke(main.cli, ["controller", "--help"]).exit_code == 0

"""`shockwave`: the command-line entry point (click).  Sub-commands live in modules named for them."""
from __future__ import annotations

import logging

import click

from .. import __version__
from ..plugins import load_policy_plugins
from .simulate import simulate


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="shockwave")
@click.option("-v", "--verbose", count=True, help="More logging (-v info, -vv debug).")
def cli(verbose):
    """Shockwave: fair, efficient scheduling of adaptive deep-learning jobs on Slurm GPU clusters."""
    logging.basicConfig(level=[logging.WARNING, logging.INFO, logging.DEBUG][min(verbose, 2)],
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    load_policy_plugins()


cli.add_command(simulate)


def _optional(module: str, name: str) -> None:
    """Sub-commands whose modules may not be present in every build stay optional."""
    import importlib
    try:
        cli.add_command(getattr(importlib.import_module(f"slurm_shockwave.cli.{module}"), name))
    except (ImportError, AttributeError):  # pragma: no cover
        pass


for _module, _name in (("cluster", "cluster"), ("controller", "controller"), ("status", "status"),
                       ("status", "explain"), ("status", "events"), ("report", "report"), ("demo", "demo"),
                       ("trace", "trace"), ("replay", "replay")):
    _optional(_module, _name)


if __name__ == "__main__":  # pragma: no cover
    cli()

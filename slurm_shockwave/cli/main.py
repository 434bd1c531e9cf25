"""`shockwave`: the command-line entry point (click).  Sub-commands live in modules named for them; the lab's
(`simulate`, `demo`, `replay`, `cluster`, `report`, `trace`) come from the ``slurm_shockwave.commands`` entry
points when it is installed, each imported only when it is run or listed in the help."""

from __future__ import annotations

import logging

import click

from slurm_shockwave import __version__
from slurm_shockwave.cli.controller import controller
from slurm_shockwave.cli.status import events, explain, status
from slurm_shockwave.plugins import command_entry_points, load_policy_plugins

log = logging.getLogger(__name__)


class _Shockwave(click.Group):
    """The product's commands, then the plug-ins': a plug-in that cannot be imported is listed and, when run, says
    why in one line (exit 1); it never hides or breaks the others."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*self.commands, *command_entry_points()})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in self.commands:
            return self.commands[cmd_name]
        ep = command_entry_points().get(cmd_name)
        if ep is None:
            return None
        try:
            command = ep.load()
        except Exception as e:  # noqa: BLE001 - a broken plug-in: logged with its name, and said when it is run
            log.warning("the %s command (%s) cannot be loaded: %s: %s", cmd_name, ep.value, type(e).__name__, e)
            return _broken(cmd_name, ep.value, e)
        if not isinstance(command, click.Command):
            return _broken(cmd_name, ep.value, TypeError(f"{type(command).__name__} is not a click command"))
        return command


def _broken(name: str, where: str, error: Exception) -> click.Command:
    def run() -> None:
        raise click.ClickException(f"the {name} command ({where}) cannot be loaded: {type(error).__name__}: {error}")

    return click.Command(
        name,
        callback=run,
        help=f"(cannot be loaded: {type(error).__name__})",
        context_settings={"ignore_unknown_options": True, "allow_extra_args": True},
    )


@click.group(cls=_Shockwave, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="shockwave")
@click.option("-v", "--verbose", count=True, help="More logging (-v info, -vv debug).")
def cli(verbose: int) -> None:
    """Shockwave: fair, efficient scheduling of adaptive deep-learning jobs on Slurm GPU clusters."""
    logging.basicConfig(
        level=[logging.WARNING, logging.INFO, logging.DEBUG][min(verbose, 2)],
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    load_policy_plugins()


for _command in (controller, status, explain, events):
    cli.add_command(_command)


if __name__ == "__main__":  # pragma: no cover
    cli()

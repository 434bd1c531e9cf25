"""`shockwave controller run|check|uninstall|example-config`: the controller daemon (on Slurm by default).

Exit status: 0 done; 1 the controller cannot run (state directory, state database, metrics port, another
instance, Slurm/world problems found by `check`); 2 the config file is invalid (systemd's unit does not
restart on 2: RestartPreventExitStatus=2).
"""

from __future__ import annotations

import logging
import signal
import sqlite3
import sys

import click

from slurm_shockwave.cli.common import OneLineError, emit_json

log = logging.getLogger("slurm_shockwave.controller")


class RunError(OneLineError):
    """A one-line error that is not about the config file: exit 1 (systemd restarts the service)."""

    exit_code = 1


class EarlyStop:
    """SIGTERM/SIGINT that arrive while the controller is still starting (importing, reading its config, opening
    its state, reaching its cluster) are remembered, not fatal: installed first thing (this module imports only
    click), then handed to `Controller.install_signal_handlers`, which stops cleanly before the first round.

    A signal ignored when the controller starts stays ignored (the POSIX convention): a non-interactive shell
    starts `shockwave controller run ... &` with SIGINT ignored, so that a Ctrl-C meant for the foreground does not
    stop it; `nohup` ignores SIGHUP.  `ignored` records them for `install_signal_handlers`."""

    def __init__(self):
        self.signum: int | None = None
        self.ignored = ignored_at_start()
        for s in (signal.SIGTERM, signal.SIGINT):
            if s not in self.ignored:
                signal.signal(s, self._remember)

    def _remember(self, signum, _frame) -> None:
        self.signum = signum


def ignored_at_start() -> frozenset[int]:
    """The controller's signals (SIGTERM, SIGINT, SIGHUP) that this process was started with ignored."""
    return frozenset(s for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP) if signal.getsignal(s) is signal.SIG_IGN)


def _config(path, dry_run=False, as_json=False):
    from slurm_shockwave.controller.config import ConfigError, load_config

    try:
        cfg = load_config(path)
    except ConfigError as e:
        if as_json:
            emit_json({"ok": False, "source": str(path), "problems": e.problems})
        else:
            for problem in e.problems:
                click.echo(f"Error: {problem}", err=True)
        sys.exit(2)
    if dry_run:
        cfg.dry_run = True
    return cfg


@click.group()
def controller():
    """Run the Shockwave controller against a cluster (Slurm by default)."""


def _setup_logging(log_json: bool) -> None:
    from slurm_shockwave.controller.daemon import JsonFormatter

    handler = logging.StreamHandler()
    handler.setFormatter(
        JsonFormatter() if log_json else logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s")
    )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(min(root.level or logging.INFO, logging.INFO))


@controller.command()
@click.option(
    "--config",
    "config_path",
    required=True,
    type=click.Path(dir_okay=False),
    help="Controller config (TOML), e.g. /etc/shockwave/config.toml.",
)
@click.option("--dry-run", is_flag=True, help="Shadow mode: decide and log what would be enacted, enact nothing.")
@click.option(
    "--max-rounds",
    type=click.IntRange(min=1),
    default=None,
    help="Stop after this many rounds (default: run until SIGTERM).",
)
@click.option("--log-json", is_flag=True, help="Structured (JSON lines) logs on stderr.")
def run(config_path, dry_run, max_rounds, log_json):
    """Run the round loop: read the cluster, decide the round, enact it; until SIGTERM (SIGHUP reloads the config)."""
    early = EarlyStop()  # first: a SIGTERM while starting is a clean stop, not exit 143
    from slurm_shockwave.controller.daemon import Controller
    from slurm_shockwave.controller.faults import metrics_error
    from slurm_shockwave.controller.metrics_server import ControllerMetrics
    from slurm_shockwave.errors import StartupError
    from slurm_shockwave.journal import state_db_error
    from slurm_shockwave.journal.lock import AlreadyRunning

    cfg = _config(config_path, dry_run)
    _setup_logging(log_json)
    metrics = ControllerMetrics()
    try:
        ctl = Controller(cfg, metrics=metrics, force_dry_run=dry_run)
    except (AlreadyRunning, StartupError) as e:
        raise RunError(str(e)) from None
    try:
        if cfg.metrics_port:
            try:
                metrics.serve(cfg.metrics_port, cfg.metrics_address)
            except OSError as e:
                raise RunError(str(metrics_error(cfg.metrics_address, cfg.metrics_port, e))) from None
        ctl.install_signal_handlers(early)
        ctl.warn_at_start()
        log.info(
            "controller started: mode=%s policy=%s round=%ss partition=%s%s",
            cfg.mode,
            cfg.policy.name,
            cfg.round_seconds,
            cfg.partition,
            " (dry run)" if cfg.dry_run else "",
        )
        try:
            n = ctl.run(max_rounds=max_rounds)
        except sqlite3.Error as e:
            raise RunError(str(state_db_error(cfg.state_path, e))) from None
    finally:
        metrics.shutdown()
        ctl.close()
    log.info("controller stopped after %d round(s)", n)


@controller.command()
@click.option("--config", "config_path", required=True, type=click.Path(dir_okay=False))
@click.option("--json", "as_json", is_flag=True, help="Print the summary and the problems as JSON.")
@click.option("--syntax-only", is_flag=True, help="Only validate the file; do not look at Slurm or the disks.")
def check(config_path, as_json, syntax_only):
    """Check a controller config and the world it runs in: one line per problem; exit 2 (config) or 1 (world)."""
    from slurm_shockwave.controller.preflight import check_world, summary

    cfg = _config(config_path, as_json=as_json)
    facts: dict = {}
    problems = [] if syntax_only else check_world(cfg, facts)
    if as_json:
        emit_json({"ok": not problems, **summary(cfg), **facts, "problems": problems})
    else:
        for p in problems:
            click.echo(f"Error: {p}", err=True)
        if not problems:
            what = "config OK" if syntax_only else "config and cluster OK"
            click.echo(f"{what}: " + ", ".join(f"{k}={v}" for k, v in {**summary(cfg), **facts}.items()))
    if problems:
        sys.exit(1)


@controller.command()
@click.option("--config", "config_path", required=True, type=click.Path(dir_okay=False))
@click.option("--json", "as_json", is_flag=True)
def uninstall(config_path, as_json):
    """Release the jobs the controller holds, reset the SiteFactors it set and clear the node pins it wrote."""
    from slurm_shockwave.backends.base import BackendUnavailable, backend_class
    from slurm_shockwave.journal.lock import ControllerRunning

    cfg = _config(config_path)
    try:
        done = backend_class(cfg.backend).uninstall(cfg)
    except (BackendUnavailable, OSError, ControllerRunning) as e:
        raise OneLineError(str(e).splitlines()[0]) from None
    if as_json:
        emit_json(done)
    else:
        click.echo(
            f"released {len(done['released'])} job(s), reset SiteFactor of {len(done['site_factor_reset'])}, "
            f"cleared the node pin of {len(done.get('unpinned', ()))}, "
            f"deleted {len(done.get('unreserved', ()))} restart reservation(s)"
        )


@controller.command("example-config")
def example_config():
    """Print the commented reference config, every setting at its default (docs/config.example.toml)."""
    from slurm_shockwave.controller.config_example import example_toml

    click.echo(example_toml(), nl=False)

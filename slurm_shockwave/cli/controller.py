"""`shockwave controller run|check|uninstall`: the Slurm controller daemon."""
from __future__ import annotations

import logging
import sys

import click

from .common import OneLineError, emit_json


def _config(path, dry_run=False):
    from ..controller.config import ConfigError, load_config
    try:
        cfg = load_config(path)
    except ConfigError as e:
        for problem in e.problems:
            click.echo(f"Error: {problem}", err=True)
        sys.exit(2)
    if dry_run:
        cfg.dry_run = True
    return cfg


@click.group()
def controller():
    """Run the Shockwave controller against a Slurm cluster."""


@controller.command()
@click.option("--config", "config_path", required=True, type=click.Path(dir_okay=False),
              help="Controller config (TOML), e.g. /etc/shockwave/config.toml.")
@click.option("--dry-run", is_flag=True, help="Shadow mode: decide and log what would be enacted, enact nothing.")
@click.option("--max-rounds", type=int, default=None, help="Stop after this many rounds (default: run until SIGTERM).")
@click.option("--log-json", is_flag=True, help="Structured (JSON lines) logs on stderr.")
def run(config_path, dry_run, max_rounds, log_json):
    """Run the round loop: read Slurm, solve the market, enact it; until SIGTERM."""
    from ..controller.daemon import AlreadyRunning, Controller, JsonFormatter
    from ..controller.metrics_server import ControllerMetrics
    cfg = _config(config_path, dry_run)
    handler = logging.StreamHandler()
    handler.setFormatter(JsonFormatter() if log_json else
                         logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(min(root.level or logging.INFO, logging.INFO))
    metrics = ControllerMetrics()
    try:
        ctl = Controller(cfg, metrics=metrics)
    except AlreadyRunning as e:
        raise OneLineError(str(e)) from None
    if cfg.metrics_port:
        metrics.serve(cfg.metrics_port)
    ctl.install_signal_handlers()
    logging.getLogger("slurm_shockwave.controller").info(
        "controller started: mode=%s policy=%s round=%ss partition=%s%s", cfg.mode, cfg.policy, cfg.round_seconds,
        cfg.partition, " (dry run)" if cfg.dry_run else "")
    try:
        n = ctl.run(max_rounds=max_rounds)
    finally:
        ctl.close()
    logging.getLogger("slurm_shockwave.controller").info("controller stopped after %d round(s)", n)


@controller.command()
@click.option("--config", "config_path", required=True, type=click.Path(dir_okay=False))
@click.option("--json", "as_json", is_flag=True)
def check(config_path, as_json):
    """Validate a controller config: one line per problem, exit 2 if any."""
    cfg = _config(config_path)
    summary = {"source": cfg.source, "mode": cfg.mode, "round_seconds": cfg.round_seconds, "policy": cfg.policy,
               "partition": cfg.partition, "managed_by": cfg.managed_by, "state_dir": cfg.state_dir,
               "event_store": cfg.event_store}
    if as_json:
        emit_json(summary)
    else:
        click.echo("config OK: " + ", ".join(f"{k}={v}" for k, v in summary.items()))


@controller.command()
@click.option("--config", "config_path", required=True, type=click.Path(dir_okay=False))
@click.option("--json", "as_json", is_flag=True)
def uninstall(config_path, as_json):
    """Release the jobs the controller holds and reset the SiteFactors it set."""
    from ..controller.daemon import uninstall as do_uninstall
    from ..slurmcli import SlurmError
    cfg = _config(config_path)
    try:
        done = do_uninstall(cfg)
    except (SlurmError, OSError) as e:
        raise OneLineError(str(e).splitlines()[0]) from None
    if as_json:
        emit_json(done)
    else:
        click.echo(f"released {len(done['released'])} job(s), reset SiteFactor of {len(done['site_factor_reset'])}")

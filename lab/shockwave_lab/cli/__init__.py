"""The `shockwave` sub-commands of the lab (entry points ``slurm_shockwave.commands``)."""

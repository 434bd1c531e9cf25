"""Small optional modules that plug Shockwave's job side into the training frameworks people use.

Each module imports its framework only when it is itself imported (``from slurm_shockwave.wrapper.integrations
import lightning`` needs ``lightning``; nothing here imports it otherwise).  ``pip install
'slurm-shockwave[frameworks]'`` installs the frameworks the project tests against.
"""

from slurm_shockwave.wrapper import api


def per_device_batch(
    global_bs: int, world_size: int, accumulate: int = 1, given: int | None = None, reporter: api.Reporter | None = None
) -> int:
    """The per-device batch size that keeps the global batch ``global_bs`` on ``world_size`` devices with
    ``accumulate`` micro-batches per optimizer step (``api.per_rank_batch``: the job's exit reason when it does not
    divide).  ``given``: the per-device batch the framework was given; a ValueError, before the first step, unless it
    is that one (the framework would train at another global batch size).  With the global batch kept per optimizer
    step, an epoch has as many batches on any count, so each integration's resume position (batches done) holds."""
    want = (reporter or api.get_reporter()).per_rank_batch(global_bs, world_size, accumulate)
    if given is not None and given != want:
        raise ValueError(
            f"per-device batch size {given} x {world_size} devices x {accumulate} accumulation steps is not the global "
            f"batch size {global_bs}: make it {want} (per_device_batch_size of the integration)"
        )
    return want

"""Whether a job was submitted with `--requeue` or `--no-requeue`, from the command line Slurm recorded for it
(`sacct --json`'s `submit_line`, 24.11 and later; 22.05's has none).

sbatch reads its options up to the first argument that is not one (the script: what follows it is the script's
own arguments) and the last of the two flags wins.  Slurm records the line as sbatch's arguments joined by spaces,
unquoted (`--wrap "sleep 2; exit 3"` is recorded as `--wrap sleep 2; exit 3`), so the line is split at spaces and its
options are walked with what sbatch's option table says of each: which take a value in the next word.  A value
with spaces ends the walk at its second word (read as the script): the answer is then what came before, never a
guess from the rest.  Only a value whose later word is itself `--requeue` or `--no-requeue` would read wrong.

The answer is True (`--requeue`), False (`--no-requeue`) or None: neither on the line, which leaves the site's
default (`JobRequeue` of slurm.conf), an `#SBATCH` line of the script or `SBATCH_REQUEUE`/`SBATCH_NO_REQUEUE` in the
submitter's environment, none of which sacct records.
"""

from __future__ import annotations

#: sbatch's short options that take no value (`man sbatch`); every other short option takes one
SHORT_FLAGS = frozenset("hHIkOQsvVW")
#: sbatch's long options that take no value, or an optional one given only as `--opt=value`
LONG_FLAGS = frozenset(
    (
        "contiguous exclusive get-user-env help hold ignore-pbs no-kill no-requeue nice oom-kill-step overcommit "
        "oversubscribe parsable propagate quiet reboot requeue spread-job stepmgr test-only usage use-min-nodes "
        "verbose version wait"
    ).split()
)
FLAGS = {"--requeue": True, "--no-requeue": False}


def requeue_of(line: str | None) -> bool | None:
    """True for `--requeue`, False for `--no-requeue` (the last one given), None when the line gives neither."""
    if not line:
        return None
    words = line.split()
    found, i = None, 1 if words and not words[0].startswith("-") else 0  # words[0]: the sbatch command itself
    while i < len(words):
        w = words[i]
        if w == "--" or not w.startswith("-") or w == "-":
            break  # the script (or the end of the options): what follows is the script's
        if w.startswith("--"):
            found = FLAGS.get(w, found)
            takes_value = "=" not in w and w[2:] not in LONG_FLAGS
        else:  # a cluster of short options: `-HJname`, `-J name`
            rest = w[1:].lstrip("".join(SHORT_FLAGS))
            takes_value = len(rest) == 1  # its value is the next word, else attached (or no value option)
        i += 2 if takes_value else 1
    return found

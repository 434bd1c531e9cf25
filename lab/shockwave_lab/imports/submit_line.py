"""Whether a job was submitted with `--requeue` or `--no-requeue`, from the command line Slurm recorded for it
(`sacct --json`'s `submit_line`, 24.11 and later; 22.05's has none), else from its batch script's `#SBATCH` lines
(`script`, which Slurm keeps only with `AccountingStoreFlags=job_script`).

sbatch reads its options up to the first argument that is not one (the script: what follows it is the script's
own arguments) and the last of the two flags wins.  Slurm records the line as sbatch's arguments joined by spaces,
unquoted (`--wrap "sleep 2; exit 3"` is recorded as `--wrap sleep 2; exit 3`), so the line is split at spaces and its
options are walked with what sbatch's option table says of each: which take a value in the next word.  A value
with spaces ends the walk at its second word (read as the script): the answer is then what came before, never a
guess from the rest.  Only a value whose later word is itself `--requeue` or `--no-requeue` would read wrong.

The answer is True (`--requeue`), False (`--no-requeue`) or None: neither given, which leaves the site's default
(`JobRequeue` of slurm.conf) or `SBATCH_REQUEUE`/`SBATCH_NO_REQUEUE` in the submitter's environment (which would
override the script's lines), none of which sacct records.
"""

from __future__ import annotations

import shlex

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


def requeue_of(line: str | None, script: str | None = None) -> bool | None:
    """True for `--requeue`, False for `--no-requeue` (the last one given), None when neither is given: on the
    command line, else in the script's `#SBATCH` lines (the command line overrides them, as sbatch does)."""
    words = (line or "").split()
    said = _walk(words[1:] if words and not words[0].startswith("-") else words)  # words[0]: the sbatch command
    if said is None:
        for words in directives(script or ""):  # each line on its own: a quoted value ends only its line's walk
            line_said = _walk(words)
            said = line_said if line_said is not None else said
    return said


def directives(script: str) -> list[list[str]]:
    """The words of each of a batch script's `#SBATCH` lines, which sbatch reads up to the script's first command (a
    line that is neither blank nor a comment), split as a shell would (quotes; a `#` word starts a comment)."""
    lines: list[list[str]] = []
    for line in script.splitlines():
        text = line.strip()
        if text and not text.startswith("#"):
            break
        parts = text.split(None, 1)
        if parts and parts[0] == "#SBATCH":
            rest = parts[1] if len(parts) > 1 else ""
            try:  # the user's own text: quotes mean what a shell makes of them, `#` starts a comment
                lines.append(shlex.split(rest, comments=True))
            except ValueError:  # an unbalanced quote
                words = rest.split()
                lines.append(words[: next((i for i, w in enumerate(words) if w.startswith("#")), len(words))])
    return lines


def _walk(words: list[str]) -> bool | None:
    found, i = None, 0
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

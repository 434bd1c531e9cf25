"""`--requeue` / `--no-requeue` read from a job's recorded submit line (sbatch's arguments joined by spaces) as
sbatch reads its options."""
from __future__ import annotations

import pytest

from shockwave_lab.imports.submit_line import requeue_of


@pytest.mark.parametrize(
    "line,said",
    [
        ("/usr/bin/sbatch --no-requeue job.sh", False),
        ("/usr/bin/sbatch --requeue -J x job.sh", True),
        ("sbatch --requeue --gres=gpu:2 --no-requeue job.sh", False),            # the last one wins
        ("sbatch --no-requeue --requeue job.sh", True),
        ("sbatch -J train job.sh --no-requeue", None),                          # the script's own argument
        ("sbatch job.sh --requeue", None),
        ("sbatch -J --no-requeue job.sh", None),                                # -J's value: a job name
        ("sbatch --job-name --no-requeue job.sh", None),                        # a long option's value
        ("sbatch --job-name=x --no-requeue job.sh", False),
        ("sbatch -HJname --no-requeue job.sh", False),                         # short flags, an attached value
        ("sbatch -H --no-requeue job.sh", False),                              # -H takes no value
        ("sbatch --hold --parsable --no-requeue job.sh", False),
        ("sbatch --exclusive --no-requeue job.sh", False),                      # optional value: only with =
        # recorded unquoted: `--wrap "python t.py --no-requeue"`; a value with spaces ends the walk
        ("sbatch --wrap python t.py --no-requeue", None),
        ("sbatch --no-requeue --wrap python t.py --requeue", False),
        ("sbatch -J bob's --no-requeue job.sh", False),                         # a quote is just a character
        ("/usr/bin/sbatch --parsable -D /w -o /w/out.%j -J requeued --requeue --gres=gpu:4 --wrap sleep 6", True),
        ("sbatch -- --no-requeue", None),
        ("sbatch", None),
        ("", None),
        (None, None),
    ],
)
def test_requeue_of(line, said):
    assert requeue_of(line) is said


SCRIPT = """#!/bin/bash
#SBATCH -J "my job" --no-requeue
#SBATCH --gres=gpu:1   # one GPU --requeue
#SBATCH--requeue

python train.py
#SBATCH --requeue
"""


@pytest.mark.parametrize(
    "line,script,said",
    [
        ("sbatch job.sh", SCRIPT, False),                      # quotes and comments as a shell reads them
        ("sbatch job.sh", '#SBATCH -J "unbalanced --requeue\n#SBATCH --no-requeue', False),  # each line on its own
        ("sbatch --requeue job.sh", SCRIPT, True),             # the command line overrides them
        ("sbatch job.sh", "#!/bin/sh\n#SBATCH --requeue\n#SBATCH --no-requeue\n", False),   # the last one wins
        ("sbatch job.sh", "#!/bin/sh\necho hi\n#SBATCH --no-requeue\n", None),             # after the first command
        ("sbatch job.sh", "#!/bin/sh\n#SBATCH --time=10 # --no-requeue\n", None),           # a comment
        (None, "#SBATCH --no-requeue", False),                  # 22.05 or no submit line: the script alone
        ("sbatch job.sh", "", None),
        ("sbatch job.sh", None, None),
    ],
)
def test_requeue_of_a_script(line, script, said):
    assert requeue_of(line, script) is said

"""`python bench/study.py ...`: the lab's shockwave_lab.bench.study_cli (its --help says what it does)."""
import sys

from shockwave_lab.bench.study_cli import main

sys.exit(main())

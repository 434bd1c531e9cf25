"""`python bench/study.py ...`: the lab's shockwave_lab.bench.study (its --help says what it does)."""
import sys

from shockwave_lab.bench.study import main

sys.exit(main())

"""`python bench/study_public_starts.py ...`: the lab's shockwave_lab.bench.study_public_starts (its --help says what it does)."""

import sys

from shockwave_lab.bench.study_public_starts import main

sys.exit(main())

"""`python bench/study_elastic_starts.py ...`: the lab's shockwave_lab.bench.study_elastic_starts (its --help says what it does)."""

import sys

from shockwave_lab.bench.study_elastic_starts import main

sys.exit(main())

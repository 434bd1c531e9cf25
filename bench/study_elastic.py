"""`python bench/study_elastic.py ...`: the lab's shockwave_lab.bench.study_elastic (its --help says what it does)."""

import sys

from shockwave_lab.bench.study_elastic import main

sys.exit(main())

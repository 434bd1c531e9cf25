"""`python bench/study_public.py ...`: the lab's shockwave_lab.bench.study_public (its --help says what it does)."""

import sys

from shockwave_lab.bench.study_public import main

sys.exit(main())

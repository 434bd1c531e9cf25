"""`python bench/whatif_speed.py ...`: the lab's shockwave_lab.bench.whatif_speed (its --help says what it does)."""

import sys

from shockwave_lab.bench.whatif_speed import main

sys.exit(main())

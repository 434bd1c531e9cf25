"""`python bench/preemption_cost.py ...`: the lab's shockwave_lab.bench.preemption_cost (its --help says what)."""

import sys

from shockwave_lab.bench.preemption_cost import main

sys.exit(main())

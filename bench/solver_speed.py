"""`python bench/solver_speed.py ...`: the lab's shockwave_lab.bench.solver_speed (its --help says what it does)."""
import sys

from shockwave_lab.bench.solver_speed import main

sys.exit(main())

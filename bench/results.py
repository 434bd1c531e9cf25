"""`python bench/results.py ...`: the lab's shockwave_lab.bench.results (its --help says what it does)."""
import sys

from shockwave_lab.bench.results import main

sys.exit(main())

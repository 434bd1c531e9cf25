"""`python bench/controller_round.py ...`: the lab's shockwave_lab.bench.controller_round (its --help says what it does)."""
import sys

from shockwave_lab.bench.controller_round import main

sys.exit(main())

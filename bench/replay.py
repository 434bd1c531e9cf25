"""`python bench/replay.py ...`: the lab's shockwave_lab.bench.replay (its --help says what it does)."""
import sys

from shockwave_lab.bench.replay import main

sys.exit(main())

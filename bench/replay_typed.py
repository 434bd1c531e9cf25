"""`python bench/replay_typed.py ...`: the lab's shockwave_lab.bench.replay_typed (its --help says what it does)."""
import sys

from shockwave_lab.bench.replay_typed import main

sys.exit(main())

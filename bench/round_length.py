"""`python bench/round_length.py ...`: the lab's shockwave_lab.bench.round_length (its --help says what it does)."""
import sys

from shockwave_lab.bench.round_length import main

sys.exit(main())

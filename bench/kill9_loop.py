"""`python bench/kill9_loop.py ...`: the lab's shockwave_lab.bench.kill9_loop (its --help says what it does)."""
import sys

from shockwave_lab.bench.kill9_loop import main

sys.exit(main())

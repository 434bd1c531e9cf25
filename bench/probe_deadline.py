"""`python bench/probe_deadline.py ...`: the lab's shockwave_lab.bench.probe_deadline (its --help says what it does)."""
import sys

from shockwave_lab.bench.probe_deadline import main

sys.exit(main())

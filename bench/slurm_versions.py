"""`python bench/slurm_versions.py ...`: the lab's shockwave_lab.bench.slurm_versions (its --help says what it does)."""
import sys

from shockwave_lab.bench.slurm_versions import main

sys.exit(main())

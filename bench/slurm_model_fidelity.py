"""`python bench/slurm_model_fidelity.py ...`: the lab's shockwave_lab.bench.slurm_model_fidelity (see its --help)."""

import sys

from shockwave_lab.bench.slurm_model_fidelity import main

sys.exit(main())

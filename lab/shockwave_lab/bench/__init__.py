"""The study and the benchmarks: each module a command (`python -m shockwave_lab.bench.<name>`, or the script of
the same name in the checkout's `bench/`), writing its figures into the checkout's `docs/` and `bench/results/`.
They run from a checkout (the lab installed editable, as `.ci/setup` does): `ROOT` is that checkout."""
from __future__ import annotations

from pathlib import Path

#: the checkout this lab is installed from (lab/shockwave_lab/bench/ -> the repository root)
ROOT = Path(__file__).resolve().parents[3]

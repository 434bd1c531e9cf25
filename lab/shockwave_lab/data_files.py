"""Where the bundled reference data lives, and lookups by short name."""
from __future__ import annotations

from pathlib import Path

from slurm_shockwave.policy_settings import BUNDLED_CONFIGS as CONFIGS

DATA = Path(__file__).resolve().parent / "data"
TRACES = DATA / "traces"
THROUGHPUTS = DATA / "throughputs"
PROFILES = DATA / "profiles"
REFERENCE_RESULTS = DATA / "reference_results"

# short names of the reference experiments: trace, throughputs, GPUs, Shockwave config, profile
EXPERIMENTS = {
    "tacc_32gpus": ("120_0.2_5_100_40_25_0,0.5,0.5_0.6,0.3,0.09,0.01_multigpu_dynamic.trace",
                    "tacc_throughputs.json", 32, "tacc_32gpus.json", "profile_120jobs_tacc_32gpus.json"),
    "scale_64gpus": ("220_0.2_5_100_25_4_0,0.5,0.5_0.6,0.3,0.09,0.01_multigpu_dynamic.trace",
                     "wisr_throughputs.json", 64, "scale_64gpus.json", "profile_220jobs_scale_64gpus.json"),
    "scale_256gpus": ("900_0.2_5_1000_5_15_0,0.5,0.5_0.6,0.3,0.09,0.01_multigpu_dynamic.trace",
                      "wisr_throughputs.json", 256, "scale_256gpus.json", "profile_900jobs_scale_256gpus.json"),
}
DEFAULT_EXPERIMENT = "tacc_32gpus"


def experiment_paths(name: str) -> dict:
    """Paths of a bundled experiment.  `config` and `reference_config` are both the reference's own Shockwave
    config for it (data for reproducing the reference only: `simulate` and the controller use the one
    built-in configuration, ShockwaveConfig())."""
    trace, thr, gpus, config, profile = EXPERIMENTS[name]
    return {"trace": TRACES / trace, "throughputs": THROUGHPUTS / thr, "gpus": gpus,
            "config": CONFIGS / config, "reference_config": CONFIGS / Path(config).name,
            "profile": PROFILES / profile}


def bundled_profile_for(trace_path, throughputs_path) -> Path | None:
    """The bundled profile generated for exactly this trace and throughputs file, if any."""
    for name in EXPERIMENTS:
        p = experiment_paths(name)
        if Path(trace_path).name == p["trace"].name and Path(throughputs_path).name == p["throughputs"].name:
            return p["profile"]
    return None

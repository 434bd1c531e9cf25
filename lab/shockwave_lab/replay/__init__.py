"""`shockwave replay`: a trace on a real local Slurm cluster with emulated jobs, beside its simulation."""

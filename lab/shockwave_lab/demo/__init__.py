"""The main job, end to end (`shockwave demo`, emulated.py): a contended trace replayed on a local Slurm cluster
with emulated jobs as several users, under plain Slurm and under the Shockwave controller, with the same
workload's simulated result beside each."""

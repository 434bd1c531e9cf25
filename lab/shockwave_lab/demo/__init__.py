"""The main job, end to end: a local Slurm cluster, a mixed workload from the job templates submitted as
several users, the controller with short rounds, `shockwave status` as it goes, and a summary with the
same workload's simulated result beside it."""

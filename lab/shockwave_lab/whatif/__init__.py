"""`shockwave whatif` (docs/whatif.md): what would the default policy have done on my cluster?

`inputs` reads the site (sacct history, nodes, `scontrol show config`, sshare), `site_model` is its Slurm in the
simulator, `run` simulates the history under it and under the default, `compare` reduces both per account and per
user, `render` writes the text, JSON and HTML.
"""

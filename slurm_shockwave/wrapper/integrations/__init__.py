"""Small optional modules that plug Shockwave's job side into the training frameworks people use.

Each module imports its framework only when it is itself imported (``from slurm_shockwave.wrapper.integrations
import lightning`` needs ``lightning``; nothing here imports it otherwise).  ``pip install
'slurm-shockwave[frameworks]'`` installs the frameworks the project tests against.
"""

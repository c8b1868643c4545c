"""The Slurm runtime: its job, its steps, its container platforms, its command lines,
Slurm's own commands and the cluster file's ``slurm:`` section (``runtime.py`` says which
file holds what)."""

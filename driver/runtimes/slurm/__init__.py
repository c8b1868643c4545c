"""Slurm support: the cluster file's ``slurm:`` section and the client of Slurm's commands."""

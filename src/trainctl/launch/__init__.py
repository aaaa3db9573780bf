"""Launching runs: the run folder, local processes (torchrun / python), Ray clusters and Ray jobs."""

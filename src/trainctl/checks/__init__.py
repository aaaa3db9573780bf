"""Checks that run before anything starts. Each takes a Subject (the typed trainctl config and the backend config
built from it, trainctl.checks.base) and returns Problems; the plan collects them all.

values      trainctl's own settings beyond their types (a run name that names a folder, the data format)
types       every backend value against the type and range its backend declares (verl's and TRL's dataclasses)
ppo/sft/dpo what each backend leaves to run time: registries, batch arithmetic, parallelism, lengths, legacy keys
files       the model and data the run reads
data        the cheap part of `trainctl data check` on the files the run reads
environment credentials and cluster addresses
memory      whether the run fits in GPU memory (trainctl's estimate)
native      the backend's own validation (imports verl / TRL: the slow part)
"""

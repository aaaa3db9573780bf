"""Checks that run before anything starts. Each returns Problems; the plan collects them all.

values      trainctl's own settings (types, ranges, choices)
ppo/sft/dpo what each backend leaves to run time: registries, batch arithmetic, parallelism, lengths, legacy keys
files       the model and data the run reads
native      the backend's own validation (imports verl / TRL: the slow part)
"""

"""Code that runs inside trainer processes (torchrun ranks, Ray workers, the DPO entry point), apart from the
translation of configs: verl's CPU platform and its patches, the `hf` rollout, TRL's DPO entry point.

Nothing here imports trainctl.plan, trainctl.checks or trainctl.cli (tests/test_layers.py): a trainer
process loads only what it runs.
"""

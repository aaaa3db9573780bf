"""Reward functions trainctl ships, called by verl's reward workers (`reward=arith`: conf/reward/arith.yaml)."""

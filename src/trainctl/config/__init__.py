"""Config composition: trainctl's groups, composed with Hydra, into one trainctl config."""

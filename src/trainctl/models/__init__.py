"""Models: the `model` group's names, pulling from the hubs, inspection, and the tiny local model."""

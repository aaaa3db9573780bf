"""trainctl: declarative post-training for LLMs on verl and TRL."""

__version__ = "0.1.0"

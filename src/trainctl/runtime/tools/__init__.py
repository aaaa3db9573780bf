"""Tool servers trainctl ships (each runnable on its own, e.g. `python -m trainctl.runtime.tools.calculator`)."""

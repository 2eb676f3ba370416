"""The shipped Crafter v0's memory routine: the agent tests count LOG turns under its ``log_every``."""

from automem_dagster.scaffold import load_scaffold

SHIPPED = load_scaffold("crafter", 0).routine
LOG_EVERY = SHIPPED.log_every
"""The shipped v0's ``log_every``."""

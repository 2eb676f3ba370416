"""The structure loop as assets: rollouts, diagnosis, candidate, and the champion decision."""

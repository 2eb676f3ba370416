"""A loop's plan (``loop/round_plan.py``) made into Dagster definitions: one asset per step (``assets``),
the typed values those assets pass to each other (``values``), the challenger's gate check, jobs and promotion
(``challenger``), the sensors that chain them, and the data versions that mark what a new champion made stale."""

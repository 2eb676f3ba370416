"""The run config: a round's options as Dagster config (``config``), what every round job and asset is
configured with. Kept in its own package while the loops' typed configs are rewritten beside it."""

"""How a round's steps run: the game partitions a run is for, the seed shards a batch fans out into, the
Celery executor's settings, the run tags the run queue limits key on, and the IO manager that stores
the values passed between steps. Nothing here knows what a step computes."""

"""What every domain shares: resources, partitions, run config and metadata shaping."""

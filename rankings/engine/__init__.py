"""The exact engine: windows, the tick, shards, the Redis store, the recompute and pruning."""

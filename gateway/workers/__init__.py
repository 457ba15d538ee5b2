"""The worker plane: the `Worker` interface, the co-located worker, remote workers, the pool, the
router and its KV-event index."""

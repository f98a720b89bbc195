"""The node process: membership, control-store shard, scheduler, object store and worker pool."""

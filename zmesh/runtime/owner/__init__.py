"""The owner: the core client of drivers and workers (submission, ownership, actor calls)."""

"""The worker process: runs tasks and actor calls handed to it by its node."""

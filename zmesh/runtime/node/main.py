"""Entry point of a node process: import what the node and its workers share, fork the fork
server, then import and run the node.

The fork server imports the worker's own modules while this process imports the node's, so
on two cores a node and its first worker are ready in about the time of the slower import;
the driver that started this process imports its client meanwhile.
"""

from __future__ import annotations

import importlib
import logging
import os
import sys

# What the node and every worker both run: imported once, before the fork, so the fork server
# inherits it (pages shared with the node too) rather than compiling and running it again
# beside the node; none starts a thread or a zmq context at import, so the fork stays safe.
SHARED_MODULES = ("zmesh.runtime.loop", "zmesh.runtime.values", "zmesh.runtime.strategies",
                  "zmesh.security.identity", "zmesh.store.mapping",
                  "zmesh.runtime.owner.node_watch")


def main() -> None:
    argv = sys.argv[1:]
    if "--session-dir" in argv:
        session_dir = argv[argv.index("--session-dir") + 1]
        for name in SHARED_MODULES:
            importlib.import_module(name)
        from zmesh.runtime.node.worker_pool import fork_server_early

        fork_server_early(f"ipc://{os.path.join(session_dir, 'node.sock')}", session_dir)
    from zmesh.runtime.node import launch

    launch.run_main(argv)  # returns once the node's teardown released all it held
    # The interpreter's own exit would collect and finalize every module first (~50-100 ms
    # that its driver's shutdown() waits for) and free nothing the teardown did not.
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()

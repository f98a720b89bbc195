"""Entry point of a node process: fork the fork server first, then import and run the node.

The fork server imports the worker's modules while this process imports the node's, so on
two cores a node and its first worker are ready in about the time of the slower import.
"""

from __future__ import annotations

import os
import sys


def main() -> None:
    argv = sys.argv[1:]
    if "--session-dir" in argv:
        session_dir = argv[argv.index("--session-dir") + 1]
        from zmesh.runtime.node.worker_pool import fork_server_early

        fork_server_early(f"ipc://{os.path.join(session_dir, 'node.sock')}", session_dir)
    from zmesh.runtime.node import launch

    launch.run_main(argv)


if __name__ == "__main__":
    main()

"""`python -m zmesh.ray_compat script.py [args]` (or `-m module [args]`): run a Ray program
on zmesh, with `import ray` resolving to zmesh in the program and in all its workers."""

from __future__ import annotations

import os
import runpy
import sys

from zmesh.ray_compat import install

USAGE = "usage: python -m zmesh.ray_compat (SCRIPT | -m MODULE) [ARGS...]"


def main(argv: list[str]) -> None:
    if not argv or argv[0] in ("-h", "--help"):
        print(USAGE)
        raise SystemExit(0 if argv else 2)
    install()
    if argv[0] == "-m":
        if len(argv) < 2:
            print(USAGE, file=sys.stderr)
            raise SystemExit(2)
        sys.argv = argv[1:]
        runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
    else:
        sys.argv = list(argv)
        sys.path.insert(0, os.path.dirname(os.path.abspath(argv[0])))
        runpy.run_path(argv[0], run_name="__main__")


if __name__ == "__main__":
    main(sys.argv[1:])

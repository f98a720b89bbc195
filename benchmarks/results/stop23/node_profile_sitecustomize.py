"""cProfile every process that a profiled driver starts (the node), dumped when it exits:
put this file's folder on PYTHONPATH as sitecustomize.py and set NODE_PROF_OUT=/path/prefix;
the first process (the driver) is not profiled, its children are (forks keep the profiler off:
the pid check). Read with node_profile_diff.py."""

import os


def _start() -> None:
    import atexit
    import cProfile

    pr = cProfile.Profile()
    pr.enable()
    me = os.getpid()
    real_exit = os._exit

    def dump() -> None:
        if os.getpid() == me:
            pr.disable()
            pr.dump_stats(os.environ["NODE_PROF_OUT"] + f".{me}")

    def _exit(code: int) -> None:  # main's node leaves through os._exit: no atexit
        dump()
        real_exit(code)

    os._exit = _exit  # type: ignore[assignment]
    atexit.register(dump)


if os.environ.get("NODE_PROF_OUT") and not os.environ.get("_NODE_PROF_SEEN"):
    os.environ["_NODE_PROF_SEEN"] = "1"  # the driver
elif os.environ.get("NODE_PROF_OUT"):
    _start()

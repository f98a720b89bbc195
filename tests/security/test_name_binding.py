"""A key speaks only as the name it was vouched for (issue 7).

A receiving ROUTER used to bind a sender name to a key only while the name's holder had a
connection open, so a member's own vouched key could take the name of a live process whose
connection had idled out (or never opened) and speak for it. The vouch now names the sender
it was made for: a key vouched for one name is refused under any other, connected holder or
not. A new process that legitimately reuses a dead process's address vouches for that
address itself and is admitted.
"""

from __future__ import annotations

import os
import subprocess
import sys

import zmq
from security_fixtures import AnsweringMember, drain_until, member_dealer

from zmesh.security.keys import ClusterCredentials
from zmesh.transports import open_endpoint
from zmesh.transports.zmq_transport import ZmqEndpoint

_OWN_NAME = "tcp://127.0.0.1:9"


def _next(server: ZmqEndpoint, what: str) -> tuple[str, list[bytes]]:
    """The next message `server` receives (one, whatever drops came before it)."""
    item = server.recv(60)
    assert item is not None, f"timed out after 60s waiting for {what}"
    return item[0], [bytes(f) for f in item[1]]


def test_a_member_key_cannot_take_the_name_of_a_live_process_whose_connection_idled_out(
        creds: ClusterCredentials, ctx: zmq.Context[zmq.Socket[bytes]]) -> None:
    with open_endpoint("tcp://127.0.0.1:0", credentials=creds) as server, \
            open_endpoint("tcp://127.0.0.1:0", credentials=creds) as victim:
        assert isinstance(server, ZmqEndpoint) and isinstance(victim, ZmqEndpoint)
        victim.send(server.address, [b"real-1"])
        assert server.recv(60) == (victim.address, [b"real-1"])
        # The victim's connection idles out (close_idle closes all but the one last used).
        victim.send("tcp://127.0.0.1:1", [b"elsewhere"])
        assert victim.close_idle(0.0) == 1
        drain_until(server, lambda: server.peers.reap() >= 0
                    and server.peers.sizes()["live_names"] == 0,
                    "the server to see the victim's connection close")
        # A member with a genuine vouch -- for its own name -- claims the idle victim's.
        own = AnsweringMember(ctx, creds)  # where that member receives, and answers
        try:
            forger = member_dealer(ctx, creds, server.address, sender=victim.address,
                                   vouched_for=own.address, keypair=own.keypair)
            forger.send(b"forged")
            got = drain_until(server, lambda: server.peers.refused_unvouched >= 1,
                              "the claim to the idle process's name to be refused")
            assert got == []
            # The victim reconnects and is still itself.
            victim.send(server.address, [b"real-2"])
            assert _next(server, "the victim's next message") == (victim.address, [b"real-2"])
            # Control: the same key under the name it was vouched for is accepted.
            honest = member_dealer(ctx, creds, server.address, sender=own.address,
                                   keypair=own.keypair)
            honest.send(b"own name")
            assert _next(server, "the honest message") == (own.address, [b"own name"])
            assert server.peers.refused_spoof == 0
        finally:
            own.close()


def test_a_member_key_cannot_take_the_name_of_a_process_that_never_connected(
        creds: ClusterCredentials, ctx: zmq.Context[zmq.Socket[bytes]]) -> None:
    with open_endpoint("tcp://127.0.0.1:0", credentials=creds) as server, \
            open_endpoint("tcp://127.0.0.1:0", credentials=creds) as silent:
        assert isinstance(server, ZmqEndpoint)
        forger = member_dealer(ctx, creds, server.address, sender=silent.address,
                               vouched_for=_OWN_NAME)
        forger.send(b"forged")
        got = drain_until(server, lambda: server.peers.refused_unvouched >= 1,
                          "the claim to the silent process's name to be refused")
        assert got == []
        silent.send(server.address, [b"first"])
        assert _next(server, "the real process's message") == (silent.address, [b"first"])


_SUCCESSOR = """
import sys
from zmesh.transports import open_endpoint
bind, server = sys.argv[1:3]
with open_endpoint(bind) as ep:
    ep.send(server, [b"successor"])
    assert ep.recv(60) == (server, [b"ack"]), "no answer from the server"
"""


def test_a_new_process_reusing_a_dead_process_address_is_admitted(
        creds: ClusterCredentials) -> None:
    """The old holder exits; a new process (its own key and vouch) binds the same port."""
    with open_endpoint("tcp://127.0.0.1:0", credentials=creds) as server:
        assert isinstance(server, ZmqEndpoint)
        old = open_endpoint("tcp://127.0.0.1:0", credentials=creds)
        name = old.address
        old.send(server.address, [b"old"])
        assert server.recv(60) == (name, [b"old"])
        old.close()
        env = dict(os.environ, ZMESH_TOKEN=creds.token)
        proc = subprocess.Popen([sys.executable, "-c", _SUCCESSOR, name, server.address],
                                env=env)
        try:
            assert _next(server, "the successor's message") == (name, [b"successor"])
            server.send(name, [b"ack"])
            # The successor asks the server's address who it is before taking the ack: a
            # process is proven by receiving, so the server keeps receiving meanwhile.
            drain_until(server, lambda: proc.poll() is not None, "the successor to exit")
            assert proc.returncode == 0
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        assert server.peers.counts()["unvouched"] == 0
        assert server.peers.counts()["spoof"] == 0

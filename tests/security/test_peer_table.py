"""A ROUTER forgets each connection when it closes (issue 7): the table of who is on each
connection stays as large as the connections open, however many came and went, and a name
is free again once its holder's last connection closes (a tcp name passes to a new key once
the new key proves it receives there). Close reports come from a monitor socket, so nothing
extra reaches a handler or counts as malformed."""

from __future__ import annotations

import pytest
import zmq
from security_fixtures import AnsweringMember, member_dealer, process_keypair, wait_until

from zmesh.security.keys import ClusterCredentials
from zmesh.transports import open_endpoint
from zmesh.transports.zmq_transport import ZmqEndpoint


def _receive(server: ZmqEndpoint, got: list[tuple[str, list[bytes]]],
             done: object, what: str) -> None:
    def step() -> bool:
        item = server.recv(0.05)
        if item is not None:
            got.append((item[0], [bytes(f) for f in item[1]]))
        return bool(done())  # type: ignore[operator]
    wait_until(step, 120, what)


@pytest.mark.parametrize("total", [
    300,  # 2,000 CURVE handshakes take ~100 s on a loaded 2-core machine: that one is a soak
    pytest.param(2000, marks=[pytest.mark.slow, pytest.mark.soak]),
])
def test_closed_connections_are_forgotten_and_the_table_stays_bounded(
        creds: ClusterCredentials, ctx: zmq.Context[zmq.Socket[bytes]], total: int) -> None:
    batch = 50
    with open_endpoint("tcp://127.0.0.1:0", credentials=creds) as server:
        assert isinstance(server, ZmqEndpoint)
        peers = server.peers
        got: list[tuple[str, list[bytes]]] = []
        peak = 0
        for start in range(0, total, batch):
            # (this process's own key: names it claims need no proof, so only the table of
            # connections is exercised here)
            dealers = [member_dealer(ctx, creds, server.address,
                                     sender=f"tcp://127.0.0.1:{10_000 + start + i}",
                                     keypair=process_keypair())
                       for i in range(batch)]
            for dealer in dealers:
                dealer.send(b"m")
            _receive(server, got, lambda s=start: len(got) >= s + batch,
                     f"messages {start}..{start + batch}")
            peak = max(peak, max(peers.sizes().values()))
            for dealer in dealers:
                dealer.close(linger=0)
        _receive(server, got, lambda: peers.reap() >= 0 and peers.disconnects >= total,
                 "every close to be noticed")
        assert peers.sizes() == {"connections": 0, "names": 0, "replies": 0,
                                 "live_names": 0, "vouched": 0, "owners": 0, "refused": 0,
                                 "proving": 0, "held": 0}
        # Without the close reports the tables would hold `total` entries here.
        assert peak <= 2 * batch, peers.sizes()
        assert len(got) == total and all(frames == [b"m"] for _, frames in got)
        assert peers.counts() == {"unnamed": 0, "version": 0, "unvouched": 0, "spoof": 0,
                                  "unproven": 0, "overflow": 0}


def test_a_tcp_name_passes_to_a_new_key_that_receives_at_its_address(
        creds: ClusterCredentials, ctx: zmq.Context[zmq.Socket[bytes]]) -> None:
    """A holder exits and a new process (a key of its own) binds its port: the new key
    proves the address and takes the name, with no refusal; the old key is refused."""
    with open_endpoint("tcp://127.0.0.1:0", credentials=creds) as server:
        assert isinstance(server, ZmqEndpoint)
        peers = server.peers
        first = AnsweringMember(ctx, creds)
        name, old_keys = first.address, first.keypair
        holder = member_dealer(ctx, creds, server.address, sender=name, keypair=old_keys)
        # an empty message of a peer is still delivered (escaped on the wire: an empty
        # first frame marks an envelope, see transports.zmq_batch)
        holder.send_multipart([b"", b"", b""])
        got: list[tuple[str, list[bytes]]] = []
        _receive(server, got, lambda: len(got) >= 1, "the holder's empty message")
        assert got == [(name, [b""])]
        assert peers.sizes()["owners"] == 1
        holder.close(linger=0)
        first.close()
        second = AnsweringMember(ctx, creds, port=int(name.rsplit(":", 1)[1]))
        try:
            successor = member_dealer(ctx, creds, server.address, sender=name,
                                      keypair=second.keypair)
            successor.send(b"new")
            _receive(server, got, lambda: len(got) >= 2, "the successor's message")
            assert got[1] == (name, [b"new"])
            assert peers.refused_spoof == 0 and second.answered == 1
            # The old key, back under that name, is now asked about and refused.
            stale = member_dealer(ctx, creds, server.address, sender=name, keypair=old_keys)
            stale.send(b"stale")
            _receive(server, got, lambda: peers.refused_spoof >= 1, "the stale key's refusal")
            assert len(got) == 2 and second.answered == 2
        finally:
            second.close()


def test_answers_go_to_an_open_connection_when_the_latest_one_closes(
        creds: ClusterCredentials, ctx: zmq.Context[zmq.Socket[bytes]]) -> None:
    """A process with two connections (one key, one name) closes the newer one: an answer
    sent back to its name arrives on the older one, instead of failing on the closed one."""
    member = AnsweringMember(ctx, creds)
    name, keypair = member.address, member.keypair
    with open_endpoint("tcp://127.0.0.1:0", credentials=creds) as server:
        assert isinstance(server, ZmqEndpoint)
        peers = server.peers
        older = member_dealer(ctx, creds, server.address, sender=name, keypair=keypair)
        older.send(b"1")
        got: list[tuple[str, list[bytes]]] = []
        _receive(server, got, lambda: len(got) >= 1, "the older connection's message")
        newer = member_dealer(ctx, creds, server.address, sender=name, keypair=keypair)
        newer.send(b"2")
        _receive(server, got, lambda: len(got) >= 2, "the newer connection's message")
        assert got == [(name, [b"1"]), (name, [b"2"])] and peers.refused_spoof == 0
        newer.close(linger=0)
        _receive(server, got, lambda: peers.reap() >= 0 and peers.disconnects >= 1,
                 "the newer connection's close to be noticed")
        assert peers.sizes()["connections"] == 1
        assert server.send_back(name, [b"answer"])
        assert older.poll(30_000), "the answer never reached the open connection"
        assert older.recv() == b"answer"
        older.close(linger=0)
    member.close()

"""A member holding the mesh secret cannot speak for another process (issue 7).

Every process of a mesh holds the secret, so it can mint a valid vouch for any sender name.
A ROUTER therefore asks the address a tcp sender claims who receives there before it takes
anything from it (`zmesh.transports.zmq_proof`). Here a forger process (the token, a key of
its own, a vouch minted for another process's name) sends a `CreateActor` whose pickled class
writes a marker file, claiming to be:

(a) a live member that never contacted the node; (b) one that did, whose connection then
closed; (c) one that exited, whose address nobody listens on; and the real driver of a
two-node tcp mesh, to the node it has not talked to.

In each case the marker never appears, the node counts the refusal, stays up, and the real
process (and the driver's work on both nodes) still goes through. Before proofs of address,
each of these claims was accepted (the marker appeared). The last tests check the mechanism
on bare endpoints: one challenge for two connections of one process, garbage on proof
connections, wrong answers, time-outs and retries, the held-message bound, and shutdown.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator

import pytest
import zmq
from security_fixtures import AnsweringMember, drain_until, member_dealer, wait_until

import zmesh
from zmesh.runtime import context
from zmesh.security.keys import ClusterCredentials
from zmesh.testing import Cluster, ClusterNode
from zmesh.transports import open_endpoint
from zmesh.transports.zmq_proof import AddressProofs, answer_frame, challenge_frame
from zmesh.transports.zmq_transport import ZmqEndpoint
from zmesh.util.scheduling_strategies import NodeAffinitySchedulingStrategy

_PROOF_TIMEOUT = "3"  # the nodes' ZMESH_PROOF_TIMEOUT: case (c) waits this long

_MEMBER = """
import select, sys
from zmesh.protocol import codec
from zmesh.protocol.messages import runtime as m
from zmesh.transports import open_endpoint
ep = open_endpoint("tcp://127.0.0.1:0")  # the mesh's token comes in $ZMESH_TOKEN
print("address", ep.address, flush=True)
asked = 0
while True:
    if select.select([sys.stdin], [], [], 0)[0]:
        words = sys.stdin.readline().split()
        if not words or words[0] == "exit":
            break
        if words[0] == "contact":
            asked += 1
            ep.send(words[1], [codec.encode(m.Query(request_id=asked, what="metrics"))])
        elif words[0] == "disconnect":
            ep.disconnect(words[1])
            print("disconnected", flush=True)
    item = ep.recv(0.05)
    if item is not None:
        print("answer", item[0], flush=True)
ep.close()
"""

_FORGER = """
import os, sys
sys.path[:0] = [sys.argv[1]]
import zmq
import security_fixtures as f
from zmesh.security.keys import ClusterCredentials
creds = ClusterCredentials.from_token(os.environ["ZMESH_TOKEN"])
node, victim, marker = sys.argv[2:5]
ctx = zmq.Context()
forged = f.member_dealer(ctx, creds, node, sender=victim)  # a vouch minted for `victim`
forged.send(f.encode(f.create_actor_with_pickle(marker, victim)))
print("sent", flush=True)
sys.stdin.read()  # connected until the test is done with it
ctx.destroy(linger=0)
"""


@zmesh.remote
def where() -> str:
    return zmesh.get_runtime_context().get_node_id()


@zmesh.remote
class Counter:
    def __init__(self) -> None:
        self.n = 0

    def add(self, k: int) -> int:
        self.n += k
        return self.n


class _Member:
    """A member process of the mesh (a zmesh endpoint in a subprocess) that the test drives."""

    def __init__(self, mesh: Cluster) -> None:
        env = dict(os.environ, ZMESH_TOKEN=mesh.credentials.token)
        self.proc = subprocess.Popen([sys.executable, "-c", _MEMBER], env=env, text=True,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        assert self.proc.stdout is not None
        first = self.proc.stdout.readline().split()
        assert first[:1] == ["address"], f"the member did not start: {first}"
        self.address = first[1]
        self.lines: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.strip())

    def _say(self, line: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    def contact(self, node: ClusterNode) -> None:
        """Ask `node` something and wait for its answer."""
        answers = self.lines.count(f"answer tcp://{node.address}")
        self._say(f"contact tcp://{node.address}")
        wait_until(lambda: self.lines.count(f"answer tcp://{node.address}") > answers, 60,
                   f"the member's answer from {node.address}")

    def disconnect(self, node: ClusterNode) -> None:
        done = self.lines.count("disconnected")
        self._say(f"disconnect tcp://{node.address}")
        wait_until(lambda: self.lines.count("disconnected") > done, 60, "the disconnect")

    def exit(self) -> None:
        if self.proc.poll() is None:
            self._say("exit")
            self.proc.wait(60)

    def __enter__(self) -> _Member:
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            self.exit()
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()


class _Forger:
    """A process with the token that claims `victim`'s name to `node` (until closed)."""

    def __init__(self, mesh: Cluster, node: ClusterNode, victim: str, marker: str) -> None:
        env = dict(os.environ, ZMESH_TOKEN=mesh.credentials.token)
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _FORGER, os.path.dirname(__file__),
             f"tcp://{node.address}", victim, marker],
            env=env, text=True, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        assert self.proc.stdout is not None
        assert self.proc.stdout.readline().strip() == "sent", "the forger did not send"

    def __enter__(self) -> _Forger:
        return self

    def __exit__(self, *exc: object) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        try:
            self.proc.wait(60)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()


@pytest.fixture(scope="module")
def pair() -> Iterator[Cluster]:
    """A two-node tcp mesh (its own token) whose nodes give a claim 3 s to be proven."""
    saved = os.environ.get("ZMESH_PROOF_TIMEOUT")
    os.environ["ZMESH_PROOF_TIMEOUT"] = _PROOF_TIMEOUT
    try:
        cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1},
                          shutdown_at_exit=False)
        try:
            cluster.add_node(num_cpus=1)
        except BaseException:
            cluster.shutdown()
            raise
    finally:
        if saved is None:
            os.environ.pop("ZMESH_PROOF_TIMEOUT", None)
        else:
            os.environ["ZMESH_PROOF_TIMEOUT"] = saved
    try:
        yield cluster
    finally:
        if zmesh.is_initialized():
            zmesh.shutdown()
        cluster.shutdown()


def _refusals(mesh: Cluster, node: ClusterNode) -> dict[str, int]:
    counts = mesh.query(node, "metrics")["refused_connections"]
    return {k: int(v) for k, v in counts.items()}


def _refused(mesh: Cluster, node: ClusterNode, what: str, before: dict[str, int]) -> None:
    wait_until(lambda: _refusals(mesh, node).get(what, 0) > before.get(what, 0), 60,
               f"{node.address} to count the forged claim as {what!r}")


def test_a_forged_vouch_for_a_live_member_that_never_contacted_the_node_is_refused(
        pair: Cluster, tmp_path: object) -> None:
    node = pair.head_node
    assert node is not None
    marker = os.path.join(str(tmp_path), "forged-ran")
    with _Member(pair) as victim:
        before = _refusals(pair, node)
        with _Forger(pair, node, victim.address, marker):
            _refused(pair, node, "spoof", before)  # the victim's address denied the key
        victim.contact(node)  # the real process is served, and is still itself
        assert node.alive()
    assert not os.path.exists(marker), "a message with a forged name reached a handler"


def test_a_forged_vouch_for_a_member_whose_connection_closed_is_refused(
        pair: Cluster, tmp_path: object) -> None:
    node = pair.head_node
    assert node is not None
    marker = os.path.join(str(tmp_path), "forged-ran")
    with _Member(pair) as victim:
        victim.contact(node)
        victim.disconnect(node)  # (a name used to be free once its connections closed)
        before = _refusals(pair, node)
        with _Forger(pair, node, victim.address, marker):
            _refused(pair, node, "spoof", before)
        victim.contact(node)
        assert node.alive()
    assert not os.path.exists(marker), "a message with a forged name reached a handler"


def test_a_forged_vouch_for_a_process_that_exited_is_dropped_unproven(
        pair: Cluster, tmp_path: object) -> None:
    node = pair.head_node
    assert node is not None
    marker = os.path.join(str(tmp_path), "forged-ran")
    with _Member(pair) as gone:
        gone.contact(node)
        name = gone.address
    # Its process exited: nobody receives at its address to answer for any key.
    before = _refusals(pair, node)
    with _Forger(pair, node, name, marker):
        _refused(pair, node, "unproven", before)  # after the nodes' 3 s proof timeout
    assert node.alive()
    assert _refusals(pair, node)["spoof"] == before["spoof"]
    assert not os.path.exists(marker), "a message with a forged name reached a handler"


def test_the_driver_cannot_be_impersonated_and_its_work_on_both_nodes_goes_through(
        pair: Cluster, tmp_path: object) -> None:
    head, other = pair.head_node, next(iter(pair.worker_nodes))
    assert head is not None
    marker = os.path.join(str(tmp_path), "forged-ran")
    zmesh.init(address=f"tcp://{pair.address}")
    try:
        driver = context.current_client().address
        assert driver.startswith("tcp://")
        # Before the driver sends `other` anything, a member claims its name there.
        before = _refusals(pair, other)
        with _Forger(pair, other, driver, marker):
            _refused(pair, other, "spoof", before)  # the driver's own loop answered
        ids = zmesh.get([where.options(scheduling_strategy=NodeAffinitySchedulingStrategy(
            n.node_id, soft=False)).remote() for n in (head, other)], timeout=120)
        assert ids == [head.node_id, other.node_id]
        counter = Counter.options(scheduling_strategy=NodeAffinitySchedulingStrategy(
            other.node_id, soft=False)).remote()
        assert zmesh.get([counter.add.remote(k) for k in (1, 2, 3)], timeout=120) == [1, 3, 6]
        zmesh.kill(counter)
    finally:
        zmesh.shutdown()
    assert head.alive() and other.alive()
    assert not os.path.exists(marker), "a message with a forged name reached a handler"


# -- the mechanism, on bare endpoints ------------------------------------------------------


def test_two_connections_of_one_process_are_proven_by_one_challenge(
        creds: ClusterCredentials, ctx: zmq.Context[zmq.Socket[bytes]]) -> None:
    member = AnsweringMember(ctx, creds)
    try:
        with open_endpoint("tcp://127.0.0.1:0", credentials=creds) as server:
            assert isinstance(server, ZmqEndpoint)
            a, b = (member_dealer(ctx, creds, server.address, sender=member.address,
                                  keypair=member.keypair) for _ in range(2))
            for i in range(3):
                a.send(b"a%d" % i)
                b.send(b"b%d" % i)
            got: list[tuple[str, list[bytes]]] = []

            def all_six() -> bool:  # both connections seen and proofs done can hold early
                item = server.recv(0.1)
                if item is not None:
                    got.append((item[0], [bytes(f) for f in item[1]]))
                return len(got) >= 6 and not server.peers.proofs.busy

            wait_until(all_six, 60, "both connections' six messages")
            assert {name for name, _ in got} == {member.address}
            frames = [f[0] for _, f in got]
            assert [x for x in frames if x.startswith(b"a")] == [b"a0", b"a1", b"a2"]
            assert [x for x in frames if x.startswith(b"b")] == [b"b0", b"b1", b"b2"]
            assert member.answered == 1 and server.peers.proofs.challenges == 1
    finally:
        member.close()


def test_garbage_on_a_proof_connection_never_reaches_the_loop_and_is_answered_only_when_valid(
        creds: ClusterCredentials, ctx: zmq.Context[zmq.Socket[bytes]]) -> None:
    from zmesh.protocol.handshake import PROTOCOL_VERSION
    from zmesh.security import identity

    with open_endpoint("tcp://127.0.0.1:0", credentials=creds) as server:
        assert isinstance(server, ZmqEndpoint)
        # A member's proof connection, as a challenger makes it, sending garbage first.
        proof = ctx.socket(zmq.DEALER)
        proof.linger = 0
        public, secret = zmq.curve_keypair()
        proof.curve_publickey, proof.curve_secretkey = public, secret
        proof.curve_serverkey = creds.curve_public
        for prop in (f"X-Zmesh-Proto:{PROTOCOL_VERSION}", "X-Zmesh-Sender:tcp://127.0.0.1:9",
                     f"X-Zmesh-Key:{public.decode()}",
                     f"X-Zmesh-Vouch:{identity.vouch(creds, public, 'tcp://127.0.0.1:9')}",
                     "X-Zmesh-Proof:challenge"):
            proof.setsockopt(zmq.METADATA, prop.encode())
        proof.connect(server.address)
        garbage = [[os.urandom(n)] for n in (0, 1, 7, 31, 64, 1000, 100_000)]  # (a view)
        garbage += [[challenge_frame(b"x" * 16), b"extra"], [challenge_frame(b"x" * 15)],
                    [answer_frame(b"x" * 16, public)]]
        for frames in garbage:
            proof.send_multipart(frames)
        proof.send(challenge_frame(b"n" * 16))
        got = drain_until(server, lambda: server.peers.proofs.answered >= 1,
                          "the valid challenge to be answered")
        assert got == []
        assert server.peers.proofs.malformed == len(garbage)
        assert proof.poll(30_000), "no answer came back on the proof connection"
        assert proof.recv_multipart() == [answer_frame(b"n" * 16, identity.process_keys().public)]
        proof.close(linger=0)
        # The server still serves: a message of this process's own arrives.
        with open_endpoint("tcp://127.0.0.1:0", credentials=creds) as other:
            other.send(server.address, [b"still here"])
            assert server.recv(60) == (other.address, [b"still here"])


@pytest.mark.parametrize("reply", ["wrong nonce", "garbage", "multipart", "another key",
                                   "not z85", "z85 out of range", "high bytes"])
def test_a_wrong_answer_proves_nothing(creds: ClusterCredentials,
                                       ctx: zmq.Context[zmq.Socket[bytes]], reply: str) -> None:
    other_key = zmq.curve_keypair()[0]
    replies = {
        "wrong nonce": lambda nonce: [answer_frame(bytes(16), keypair[0])],
        "garbage": lambda nonce: [os.urandom(73)],
        "multipart": lambda nonce: [answer_frame(nonce, keypair[0]), b""],
        "another key": lambda nonce: [answer_frame(nonce, other_key)],
        # a key-sized tail that is not a key (z85 raised KeyError / struct.error for these,
        # out of the challenger's recv: its loop died)
        "not z85": lambda nonce: [answer_frame(nonce, b"~" * 40)],
        "z85 out of range": lambda nonce: [answer_frame(nonce, b"#" * 40)],
        "high bytes": lambda nonce: [answer_frame(nonce, b"\xff" * 40)],
    }
    keypair = zmq.curve_keypair()
    member = AnsweringMember(ctx, creds, keypair=keypair, reply=replies[reply])
    try:
        with open_endpoint("tcp://127.0.0.1:0", credentials=creds,
                           proof_timeout=1.0) as server:
            assert isinstance(server, ZmqEndpoint)
            claimant = member_dealer(ctx, creds, server.address, sender=member.address,
                                     keypair=keypair)
            claimant.send(b"held")
            peers = server.peers
            got = drain_until(server, lambda: peers.refused_unproven + peers.refused_spoof >= 1,
                              "the claim to be settled")
            assert got == []
            if reply == "another key":  # a well-formed answer for another key: refused
                assert peers.refused_spoof == 1 and peers.refused_unproven == 0
            else:  # no valid answer: nobody vouched for the key in time
                assert peers.refused_unproven == 1 and peers.refused_spoof == 0
    finally:
        member.close()


def test_an_unanswered_claim_times_out_and_is_asked_again_on_its_next_message(
        creds: ClusterCredentials, ctx: zmq.Context[zmq.Socket[bytes]]) -> None:
    with open_endpoint("tcp://127.0.0.1:0", credentials=creds, proof_timeout=0.5) as server:
        assert isinstance(server, ZmqEndpoint)
        dead = open_endpoint("tcp://127.0.0.1:0", credentials=creds)
        name = dead.address
        dead.close()  # nobody receives there now
        forger = member_dealer(ctx, creds, server.address, sender=name)
        peers = server.peers
        for round_ in (1, 2):
            forger.send(b"forged %d" % round_)
            got = drain_until(server, lambda r=round_: peers.refused_unproven >= r,
                              f"claim {round_} to time out")
            assert got == []
            assert peers.proofs.challenges == round_
        assert not peers.proofs.busy and peers.sizes()["held"] == 0


@pytest.mark.parametrize("claimed", ["own address", "inproc://zmesh-x", "udp://127.0.0.1:9"])
def test_a_claim_to_the_receivers_own_or_an_unaskable_address_is_refused_without_asking(
        creds: ClusterCredentials, ctx: zmq.Context[zmq.Socket[bytes]], claimed: str) -> None:
    with open_endpoint("tcp://127.0.0.1:0", credentials=creds) as server:
        assert isinstance(server, ZmqEndpoint)
        name = server.address if claimed == "own address" else claimed
        forger = member_dealer(ctx, creds, server.address, sender=name)
        forger.send(b"I am you")
        got = drain_until(server, lambda: server.peers.refused_spoof >= 1, "the refusal")
        assert got == [] and server.peers.proofs.challenges == 0


def test_held_messages_are_bounded(creds: ClusterCredentials) -> None:
    settled: list[tuple[str, str | None]] = []
    context: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    proofs = AddressProofs(context, creds, lambda n, o, c: settled.append((n, o)),
                           timeout=60, max_held=3, max_names=2)
    try:
        proofs.address = "tcp://127.0.0.1:1"
        assert proofs.hold("tcp://127.0.0.1:2", "k" * 40, b"r1", [b"1"])
        assert proofs.hold("tcp://127.0.0.1:2", "k" * 40, b"r1", [b"2"])
        assert proofs.hold("tcp://127.0.0.1:3", "k" * 40, b"r2", [b"3"])
        assert not proofs.hold("tcp://127.0.0.1:2", "k" * 40, b"r1", [b"4"])  # 3 held
        assert proofs.sizes() == {"proving": 2, "held": 3} and proofs.overflow == 1
        assert len(proofs.dealers()) == 2
        proofs.expire(time.monotonic() + 120)  # nobody answered: dropped, slots free
        assert sorted(settled) == [("tcp://127.0.0.1:2", None), ("tcp://127.0.0.1:3", None)]
        assert proofs.sizes() == {"proving": 0, "held": 0} and not proofs.busy
        assert proofs.hold("tcp://127.0.0.1:4", "k" * 40, b"r3", [b"5"])
    finally:
        proofs.close()
        context.destroy(linger=0)


def test_closing_an_endpoint_with_challenges_in_flight_is_prompt(
        creds: ClusterCredentials, ctx: zmq.Context[zmq.Socket[bytes]]) -> None:
    server = open_endpoint("tcp://127.0.0.1:0", credentials=creds)
    assert isinstance(server, ZmqEndpoint)
    forgers = [member_dealer(ctx, creds, server.address, sender=f"tcp://127.0.0.1:{9 + i}")
               for i in range(5)]
    for forger in forgers:
        forger.send(b"held")
    drain_until(server, lambda: server.peers.sizes()["proving"] == 5, "five challenges")
    started = time.monotonic()
    server.close()  # closes the challenge connections (linger 0) before the context ends
    assert time.monotonic() - started < 10


def test_challenges_beyond_the_active_bound_wait_their_turn(creds: ClusterCredentials) -> None:
    settled: list[str] = []
    context: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    proofs = AddressProofs(context, creds, lambda n, o, c: settled.append(n), timeout=60,
                           max_active=1)
    try:
        proofs.address = "tcp://127.0.0.1:1"
        names = [f"tcp://127.0.0.1:{port}" for port in (2, 3, 4)]
        for name in names:
            assert proofs.hold(name, "k" * 40, name.encode(), [b"m"])
        assert len(proofs.dealers()) == 1 and proofs.sizes()["proving"] == 3
        for turn in range(3):  # each time-out lets the next waiting challenge go
            assert len(proofs.dealers()) == 1
            proofs.expire(time.monotonic() + 120)
            assert settled == names[:turn + 1]
        assert not proofs.busy and proofs.challenges == 3
    finally:
        proofs.close()
        context.destroy(linger=0)

"""A node's credentials: which mesh it belongs to, and the Hello it answers.

`resolve` picks the node's credentials at start-up (``--token``, ``--token-file``,
``$ZMESH_TOKEN``, a node of the same mesh on this machine, or fresh ones for the first node),
installs them for the node and its workers, and keeps the token in the session directory
(mode 0600) so that local tools (`zmesh status`, ``init(address=...)``) find it. `check_seeds`
says Hello to the nodes it joins through, so a wrong token fails at once. `HelloDesk` answers
the probes of processes that do the same to this node.
"""

from __future__ import annotations

import logging
import os
from typing import Any

from zmesh.errors import AuthenticationError, ZmeshError
from zmesh.protocol.handshake import check_hello
from zmesh.protocol.messages.handshake import Hello
from zmesh.runtime.loop import EventLoop
from zmesh.security import keys
from zmesh.security.keys import ClusterCredentials

logger = logging.getLogger("zmesh.node")

INSECURE_ENV = keys.INSECURE_ENV


def resolve(*, token: str = "", token_file: str = "", insecure: bool = False,
            join: list[str] | None = None) -> ClusterCredentials | None:
    """The credentials this node uses (None: --insecure); AuthenticationError if it joins a
    mesh and no token for it can be found."""
    if insecure:
        if token or token_file:
            raise AuthenticationError("--insecure runs without authentication: drop --token")
        keys.install(None)
        os.environ[INSECURE_ENV] = "1"
        os.environ.pop(keys.TOKEN_ENV, None)
        return None
    os.environ.pop(INSECURE_ENV, None)
    if token:
        creds = ClusterCredentials.from_token(token)
    elif token_file:
        creds = keys.read_token_file(token_file)
    else:
        found = keys.from_environment()
        if found is None and join:
            found = local_credentials(join)
            if found is None:
                raise AuthenticationError(
                    f"no join token for the mesh at {', '.join(join)}: pass --token T (the "
                    "token its first node printed), set ZMESH_TOKEN, or --token-file PATH")
        creds = found if found is not None else ClusterCredentials.generate()
    keys.install(creds)
    os.environ[keys.TOKEN_ENV] = creds.token  # the node's workers inherit it
    return creds


def local_credentials(addresses: list[str]) -> ClusterCredentials | None:
    """The token of a node started on this machine (by this user) at one of `addresses`."""
    from zmesh.runtime.launcher import running_nodes

    wanted = {a if a.startswith(("tcp://", "ipc://")) else f"tcp://{a}" for a in addresses}
    for info in running_nodes():
        if wanted & {str(info.get("address")), str(info.get("ipc"))}:
            path = os.path.join(str(info["session_dir"]), keys.TOKEN_FILE_NAME)
            try:
                return keys.read_token_file(path)
            except AuthenticationError:
                continue
    return None


def save_token(session_dir: str, creds: ClusterCredentials | None) -> None:
    """Keep the token in the session directory (0600) for local tools."""
    if creds is not None:
        keys.write_token_file(os.path.join(session_dir, keys.TOKEN_FILE_NAME), creds)


def check_seeds(seeds: list[str], creds: ClusterCredentials | None,
                timeout: float = 10.0) -> None:
    """Hello to each seed: AuthenticationError at once for a wrong token; a seed that does not
    answer is only logged (membership keeps trying it)."""
    from zmesh.security.probe import handshake

    for seed in seeds:
        address = seed if seed.startswith(("tcp://", "ipc://")) else f"tcp://{seed}"
        try:
            handshake(address, creds, role="node", timeout=timeout)
        except AuthenticationError:
            raise
        except ZmeshError as exc:
            logger.warning("join: %s", exc)


class HelloDesk:
    """Answers `Hello` with `Welcome` or `Refuse`, over the connection it came in on."""

    def __init__(self, loop: EventLoop, node_id: str, creds: ClusterCredentials | None) -> None:
        self._loop = loop
        self._node_id = node_id
        self._proof = creds.proof() if creds is not None else None
        loop.on(Hello, self._on_hello)

    def _on_hello(self, sender: str, msg: Hello, bufs: list[Any]) -> None:
        from zmesh.protocol import codec

        reply = check_hello(msg, expected_credential=self._proof, node_id=self._node_id)
        send_back = getattr(self._loop.endpoint, "send_back", None)
        if send_back is None or not send_back(sender, [codec.encode(reply)]):
            self._loop.send(sender, reply)

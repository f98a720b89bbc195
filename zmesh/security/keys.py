"""Cluster credentials: one random secret per mesh, shown to people as a join token.

The first node of a mesh makes the secret; every process of the mesh derives from it the
cluster's CURVE key pair, which every tcp ROUTER uses as its server key: a client must know
that key to complete a CURVE handshake at all. Each process then authenticates with a key
pair of its own, vouched for by the secret (`zmesh.security.identity`), so a peer knows which
member it is talking to.

A process finds its credentials, in order: installed with `install` (``init(token=...)``,
``zmesh node --token``), ``$ZMESH_TOKEN``, the file named by ``$ZMESH_TOKEN_FILE``. A process
that starts a new mesh (``zmesh.init()``, ``zmesh node`` without ``--join``, ``Cluster``)
makes fresh ones with `generate`.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import os
import secrets
import threading
from dataclasses import dataclass, field
from functools import cached_property

from zmesh.errors import AuthenticationError

__all__ = [
    "INSECURE_ENV",
    "TOKEN_ENV",
    "TOKEN_FILE_ENV",
    "TOKEN_FILE_NAME",
    "ClusterCredentials",
    "derive",
    "from_environment",
    "install",
    "installed",
    "process_credentials",
    "read_token_file",
    "write_token_file",
]

TOKEN_ENV = "ZMESH_TOKEN"
TOKEN_FILE_ENV = "ZMESH_TOKEN_FILE"
INSECURE_ENV = "ZMESH_INSECURE"
TOKEN_FILE_NAME = "cluster.token"
"""The token file a node keeps in its session directory (mode 0600)."""
_PREFIX = "zmesh1-"
_SECRET_BYTES = 32
_CHECK_BYTES = 4


@dataclass(frozen=True)
class ClusterCredentials:
    """The secret of one mesh and the CURVE keys derived from it."""

    secret: bytes = field(repr=False)

    def __post_init__(self) -> None:
        if len(self.secret) != _SECRET_BYTES:
            raise ValueError(f"a cluster secret is {_SECRET_BYTES} bytes, got {len(self.secret)}")

    # The CURVE keys are worked out when a socket first needs them, not here: a driver makes
    # its credentials just before it starts its node, and importing zmq for them then would
    # hold the node's start back (zmq is imported meanwhile, by the client).
    @cached_property
    def curve_secret(self) -> bytes:
        """The cluster's CURVE secret key (Z85, 40 bytes)."""
        from zmq.utils import z85

        return z85.encode(derive(self.secret, b"zmesh-curve-key"))

    @cached_property
    def curve_public(self) -> bytes:
        """The cluster's CURVE public key (Z85, 40 bytes): the only client key ZAP admits."""
        import zmq

        return zmq.curve_public(self.curve_secret)

    @classmethod
    def generate(cls) -> ClusterCredentials:
        """Fresh credentials for a new mesh."""
        return cls(secrets.token_bytes(_SECRET_BYTES))

    @classmethod
    def from_token(cls, token: str) -> ClusterCredentials:
        """Parse a join token; AuthenticationError naming what is wrong with it."""
        text = token.strip() if isinstance(token, str) else token
        if not isinstance(text, str) or not text.startswith(_PREFIX):
            raise AuthenticationError(
                "not a zmesh join token: it should start with 'zmesh1-' (copy the whole token "
                "the first node printed, or its session directory's cluster.token)")
        try:
            raw = base64.urlsafe_b64decode(text[len(_PREFIX):] + "==")
        except (binascii.Error, ValueError):
            raise AuthenticationError("malformed zmesh join token: bad characters; copy it "
                                      "again in full") from None
        secret, check = raw[:_SECRET_BYTES], raw[_SECRET_BYTES:]
        if len(raw) != _SECRET_BYTES + _CHECK_BYTES or not hmac.compare_digest(
                check, _checksum(secret)):
            raise AuthenticationError("malformed zmesh join token: it is truncated or "
                                      "mistyped (its checksum does not match)")
        return cls(secret)

    @property
    def token(self) -> str:
        """The join token: the secret plus a checksum that catches typos."""
        raw = self.secret + _checksum(self.secret)
        return _PREFIX + base64.urlsafe_b64encode(raw).decode().rstrip("=")

    @property
    def fingerprint(self) -> str:
        """A short name for the mesh that reveals nothing of the secret."""
        return derive(self.secret, b"zmesh-fingerprint").hex()[:16]

    @property
    def zap_domain(self) -> str:
        """The ZAP domain of this mesh's ROUTERs: one process may serve several meshes."""
        return f"zmesh-{self.fingerprint}"

    def proof(self) -> bytes:
        """What a Hello carries as its credential: derived, so the secret never travels."""
        return derive(self.secret, b"zmesh-hello-proof")


def derive(secret: bytes, purpose: bytes) -> bytes:
    """A 32-byte key for one `purpose` (at most 16 bytes), derived from the mesh secret."""
    return hashlib.blake2b(secret, digest_size=32, person=purpose[:16]).digest()


def _checksum(secret: bytes) -> bytes:
    return hashlib.blake2b(secret, digest_size=_CHECK_BYTES, person=b"zmesh-token-chk").digest()


# -- this process's credentials ---------------------------------------------------------------
_lock = threading.Lock()
_installed: ClusterCredentials | None = None


def install(credentials: ClusterCredentials | None) -> None:
    """Make `credentials` this process's (None forgets them); tcp endpoints opened from now
    on use them. Child processes get them through `TOKEN_ENV` from whoever starts them."""
    global _installed
    with _lock:
        _installed = credentials


def installed() -> ClusterCredentials | None:
    """The installed credentials, else those named by the environment, else None."""
    global _installed
    with _lock:
        if _installed is None:
            _installed = from_environment()
        return _installed


def process_credentials() -> ClusterCredentials | None:
    """This process's credentials; a process with none makes (and keeps) fresh ones, so that
    its tcp sockets are never open: it is then a mesh of its own until told a token. None
    only where $ZMESH_INSECURE=1 (set by ``zmesh node --insecure`` for its workers)."""
    global _installed
    if os.environ.get(INSECURE_ENV) == "1":
        return None
    found = installed()
    if found is not None:
        return found
    with _lock:
        if _installed is None:
            _installed = ClusterCredentials.generate()
        return _installed


def from_environment() -> ClusterCredentials | None:
    """Credentials named by $ZMESH_TOKEN or $ZMESH_TOKEN_FILE; None when neither is set."""
    token = os.environ.get(TOKEN_ENV, "").strip()
    if token:
        return ClusterCredentials.from_token(token)
    path = os.environ.get(TOKEN_FILE_ENV, "").strip()
    if path:
        return read_token_file(path)
    return None


def read_token_file(path: str) -> ClusterCredentials:
    """The token kept in `path`; AuthenticationError if it is unreadable, malformed, or
    readable by other users (a token that others can read is not a secret)."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except OSError as exc:
        raise AuthenticationError(f"cannot read the zmesh token file {path}: {exc}") from None
    try:
        mode = os.fstat(fd).st_mode & 0o777
        if mode & 0o077:
            raise AuthenticationError(
                f"the zmesh token file {path} is readable by others (mode {mode:o}); "
                f"run `chmod 600 {path}`")
        text = os.read(fd, 4096).decode(errors="replace")
    finally:
        os.close(fd)
    return ClusterCredentials.from_token(text)


def write_token_file(path: str, credentials: ClusterCredentials) -> None:
    """Write the token to `path`, created with mode 0600 (replacing what was there)."""
    tmp = f"{path}.{os.getpid()}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.write(fd, (credentials.token + "\n").encode())
    finally:
        os.close(fd)
    os.replace(tmp, path)

"""Reading another node's store file on this machine: say where an object lies, verify it.

Two nodes of one mesh on one machine, run by one user, keep their objects in segment files
under the same store root (`<root>/<node_id>/seg-*`, mode 0600 in 0700 directories). A
puller can then copy an object straight from the holder's file at memory speed instead of
pulling it in chunks through an (encrypted) socket. The holder's answer is only a claim:
`open_verified` accepts a file only if it is a regular file directly inside a node directory
under the puller's own store root, reached without symlinks, owned by this user with no
access for anyone else, and has the identity the holder named (device, inode, and the
machine's boot id, so a file on another machine that happens to share the path is refused).
Anything else raises `LocalReadRefused`, and the puller pulls over the network instead.
"""

from __future__ import annotations

import os
import stat
from functools import lru_cache

import msgspec

from zmesh.store.arena import SEGMENT_PREFIX, Location

__all__ = ["COPY_PIECE", "LocalFile", "LocalReadRefused", "boot_id", "copy_piece",
           "describe", "open_verified"]

COPY_PIECE = 64 << 20
"""Bytes copied per step, so a large copy leaves the node's event loop free in between."""

_BOOT_ID_FILE = "/proc/sys/kernel/random/boot_id"


class LocalReadRefused(Exception):
    """The offered file is not one this process may read an object from (the reason says
    why); the caller falls back to a network pull."""


class LocalFile(msgspec.Struct, frozen=True):
    """Where an object's bytes lie in a store file on this machine, and that file's identity."""

    path: str
    offset: int
    size: int
    dev: int
    ino: int
    boot_id: str


@lru_cache(maxsize=1)
def boot_id() -> str:
    """This machine's per-boot id ("" where the kernel gives none: no local reads then)."""
    try:
        with open(_BOOT_ID_FILE) as f:
            return f.read().strip()[:64]
    except OSError:
        return ""


def describe(directory: str, loc: Location) -> LocalFile:
    """The holder's answer for an object at `loc` of its store in `directory`."""
    path = os.path.join(os.path.realpath(directory), loc.segment)
    st = os.stat(path, follow_symlinks=False)
    return LocalFile(path, loc.offset, loc.size, st.st_dev, st.st_ino, boot_id())


def open_verified(root: str, offer: LocalFile) -> int:
    """Open the offered file read-only after checking it (see the module doc); returns the
    fd (the caller closes it). `root` is this node's own store root."""
    mine = boot_id()
    if not mine or offer.boot_id != mine:
        raise LocalReadRefused("the holder runs on another machine (or boot)")
    path = offer.path
    if not os.path.isabs(path) or os.path.normpath(path) != path or "\0" in path:
        raise LocalReadRefused(f"{path!r} is not a plain absolute path")
    node_dir, name = os.path.split(path)
    real_root = os.path.realpath(root)
    if os.path.dirname(node_dir) != real_root:
        raise LocalReadRefused(f"{path!r} is not in a node directory under the store root "
                               f"{real_root}")
    if not name.startswith(SEGMENT_PREFIX):
        raise LocalReadRefused(f"{name!r} is not a store segment file")
    uid = os.getuid()
    try:
        dir_fd = os.open(node_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        raise LocalReadRefused(f"cannot open {node_dir}: {exc.strerror}") from None
    try:
        _check_private(os.fstat(dir_fd), uid, node_dir, want_dir=True)
        try:
            # O_NONBLOCK: a FIFO (or device) named like a segment must not block the open on
            # the event loop's thread; it is refused below as not a regular file (a regular
            # file's reads ignore the flag)
            fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK,
                         dir_fd=dir_fd)
        except OSError as exc:
            raise LocalReadRefused(f"cannot open {path}: {exc.strerror}") from None
    finally:
        os.close(dir_fd)
    try:
        st = os.fstat(fd)
        _check_private(st, uid, path, want_dir=False)
        if (st.st_dev, st.st_ino) != (offer.dev, offer.ino):
            raise LocalReadRefused(f"{path} is not the file the holder named (device/inode "
                                   f"{st.st_dev}/{st.st_ino}, named {offer.dev}/{offer.ino})")
        if offer.offset < 0 or offer.size < 0 or offer.offset + offer.size > st.st_size:
            raise LocalReadRefused(f"{offer.size} bytes at offset {offer.offset} lie outside "
                                   f"{path} ({st.st_size} bytes)")
    except BaseException:
        os.close(fd)
        raise
    return fd


def copy_piece(fd: int, offset: int, view: memoryview) -> None:
    """Fill `view` with the bytes of `fd` from `offset` (one kernel copy per read; the GIL
    is released meanwhile). OSError or LocalReadRefused (the file is shorter) on failure."""
    done = 0
    n = len(view)
    while done < n:
        got = os.preadv(fd, [view[done:]], offset + done)
        if got <= 0:
            raise LocalReadRefused(f"the file ended after {done} of {n} bytes")
        done += got


def _check_private(st: os.stat_result, uid: int, path: str, *, want_dir: bool) -> None:
    kind_ok = stat.S_ISDIR(st.st_mode) if want_dir else stat.S_ISREG(st.st_mode)
    if not kind_ok:
        raise LocalReadRefused(f"{path} is not a {'directory' if want_dir else 'regular file'}")
    if st.st_uid != uid:
        raise LocalReadRefused(f"{path} is owned by uid {st.st_uid}, not {uid}")
    if st.st_mode & 0o077:
        raise LocalReadRefused(f"{path} has mode {oct(st.st_mode & 0o777)}: others may reach "
                               "it")

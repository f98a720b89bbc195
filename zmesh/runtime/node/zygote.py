"""The fork server: a pre-imported, single-threaded parent that forks workers on request.

The node talks to it over a socketpair with length-prefixed msgpack records:
{"op": "spawn", "id", "env"} -> {"op": "spawned", "id", "pid"}; {"op": "kill", "pid", "sig"};
{"op": "env", "env"}; {"op": "extras"} (import numpy for the workers forked from then on);
and it reports {"op": "exited", "pid", "status"} when a worker dies. It never starts a
thread or a zmq context, so forking is safe, and it exits (killing its children) when the
node closes the socket.
"""

from __future__ import annotations

import ctypes
import gc
import os
import select
import signal
import socket
import struct
import sys
from typing import Any

import msgspec

_LEN = struct.Struct("<I")
PR_SET_PDEATHSIG = 1
STOP_SIGNAL = signal.SIGUSR2
"""What the node sends its fork server as it closes: one importing numpy (~50 ms) stops that
and exits at once, rather than after. Ignored at any other time (the closed socket says it)."""


class _Stopped(BaseException):  # not an Exception: an import's `except Exception` passes it
    """The node closed while this fork server imported what later workers may need."""


_stop_asked = False


def _stop(signum: int, frame: Any) -> None:
    global _stop_asked
    _stop_asked = True  # in case some module's bare `except:` swallowed the exception
    raise _Stopped


def set_parent_death_signal(sig: int = signal.SIGKILL) -> None:
    """Ask Linux to send `sig` to this process when its parent dies (no-op elsewhere)."""
    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, sig)
        except (OSError, AttributeError):
            pass


def write_record(sock: socket.socket, record: dict[str, Any]) -> None:
    data = msgspec.msgpack.encode(record)
    sock.sendall(_LEN.pack(len(data)) + data)


class RecordReader:
    """Splits a byte stream into length-prefixed msgpack records."""

    def __init__(self) -> None:
        self.buf = b""

    def feed(self, chunk: bytes) -> list[dict[str, Any]]:
        self.buf += chunk
        out = []
        while len(self.buf) >= 4:
            (n,) = _LEN.unpack_from(self.buf)
            if len(self.buf) < 4 + n:
                break
            out.append(msgspec.msgpack.decode(self.buf[4:4 + n]))
            self.buf = self.buf[4 + n:]
        return out


def main(fd: int, node_address: str, session_dir: str, node_pid: int = 0) -> None:
    signal.signal(STOP_SIGNAL, signal.SIG_IGN)
    set_parent_death_signal()
    if node_pid and os.getppid() != node_pid:  # the node died before the signal was armed
        os._exit(1)
    # pre-import what every worker needs, so a fork starts warm
    import zmesh.runtime.worker.main  # noqa: F401
    from zmesh.protocol import codec

    codec.warm()  # the message decoder too: each worker would build its own on first recv
    sock = socket.socket(fileno=fd)
    rfd, wfd = os.pipe()
    os.set_blocking(wfd, False)
    signal.set_wakeup_fd(wfd)
    signal.signal(signal.SIGCHLD, lambda *a: None)
    reader = RecordReader()
    children: set[int] = set()
    write_record(sock, {"op": "ready", "pid": os.getpid()})
    while not _stop_asked:
        try:
            readable, _, _ = select.select([sock.fileno(), rfd], [], [])
        except InterruptedError:
            continue
        if rfd in readable:
            os.read(rfd, 4096)
        _reap(sock, children)
        if sock.fileno() in readable:
            chunk = sock.recv(65536)
            if not chunk:
                break
            for rec in reader.feed(chunk):
                if rec["op"] == "spawn":
                    pid = _spawn(sock, rfd, wfd, rec, node_address, session_dir)
                    children.add(pid)
                    write_record(sock, {"op": "spawned", "id": rec["id"], "pid": pid})
                elif rec["op"] == "env":  # for every worker started from now on
                    os.environ.update(rec["env"])
                elif rec["op"] == "kill" and rec["pid"] in children:
                    try:
                        os.kill(rec["pid"], rec.get("sig", signal.SIGKILL))
                    except ProcessLookupError:
                        pass
                elif rec["op"] == "extras":
                    try:
                        _import_extras()
                    except _Stopped:
                        signal.signal(STOP_SIGNAL, signal.SIG_IGN)
                    if _stop_asked:
                        break
    for pid in children:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    for pid in children:
        try:
            os.waitpid(pid, 0)
        except ChildProcessError:
            pass


def _reap(sock: socket.socket, children: set[int]) -> None:
    while children:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        children.discard(pid)
        try:
            write_record(sock, {"op": "exited", "pid": pid, "status": status})
        except OSError:
            return


def _import_extras() -> None:
    """Import what many workers' user code needs but no worker's start does (numpy), for the
    workers forked from now on; the node asks for it once its first workers have started
    (they start ~50 ms sooner, and import it themselves only if their tasks use it). Raises
    _Stopped if the node closes meanwhile (see STOP_SIGNAL)."""
    signal.signal(STOP_SIGNAL, _stop)
    try:
        import numpy  # noqa: F401
    except ImportError:
        pass
    finally:
        signal.signal(STOP_SIGNAL, signal.SIG_IGN)


def _spawn(sock: socket.socket, rfd: int, wfd: int, rec: dict[str, Any], node_address: str,
           session_dir: str) -> int:
    me = os.getpid()
    # What this process imported stays shared with every fork: kept out of the collector's
    # view, a worker's collections neither walk it nor write to its pages (copy-on-write), so
    # each worker starts faster and holds fewer private pages. Frozen (O(1)) without a
    # collection first: one walks every object imported (~10 ms, before the first worker can
    # start) to free the few hundred cycles the imports left (~50 KB, shared by the forks).
    gc.freeze()
    pid = os.fork()
    if pid:
        return pid
    # the child: drop the parent's plumbing, then become a worker
    try:
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        signal.signal(STOP_SIGNAL, signal.SIG_DFL)
        sock.close()
        os.close(rfd)
        os.close(wfd)
        set_parent_death_signal()
        if os.getppid() != me:  # the fork server died before the signal was armed
            os._exit(1)
        os.environ.update(rec.get("env") or {})
        # Reseeded only if imported before the fork (its state would repeat in every worker).
        # Not imported to reseed it: numpy imports numpy.random lazily, ~10 extension
        # modules and 10-20 ms of CPU that every worker start paid; one imported later is
        # seeded from the OS.
        random = sys.modules.get("numpy.random")
        if random is not None:
            random.seed()
        from zmesh.runtime.worker import main as worker

        worker.main(node_address, session_dir, bytes(rec["id"]))
    except BaseException:
        # a node that is gone or going (its socket closed) makes this start moot: stay quiet
        if os.path.exists(node_address.removeprefix("ipc://")):
            import traceback

            traceback.print_exc()
    finally:
        os._exit(1)
    return 0  # unreachable


def describe_status(status: int) -> str:
    """Words for a waitpid status: 'killed by signal 9 (SIGKILL)' or 'exited with code 1'."""
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        try:
            name = signal.Signals(sig).name
        except ValueError:
            name = "?"
        hint = " (out of memory?)" if sig == signal.SIGKILL else ""
        return f"killed by signal {sig} ({name}){hint}"
    if os.WIFEXITED(status):
        return f"exited with code {os.WEXITSTATUS(status)}"
    return f"ended with status {status}"


if __name__ == "__main__":
    main(int(sys.argv[1]), sys.argv[2], sys.argv[3])

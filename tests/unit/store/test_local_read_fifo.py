"""`open_verified` never blocks on what it opens: a FIFO named like a segment file in a node
directory under the store root is refused at once. Before, the open itself blocked until a
writer came, on the puller node's event loop thread (one offer naming it wedged the node)."""

from __future__ import annotations

import os
import tempfile
import threading

import pytest

from zmesh.store.arena import SEGMENT_PREFIX
from zmesh.store.local_read import LocalFile, LocalReadRefused, boot_id, open_verified

pytestmark = pytest.mark.skipif(not boot_id(), reason="needs the kernel's boot id (Linux)")


def test_a_fifo_offered_as_a_store_file_is_refused_without_blocking() -> None:
    with tempfile.TemporaryDirectory() as root:
        node = os.path.join(os.path.realpath(root), "holder")
        os.mkdir(node, 0o700)
        path = os.path.join(node, SEGMENT_PREFIX + "fifo")
        os.mkfifo(path, 0o600)
        st = os.stat(path)
        offer = LocalFile(path, 0, 0, st.st_dev, st.st_ino, boot_id())
        outcome: list[BaseException | int] = []

        def verify() -> None:
            try:
                outcome.append(open_verified(root, offer))
            except BaseException as exc:  # noqa: BLE001 - what it raised is the outcome
                outcome.append(exc)

        thread = threading.Thread(target=verify, daemon=True)
        thread.start()
        thread.join(10)
        blocked = thread.is_alive()
        if blocked:  # let the blocked open go (a writer comes), so the thread ends
            os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))
            thread.join(10)
        for got in outcome:
            if isinstance(got, int):
                os.close(got)
        assert not blocked, "open_verified blocked opening a FIFO"
        assert len(outcome) == 1 and isinstance(outcome[0], LocalReadRefused), outcome
        assert "regular file" in str(outcome[0])

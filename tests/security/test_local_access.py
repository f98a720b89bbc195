"""What protects local traffic: private directories and files; and test hooks only in nodes
started for tests."""

from __future__ import annotations

import os
import stat

import msgspec
import numpy as np
import pytest

import zmesh
from zmesh.errors import ZmeshError
from zmesh.runtime.launcher import session_root
from zmesh.runtime.node.query import NodeQuerier
from zmesh.store.sweep import default_store_root


def _mode(path: str) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def test_ipc_directories_are_0700_and_object_files_0600() -> None:
    info = zmesh.init(num_cpus=1)
    try:
        ref = zmesh.put(np.ones(1 << 20, dtype=np.uint8))  # big enough for a store file
        assert int(zmesh.get(ref).sum()) == 1 << 20
        session_dir = str(info["session_dir"])
        assert _mode(session_root()) == 0o700
        assert _mode(session_dir) == 0o700
        store_dir = os.path.join(default_store_root(), str(info["node_id"]))
        assert _mode(default_store_root()) == 0o700
        assert _mode(store_dir) == 0o700
        # Object files; (owner.pid is 0644, but inside the 0700 directory nobody else can
        # reach it.)
        files = [os.path.join(d, f) for d, _, fs in os.walk(store_dir) for f in fs
                 if not f.endswith(".pid")]
        assert files, "the object was not written to a file"
        for path in files:
            assert _mode(path) & 0o077 == 0, f"{path} is open to others: {_mode(path):o}"
        for entry in os.listdir(session_dir):
            path = os.path.join(session_dir, entry)
            if stat.S_ISREG(os.stat(path).st_mode):
                assert _mode(path) & 0o077 == 0, f"{path} is open to others"
    finally:
        zmesh.shutdown()


def test_fault_hooks_exist_only_in_nodes_started_for_tests() -> None:
    info = zmesh.init(num_cpus=1)  # a private node: not one started for tests
    try:
        with NodeQuerier() as q, pytest.raises(ZmeshError, match="only in nodes started for"):
            q.query(str(info["address"]), "block", msgspec.msgpack.encode(["tcp://x:1"]))
    finally:
        zmesh.shutdown()

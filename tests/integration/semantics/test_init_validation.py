"""`init` argument validation, as Ray's (runs without a shared runtime)."""

from __future__ import annotations

import pytest

import zmesh


def test_init_refuses_invalid_namespace(no_zmesh_leaks):
    # ray source (worker.init -> validate_namespace)
    with pytest.raises(TypeError):
        zmesh.init(num_cpus=1, namespace=1)
    with pytest.raises(ValueError):
        zmesh.init(num_cpus=1, namespace="")
    assert not zmesh.is_initialized()

"""Fixtures for the serializer tests."""

from __future__ import annotations

import pytest
from serializer_helpers import make_registry

from zmesh.serializers import SerializerRegistry


@pytest.fixture
def registry() -> SerializerRegistry:
    """A fresh registry (tests may register into it) that knows `Point`."""
    return make_registry()

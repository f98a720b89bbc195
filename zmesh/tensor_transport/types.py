"""Errors of the tensor transport."""

from __future__ import annotations

from zmesh.errors import ZmeshError

BACKENDS = ("gloo", "nccl")


class TensorTransportError(ZmeshError):
    """A consumer could not fetch tensors: their producer died, or they were freed."""

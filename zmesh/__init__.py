"""zmesh: a brokerless actor and task runtime for Python on ZeroMQ, in the family of Ray Core."""

from zmesh._version import __version__

__all__ = ["__version__"]

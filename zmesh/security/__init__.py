"""Closed by default: cluster credentials, the ZAP handler, and the handshake probe.

See `zmesh.security.keys` for where a process finds its credentials, `zmesh.security.zap`
for what a tcp ROUTER admits, and `zmesh.security.probe` for the check that makes a wrong
token fail at once.
"""

from zmesh.security.keys import ClusterCredentials as ClusterCredentials

__all__ = ["ClusterCredentials"]

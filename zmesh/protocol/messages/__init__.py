"""zmesh.protocol.messages."""

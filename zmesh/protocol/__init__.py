"""zmesh.protocol."""

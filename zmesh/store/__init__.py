"""zmesh.store."""

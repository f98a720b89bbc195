"""zmesh.core."""

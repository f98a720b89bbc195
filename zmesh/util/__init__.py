"""zmesh.util."""

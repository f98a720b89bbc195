"""zmesh.security."""

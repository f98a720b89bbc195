"""zmesh.runtime."""

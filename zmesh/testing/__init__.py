"""zmesh.testing."""

"""Lambda handlers shipped as assets (custom resources)."""

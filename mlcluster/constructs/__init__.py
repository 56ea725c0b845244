"""Reusable L3 constructs: one concept a module."""

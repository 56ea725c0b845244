"""Checks over synthesized cloud assemblies: network reachability and node IAM sufficiency."""

"""Helpers of the gate tests: the templates of a copied assembly, and resources in them."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

Templates = dict[str, dict[str, Any]]


def resources(templates: Templates, stack: str, kind: str) -> dict[str, dict[str, Any]]:
    """The resources of ``kind`` in ``stack`` by logical id (mutable: they are the copy's)."""
    return {k: r for k, r in templates[stack]["Resources"].items() if r["Type"] == kind}


def one(
    templates: Templates, stack: str, kind: str, where: Callable[[str, dict[str, Any]], bool] = lambda k, r: True
) -> dict[str, Any]:
    """The one resource of ``kind`` in ``stack`` that ``where`` accepts."""
    (found,) = [r for k, r in resources(templates, stack, kind).items() if where(k, r)]
    return found

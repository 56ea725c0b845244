"""The example environments as one analysable assembly, and copies of it to break."""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path

import pytest

from mlcluster.analysis.assembly import Assembly, load_assembly
from tests.gates.gate_support import Templates


@pytest.fixture(scope="session")
def examples(examples_outdir: Path) -> Assembly:
    """Every example environment, synthesized once per session."""
    return load_assembly(examples_outdir)


@pytest.fixture
def broken(examples: Assembly) -> Callable[[Callable[[Templates], object]], Assembly]:
    """A copy of the examples with one change made to the templates (the assets are shared)."""

    def make(change: Callable[[Templates], object]) -> Assembly:
        templates = copy.deepcopy(examples.templates)
        change(templates)
        return Assembly(templates, assets=examples.assets)

    return make

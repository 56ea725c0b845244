"""Pytest set-up shared by every test module."""

from __future__ import annotations

import os

os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "20")

from collections.abc import Callable
from pathlib import Path

import pytest

from mlcluster.config import Environment, load_environment
from tests.support import synth_examples, write_env


@pytest.fixture
def make_env(tmp_path: Path) -> Callable[..., Environment]:
    """Build a validated ``Environment`` from a mapping (per test)."""

    def make(data: dict[str, object], name: str = "test") -> Environment:
        return load_environment(write_env(tmp_path / "environments", name, data))

    return make


@pytest.fixture(scope="session")
def examples_outdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Every example environment synthesized once per test session, with cdk-nag on (raises on a finding)."""
    out = tmp_path_factory.mktemp("examples.cdk.out")
    synth_examples(out)
    return out

"""Pytest set-up shared by every test module."""

from __future__ import annotations

import json
import os
from pathlib import Path

os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "20")
# The CDK CLI hands cdk.json's context (the feature flags) to the app in this
# variable; set it before aws-cdk-lib's jsii runtime starts, so every app the
# tests build in-process synthesizes exactly what `cdk synth` does.
os.environ["CDK_CONTEXT_JSON"] = json.dumps(
    json.loads((Path(__file__).resolve().parent.parent / "cdk.json").read_text())["context"]
)

from collections.abc import Callable

import pytest

from mlcluster.config import Environment, load_environment
from tests.support import write_env


@pytest.fixture
def make_env(tmp_path: Path) -> Callable[..., Environment]:
    """Build a validated ``Environment`` from a mapping (per test)."""

    def make(data: dict[str, object], name: str = "test") -> Environment:
        return load_environment(write_env(tmp_path / "environments", name, data))

    return make

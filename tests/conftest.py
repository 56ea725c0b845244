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

import functools
from collections.abc import Callable
from typing import Any

import botocore.loaders
import botocore.session
import pytest
from filelock import FileLock

from mlcluster.config import Environment, load_environment
from tests.support import stack_templates, write_env

# Every botocore session makes its own loader, which parses the service models
# (EC2's alone is megabytes of JSON) again; moto resets boto3's default session
# on every mock and the CLI makes a session per command, so the tests paid that
# parse hundreds of times. One loader per data path for the whole test process,
# as one session shares it between its clients: the files cannot change mid-run.
botocore.session.create_loader = functools.cache(botocore.loaders.create_loader)  # type: ignore[assignment]


@pytest.fixture
def make_env(tmp_path: Path) -> Callable[..., Environment]:
    """Build a validated ``Environment`` from a mapping (per test)."""

    def make(data: dict[str, object], name: str = "test") -> Environment:
        return load_environment(write_env(tmp_path / "environments", name, data))

    return make


@pytest.fixture(scope="session")
def examples_outdir(tmp_path_factory: pytest.TempPathFactory, worker_id: str) -> Path:
    """The cloud assembly of every example environment, synthesized once per test run with cdk-nag on.

    It is ``make compliance``'s synthesis (``tools/compliance_report.synthesize``): each example
    is judged by every pack mlcluster supports, the packs its file lists and the others, so the
    compliance tests read the same assembly instead of synthesizing all examples a second time.
    The packs add validations only: the templates are the ones ``cdk synth`` writes with the
    file's own packs (tests/test_packaging.py runs the pinned CLI on ``dev``, and
    tests/test_compliance.py compares its templates with this assembly's).

    Under pytest-xdist every worker asks for it; the first one synthesizes
    into a folder all workers share (under a file lock) and the others read
    it. Tests must treat it as read-only. Synthesis raises on any
    unacknowledged cdk-nag finding, so every worker that asks sees the failure.
    """
    from tools.compliance_report import synthesize

    shared = tmp_path_factory.getbasetemp()
    if worker_id != "master":
        shared = shared.parent
    out = shared / "examples-cdk.out"
    with FileLock(str(shared / "examples-cdk.out.lock")):
        if not (out / "manifest.json").exists():
            synthesize(None, out)
    return out


@pytest.fixture(scope="session")
def example_templates(examples_outdir: Path) -> dict[str, dict[str, Any]]:
    """Every example stack's template by display name (``p5/Cluster``), from :func:`examples_outdir`."""
    from aws_cdk import cx_api

    return stack_templates(cx_api.CloudAssembly(str(examples_outdir)))


@pytest.fixture(scope="session")
def pcluster_templates(example_templates: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The stack templates of the ParallelCluster examples (``p5/Cluster``...), from :func:`example_templates`."""
    from tests.pcluster.pcluster_support import PCLUSTER_EXAMPLES

    return {path: t for path, t in example_templates.items() if path.split("/", 1)[0] in PCLUSTER_EXAMPLES}


#: The modules that cost the most CPU (measured with ``--durations`` and per-module CPU time, most first).
#: ``make pytest`` hands whole modules to its two workers (``--dist loadfile``) in collection order
#: (``--no-loadscope-reorder``): starting with the longest leaves only short modules for the end,
#: so neither worker sits idle while the other finishes a long one.
LONGEST_FIRST = (
    # A minute of wall time, mostly waits on its real Slurm (little CPU): first, so it never runs last.
    "tests/system/test_slurm.py",
    "tests/test_day_two.py",
    "tests/test_compliance.py",
    # The docs site: a strict MkDocs build and headless Chromium (a minute or more of wall time).
    "tests/docs/test_site.py",
    "tests/lifecycle/test_hyperpod_isolation.py",
    "tests/test_packaging.py",
    "tests/lifecycle/test_hyperpod_scripts.py",
    "tests/test_examples.py",
    "tests/lifecycle/test_hyperpod_on_create.py",
    "tests/test_day_two_cli.py",
    "tests/lifecycle/test_pcluster_node_rehearsal.py",
    "tests/pcluster/test_pcluster_rehearsal.py",
    "tests/lifecycle/test_hyperpod_downloads.py",
    "tests/lifecycle/test_hyperpod_backup.py",
    "tests/lifecycle/test_hyperpod_lustre_efa.py",
    "tests/lifecycle/test_exporters.py",
    "tests/test_day_two_guard.py",
    "tests/pcluster/test_pcluster_node_scripts.py",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Run the modules in :data:`LONGEST_FIRST` first, in that order; the rest keep their order."""
    rank = {module: index for index, module in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::", 1)[0], len(rank)))

"""``ProducerValues``: a consumer stack's template changes whenever an output it reads from a producer can.

Weak references (``Fn::GetStackOutput``) are read again only when the
consumer's stack is updated, and ``cdk deploy`` skips an unchanged template.
These tests synthesize the same environment before and after an edit and
compare the rendered parameter of each consumer.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from aws_cdk import cx_api

from mlcluster.app import build_app
from tests.support import stack_templates, write_env

NAME = "pv"
BASE: dict[str, Any] = {
    "network": {"availability_zone": "us-east-1a"},
    "retention": {"on_delete": "retain"},
    "cluster": {
        "backend": "pcluster",
        "name": "small",
        "pcluster": {
            "queues": [
                {"name": "gpu", "compute_resources": [{"name": "g5", "instance_type": "g5.12xlarge", "efa": False}]}
            ]
        },
    },
}


def _with(**retention: Any) -> dict[str, Any]:
    data = copy.deepcopy(BASE)
    data["retention"].update(retention)
    return data


EDITS: dict[str, dict[str, Any]] = {
    "base": BASE,
    "allow Storage/Lustre": _with(allow_replacement=["Storage/Lustre"]),
    "allow Network/Vpc": _with(allow_replacement=["Network/Vpc"]),
    "on_delete destroy": _with(on_delete="destroy"),
    "log retention 30 days": _with(log_retention_days=30),
}


@pytest.fixture(scope="module")
def values(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, dict[str, str]]]:
    """Per edit: each stack's rendered ``ProducerValues`` (parsed JSON), by stack name."""
    found: dict[str, dict[str, dict[str, str]]] = {}
    for index, (edit, data) in enumerate(EDITS.items()):
        folder = tmp_path_factory.mktemp(f"producer-values-{index}")
        write_env(folder / "envs", NAME, data)
        app, _ = build_app(folder / "envs", outdir=str(folder / "out"), template_checks=False)
        app.synth()
        templates = stack_templates(cx_api.CloudAssembly(str(folder / "out")))
        found[edit] = {
            stack.split("/", 1)[1]: json.loads(template["Resources"]["ProducerValues"]["Properties"]["Value"])
            for stack, template in templates.items()
            if "ProducerValues" in template.get("Resources", {})
        }
    return found


def test_every_consumer_records_what_it_reads(values: dict[str, dict[str, dict[str, str]]]) -> None:
    """The Storage stack reads the Network's key, security group, VPC and subnet: it records the Network."""
    base = values["base"]
    assert set(base["Storage"]) == {"Network"}
    assert set(base["Observability"]) == {"Network", "Storage"}
    assert set(base["Cluster"]) == {"Network", "Storage", "Observability"}
    assert "Network" not in base


@pytest.mark.parametrize("edit", ["allow Storage/Lustre", "allow Network/Vpc", "on_delete destroy"])
def test_an_allowed_replacement_or_retention_change_changes_every_consumer(
    values: dict[str, dict[str, dict[str, str]]], edit: str
) -> None:
    """An allowed replacement gives the producer new ids with its sections unchanged: every consumer re-reads."""
    for stack, recorded in values["base"].items():
        for producer, digest in recorded.items():
            assert values[edit][stack][producer] != digest, (stack, producer)


def test_a_change_outside_the_producers_inputs_changes_no_consumer(
    values: dict[str, dict[str, dict[str, str]]],
) -> None:
    """The edge: log retention decides no producer's output, so no consumer is updated for it."""
    assert values["log retention 30 days"] == values["base"]

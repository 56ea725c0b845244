"""Rendered configurations against ParallelCluster's own schema (tools/pcluster_schema_check.py in .venv-pcluster)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import aws_cdk as cdk
import pytest

from mlcluster.pcluster.placeholders import check_ready_config
from mlcluster.pcluster.render import ZoneSubnet, is_token, render_cluster_config
from tests.pcluster.pcluster_support import (
    ARCHETYPES_YAML,
    PCLUSTER_PYTHON,
    archetype,
    inputs,
    run_schema_check,
)

# CI always has the venv (make pytest installs it); skipping there would hide a broken set-up.
pytestmark = pytest.mark.skipif(
    not PCLUSTER_PYTHON.exists() and not os.environ.get("CI"), reason=".venv-pcluster is not set up (make pytest does)"
)


def token_inputs(stack: cdk.Stack) -> Any:
    """Deploy inputs whose IDs are CDK tokens, as the cluster stack passes them."""

    def ref(name: str) -> str:
        return cdk.Token.as_string(cdk.Fn.ref(name))

    return inputs(
        region=stack.region,
        private_subnets=(
            ZoneSubnet(zone="us-east-1a", subnet_id=cdk.Fn.import_value("PrivateSubnet1")),
            ZoneSubnet(zone="us-east-1b", subnet_id=cdk.Fn.import_value("PrivateSubnet2")),
        ),
        public_subnet_id=cdk.Fn.import_value("PublicSubnet"),
        security_group_ids=(cdk.Fn.import_value("NodeSecurityGroup"),),
        lustre_file_system_id=ref("Lustre"),
        openzfs_volume_id=cdk.Fn.get_att("OpenZfs", "RootVolumeId").to_string(),
        node_script_bucket=ref("NodeScriptBucket"),
        node_script_policy_arn=ref("NodeScriptPolicy"),
        reservation_group_arns={"p4de-pool": cdk.Fn.get_att("P4dePool", "Arn").to_string()},
    )


def unknown_key(config: dict[str, Any]) -> dict[str, Any]:
    config["HeadNode"]["Foo"] = 1
    return config


def wrong_type(config: dict[str, Any]) -> dict[str, Any]:
    config["Scheduling"]["SlurmQueues"][1]["ComputeResources"][0]["MinCount"] = "four"
    return config


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, list[str]]]:
    """Every configuration (and a file that is not YAML) checked in one run of the tool (ParallelCluster imports
    slowly); ``__returncode__`` is the run's exit status."""
    folder = tmp_path_factory.mktemp("pcluster-configs")
    configs: dict[str, dict[str, Any]] = {
        name: render_cluster_config(archetype(name), inputs()) for name in sorted(ARCHETYPES_YAML)
    }
    stack = cdk.Stack(cdk.App(), "Cluster")
    tokens = render_cluster_config(archetype("p4de-g5"), token_inputs(stack))
    configs["tokens"] = check_ready_config(tokens)
    configs["intrinsics"] = check_ready_config(stack.resolve(tokens))
    configs["raw-tokens"] = stack.resolve(tokens)
    configs["unknown-key"] = unknown_key(render_cluster_config(archetype("p4de-g5"), inputs()))
    configs["wrong-type"] = wrong_type(render_cluster_config(archetype("p4de-g5"), inputs()))
    files = {}
    for name, config in configs.items():
        path = folder / f"{name}.json"
        path.write_text(json.dumps(config, indent=1), encoding="utf-8")
        files[name] = path
    files["broken"] = folder / "broken.yaml"
    files["broken"].write_text("HeadNode: [unclosed", encoding="utf-8")
    output = run_schema_check(list(files.values()), cluster_name="p4de-train")
    results = {name: (path, output[str(path)]) for name, path in files.items()}
    results["__returncode__"] = (folder, output["__returncode__"])
    return results


@pytest.mark.parametrize("name", [*sorted(ARCHETYPES_YAML), "tokens", "intrinsics"])
def test_schema_accepts(results: dict[str, tuple[Path, list[str]]], name: str) -> None:
    assert results[name][1] == ["OK"]


def test_unknown_key_fails_with_key_path(results: dict[str, tuple[Path, list[str]]]) -> None:
    assert results["unknown-key"][1] == ["HeadNode.Foo: Unknown field."]


def test_wrong_type_fails_with_key_path(results: dict[str, tuple[Path, list[str]]]) -> None:
    assert results["wrong-type"][1] == ["Scheduling.SlurmQueues[1].ComputeResources[0].MinCount: Not a valid integer."]


def test_unreplaced_intrinsics_fail(results: dict[str, tuple[Path, list[str]]]) -> None:
    problems = results["raw-tokens"][1]
    assert problems != ["OK"]
    assert any(p.startswith("HeadNode.Networking.SubnetId:") for p in problems), problems


def test_placeholders_leave_no_tokens(tmp_path: Path) -> None:
    stack = cdk.Stack(cdk.App(), "Cluster")
    tokens = render_cluster_config(archetype("p4de-g5"), token_inputs(stack))
    text = json.dumps(tokens)
    assert is_token(text)
    ready = check_ready_config(tokens)
    assert not is_token(json.dumps(ready))
    assert ready["HeadNode"]["Networking"]["SubnetId"] == "subnet-0123456789abcdef0"
    assert ready["Scheduling"]["SlurmQueues"][0]["Networking"]["SubnetIds"] == ["subnet-0123456789abcdef0"]
    assert ready["SharedStorage"][0]["FsxLustreSettings"]["FileSystemId"] == "fs-0123456789abcdef0"
    resolved = check_ready_config(stack.resolve(tokens))
    assert "Ref" not in json.dumps(resolved) and "Fn::" not in json.dumps(resolved)
    # Values without tokens are kept as rendered.
    assert ready["Scheduling"]["SlurmQueues"][1]["ComputeResources"][0]["MaxCount"] == 10


def test_exit_status_and_unreadable_file(results: dict[str, tuple[Path, list[str]]], tmp_path: Path) -> None:
    assert results["broken"][1][0].startswith("(file): cannot be read")
    assert results["__returncode__"][1] == ["1"]  # the run had files that failed
    good = tmp_path / "good.json"
    good.write_text(json.dumps(render_cluster_config(archetype("p5-odcr"), inputs())), encoding="utf-8")
    output = run_schema_check([good])
    assert output[str(good)] == ["OK"]
    assert output["__returncode__"] == ["0"]

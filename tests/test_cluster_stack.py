"""The cluster stack per backend, and the pre-deploy checks that stop a bad cluster before any construct."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from aws_cdk import cx_api

from mlcluster.app import build_app
from mlcluster.config import ConfigError
from tests.support import ROOT, stack_templates, write_env

ZONE = {"network": {"availability_zone": "us-east-1a"}}
PCLUSTER: dict[str, Any] = {
    **ZONE,
    "retention": {"on_delete": "destroy"},
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
HYPERPOD: dict[str, Any] = {
    "network": {"availability_zone_id": "use1-az4"},
    "cluster": {
        "backend": "hyperpod",
        "hyperpod": {
            "workers": [{"instance_group_name": "workers", "instance_type": "ml.g5.8xlarge", "instance_count": 2}],
            "create_timeout_hours": 3,
        },
    },
}


@pytest.fixture(scope="module")
def templates(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    tmp = tmp_path_factory.mktemp("clusters")
    write_env(tmp / "envs", "pc", PCLUSTER)
    write_env(tmp / "envs", "hp", HYPERPOD)
    write_env(tmp / "envs", "none", ZONE)
    app, _ = build_app(tmp / "envs", outdir=str(tmp / "out"))
    app.synth()
    return stack_templates(cx_api.CloudAssembly(str(tmp / "out")))


def of_type(template: dict[str, Any], kind: str) -> dict[str, Any]:
    return {k: v for k, v in template["Resources"].items() if v["Type"] == kind}


def test_no_backend_no_cluster_stack(templates: dict[str, dict[str, Any]]) -> None:
    assert "none/Cluster" not in templates
    assert {"none/Network", "none/Storage"} <= set(templates)


def test_pcluster_stack(templates: dict[str, dict[str, Any]]) -> None:
    t = templates["pc/Cluster"]
    (cluster_id, cluster), *_ = of_type(t, "Custom::PclusterCluster").items()
    props = cluster["Properties"]
    assert props["ClusterName"] == "small"
    assert props["DeletionPolicy"] == "Delete"  # the environment destroys on delete
    config = props["ClusterConfiguration"]
    (fsx,) = [s for s in config["SharedStorage"] if s["StorageType"] == "FsxLustre"]
    assert fsx["FsxLustreSettings"]["FileSystemId"]["Fn::GetStackOutput"]["StackName"] == "pc-Storage"
    assert config["Imds"]["ImdsSupport"] == "v2.0"
    # Nodes run the uploaded scripts on first boot: the cluster waits for the upload.
    (upload_id,) = of_type(t, "Custom::CDKBucketDeployment")
    assert upload_id in cluster["DependsOn"]
    outputs = t["Outputs"]
    assert outputs["HeadNodeInstanceId"]["Value"] == {"Fn::GetAtt": [cluster_id, "headNode.instanceId"]}
    assert outputs["HeadNodeInstanceId"]["Export"]["Name"] == "pc-HeadNodeInstanceId"
    assert {"ClusterName", "HeadNodePrivateIp", "HeadNodeSsmCommand", "ValidationMessages"} <= set(outputs)


def test_hyperpod_stack(templates: dict[str, dict[str, Any]]) -> None:
    t = templates["hp/Cluster"]
    (wait,) = of_type(t, "AWS::CloudFormation::WaitCondition").values()
    assert wait["Properties"]["Timeout"] == str(3 * 3600)
    (cluster_id,) = of_type(t, "Custom::HyperPodCluster")
    assert cluster_id in wait["DependsOn"]
    outputs = t["Outputs"]
    assert {"ClusterName", "ClusterArn", "ClusterStatus", "ControllerSsmCommand"} <= set(outputs)
    assert outputs["ClusterStatus"]["Value"] == {
        "Fn::ToJsonString": {"Fn::GetAtt": [next(iter(of_type(t, "AWS::CloudFormation::WaitCondition"))), "Data"]}
    }
    assert "AWS::LanguageExtensions" in str(t.get("Transform"))
    names = [b["Properties"].get("BucketName") for b in of_type(t, "AWS::S3::Bucket").values()]
    assert {"Fn::Join": ["-", ["sagemaker-mlc-hp", {"Ref": "AWS::AccountId"}, {"Ref": "AWS::Region"}]]} in names


def test_cluster_stacks_do_not_touch_storage(templates: dict[str, dict[str, Any]]) -> None:
    for name in ("pc", "hp"):
        assert not of_type(templates[f"{name}/Cluster"], "AWS::FSx::FileSystem")
        storage_text = str(templates[f"{name}/Storage"])
        assert f"{name}-Cluster" not in storage_text


BAD_PLACEMENT: dict[str, Any] = {
    **ZONE,
    "cluster": {
        "backend": "pcluster",
        "pcluster": {
            "queues": [
                {
                    "name": "gpu",
                    "compute_resources": [
                        {
                            "name": "p5",
                            "instance_type": "p5.48xlarge",
                            "capacity_reservation_id": "cr-0123456789abcdef0",
                            "placement_group": True,
                        }
                    ],
                }
            ]
        },
    },
}


def test_pre_deploy_check_fails_before_any_construct(tmp_path: Path) -> None:
    write_env(tmp_path / "envs", "bad", BAD_PLACEMENT)
    with pytest.raises(ConfigError) as caught:
        build_app(tmp_path / "envs", outdir=str(tmp_path / "out"))
    message = str(caught.value)
    assert "bad.yaml: cluster.pcluster.queues[0].compute_resources[0].placement_group:" in message
    assert "insufficient capacity" in message
    assert not list((tmp_path / "out").glob("**/*.template.json"))


def test_app_reports_pre_deploy_error_without_traceback(tmp_path: Path) -> None:
    name_too_long = {**PCLUSTER, "cluster": {**PCLUSTER["cluster"], "name": "n" * 61}}
    write_env(tmp_path / "environments", "long", name_too_long)
    result = subprocess.run(
        [sys.executable, str(ROOT / "app.py")], cwd=tmp_path, capture_output=True, text=True, check=False
    )
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    assert "environments/long.yaml: cluster.name:" in result.stderr

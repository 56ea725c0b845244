"""A HyperPod environment with the managed Slurm accounting database, synthesized whole.

The stage runs every cdk-nag pack the file lists (NIST 800-53 R5 here) and AwsSolutions: synth
fails on any unacknowledged finding. The templates then show the database in the Storage stack,
the controller alone reading its secret, the lifecycle features pointing slurmdbd at it, and the
Observability stack's alarms on it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from aws_cdk import cx_api

from mlcluster.app import build_app
from tests.support import stack_templates, write_env

ENVIRONMENT: dict[str, Any] = {
    "compliance": {"packs": ["nist-800-53-r5"]},
    "network": {"availability_zone_id": "usw2-az4", "extra_zones": [{"availability_zone_id": "usw2-az1"}]},
    "storage": {"accounting": {}},
    "cluster": {
        "backend": "hyperpod",
        "hyperpod": {
            "workers": [{"instance_group_name": "gpu", "instance_type": "ml.p5.48xlarge"}],
            "lifecycle": {"accounting": {"mode": "managed"}},
        },
    },
    "observability": {"alarm_emails": ["ops@example.com"]},
}


@pytest.fixture(scope="module")
def outdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("accounting-stack")
    write_env(tmp / "envs", "acct", {"region": "us-west-2", **ENVIRONMENT})
    app, _ = build_app(tmp / "envs", outdir=str(tmp / "out"))
    app.synth()
    return tmp / "out"


@pytest.fixture(scope="module")
def templates(outdir: Path) -> dict[str, dict[str, Any]]:
    return stack_templates(cx_api.CloudAssembly(str(outdir)))


def of_type(template: dict[str, Any], kind: str) -> dict[str, Any]:
    return {k: v for k, v in template["Resources"].items() if v["Type"] == kind}


def test_the_database_lives_in_the_storage_stack(templates: dict[str, dict[str, Any]]) -> None:
    storage = templates["acct/Storage"]
    (cluster,) = of_type(storage, "AWS::RDS::DBCluster").values()
    assert cluster["DeletionPolicy"] == "Snapshot"
    assert cluster["Properties"]["DeletionProtection"] is True
    assert {"AccountingDatabaseEndpoint", "AccountingDatabaseSecretArn"} <= set(storage["Outputs"])
    assert not of_type(templates["acct/Cluster"], "AWS::RDS::DBCluster")


def _policies_of(template: dict[str, Any], role_prefix: str) -> list[dict[str, Any]]:
    return [
        statement
        for policy in of_type(template, "AWS::IAM::ManagedPolicy").values()
        if any(r["Ref"].startswith(role_prefix) for r in policy["Properties"].get("Roles", []))
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]
    ]


def test_only_the_controller_reads_and_decrypts_the_secret(templates: dict[str, dict[str, Any]]) -> None:
    cluster = templates["acct/Cluster"]
    controller = {s.get("Sid"): s for s in _policies_of(cluster, "Rolecontroller")}
    read = controller["ReadSecrets"]
    assert read["Action"] == "secretsmanager:GetSecretValue"
    assert read["Resource"]["Fn::GetStackOutput"]["StackName"] == "acct-Storage"
    decrypt = controller["DecryptSecrets"]
    assert decrypt["Action"] == "kms:Decrypt"
    assert decrypt["Resource"]["Fn::GetStackOutput"]["StackName"] == "acct-Network"
    assert list(decrypt["Condition"]["StringEquals"]) == ["kms:ViaService"]
    worker = {s.get("Sid") for s in _policies_of(cluster, "Rolegpu")}
    assert worker and not worker & {"ReadSecrets", "DecryptSecrets"}


def test_the_controller_runs_slurmdbd_against_it(outdir: Path, templates: dict[str, dict[str, Any]]) -> None:
    cluster = templates["acct/Cluster"]
    (features,) = outdir.glob("asset.*/mlcluster_features.json")
    accounting = json.loads(features.read_text(encoding="utf-8"))["accounting"]
    assert accounting["mode"] == "remote"
    markers: dict[str, Any] = {}
    for deployment in of_type(cluster, "Custom::CDKBucketDeployment").values():
        for source in deployment["Properties"].get("SourceMarkers", []):
            markers.update(source)
    host, port = accounting["endpoint"].rsplit(":", 1)
    assert port == "3306"
    assert markers[host]["Fn::GetStackOutput"]["StackName"] == "acct-Storage"
    assert markers[accounting["secret_arn"]]["Fn::GetStackOutput"]["StackName"] == "acct-Storage"


def test_observability_alarms_on_the_database(templates: dict[str, dict[str, Any]]) -> None:
    alarms = {k: v["Properties"] for k, v in of_type(templates["acct/Observability"], "AWS::CloudWatch::Alarm").items()}
    by_metric = {a["MetricName"]: a for a in alarms.values() if a.get("Namespace") == "AWS/RDS"}
    assert set(by_metric) == {"VolumeBytesUsed", "CPUUtilization", "ACUUtilization", "DatabaseConnections"}
    assert by_metric["VolumeBytesUsed"]["Threshold"] == 50 * 1024**3
    assert by_metric["CPUUtilization"]["Threshold"] == 90
    connections = by_metric["DatabaseConnections"]
    assert (connections["ComparisonOperator"], connections["TreatMissingData"]) == ("LessThanThreshold", "breaching")
    for alarm in by_metric.values():
        (dimension,) = alarm["Dimensions"]
        assert dimension["Name"] == "DBClusterIdentifier"
        assert alarm["AlarmActions"] and alarm["OKActions"]

"""The cluster stack per backend, and the pre-deploy checks that stop a bad cluster before any construct."""

from __future__ import annotations

import json
import runpy
from pathlib import Path
from typing import Any

import pytest
from aws_cdk import cx_api

from mlcluster.analysis.policy_eval import Request, evaluate
from mlcluster.app import build_app
from mlcluster.config import ConfigError
from mlcluster.lifecycle.hyperpod.plan import SCHEDULED_COPY_NAMESPACE
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
SECRET = "arn:aws:secretsmanager:us-east-1:111111111111:secret:slurmdb-AbCdEf"
HYPERPOD: dict[str, Any] = {
    "network": {
        "availability_zone_id": "use1-az4",
        "extra_zones": [{"availability_zone_id": "use1-az6"}],
    },
    # EFA-enabled Lustre (19200 GiB: the EFA step at 250 MB/s/TiB): p5 nodes reach it over EFA, g5 (Nitro v3) over TCP.
    "storage": {"lustre": {"efa_enabled": True, "storage_capacity_gib": 19200}},
    "cluster": {
        "backend": "hyperpod",
        "hyperpod": {
            "workers": [
                {"instance_group_name": "workers", "instance_type": "ml.g5.8xlarge", "instance_count": 2},
                {"instance_group_name": "spill", "instance_type": "ml.g5.8xlarge", "zones": ["use1-az6"]},
                {"instance_group_name": "efa", "instance_type": "ml.p5.48xlarge", "instance_count": 0},
            ],
            "lifecycle": {
                "accounting": {"mode": "remote", "endpoint": "db.example.internal:3306", "secret_arn": SECRET}
            },
        },
    },
}


@pytest.fixture(scope="module")
def assembly_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("clusters")
    write_env(tmp / "envs", "pc", PCLUSTER)
    write_env(tmp / "envs", "hp", HYPERPOD)
    write_env(tmp / "envs", "none", ZONE)
    app, _ = build_app(tmp / "envs", outdir=str(tmp / "out"))
    app.synth()
    return tmp / "out"


@pytest.fixture(scope="module")
def templates(assembly_dir: Path) -> dict[str, dict[str, Any]]:
    return stack_templates(cx_api.CloudAssembly(str(assembly_dir)))


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
    # The /home volume follows on_delete: destroy (nothing left billing after a throw-away environment).
    (home,) = [s for s in config["SharedStorage"] if s["MountDir"] == "/home"]
    assert home["EbsSettings"]["DeletionPolicy"] == "Delete"
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
    ((cluster_id, cluster),) = of_type(t, "AWS::SageMaker::Cluster").items()
    assert cluster["Properties"]["ClusterName"] == "mlcluster-hp"
    (preflight_id,) = of_type(t, "Custom::HyperPodPreflight")
    assert cluster["DependsOn"] == [preflight_id]
    assert not of_type(t, "AWS::CloudFormation::WaitCondition")
    outputs = t["Outputs"]
    assert {"ClusterName", "ClusterArn", "ClusterStatus", "ControllerSsmCommand"} <= set(outputs)
    assert outputs["ClusterStatus"]["Value"] == {"Fn::GetAtt": [cluster_id, "ClusterStatus"]}
    names = [b["Properties"].get("BucketName") for b in of_type(t, "AWS::S3::Bucket").values()]
    assert {"Fn::Join": ["-", ["mlc-lifecycle-hp", {"Ref": "AWS::AccountId"}, {"Ref": "AWS::Region"}]]} in names
    # The group that names a zone uses that zone's private subnet (OverrideVpcConfig); the others the cluster's.
    by_name = {g["InstanceGroupName"]: g for g in cluster["Properties"]["InstanceGroups"]}
    assert "OverrideVpcConfig" not in by_name["workers"]
    (spill_subnet,) = by_name["spill"]["OverrideVpcConfig"]["Subnets"]
    assert spill_subnet != cluster["Properties"]["VpcConfig"]["Subnets"][0]


def test_hyperpod_nodes_learn_which_groups_reach_an_efa_lustre_over_efa(assembly_dir: Path) -> None:
    (staged,) = assembly_dir.rglob("asset.*/provisioning_parameters.json")
    # The DNS name is a deploy-time marker inside its JSON string; the EFA keys are plain values.
    provisioning = json.loads(staged.read_text())
    assert provisioning["fsx_dns_name"].startswith("<<marker:")
    assert (provisioning["fsx_efa_enabled"], provisioning["fsx_efa_groups"]) == (True, ["efa"])


def test_hyperpod_one_role_per_group_and_only_the_controller_reads_the_secret(
    templates: dict[str, dict[str, Any]],
) -> None:
    """Issue 17 item 6: one execution role per group; workers hold neither the secret nor lifecycle writes."""
    t = templates["hp/Cluster"]
    ((_, cluster),) = of_type(t, "AWS::SageMaker::Cluster").items()
    roles = {
        g["InstanceGroupName"]: g["ExecutionRole"]["Fn::GetAtt"][0] for g in cluster["Properties"]["InstanceGroups"]
    }
    assert len(set(roles.values())) == len(roles) == 4

    def actions_of(role_id: str) -> dict[str, set[str]]:
        found: dict[str, set[str]] = {}
        for policy in of_type(t, "AWS::IAM::ManagedPolicy").values():
            if {"Ref": role_id} not in policy["Properties"].get("Roles", []):
                continue
            for statement in policy["Properties"]["PolicyDocument"]["Statement"]:
                listed = statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]
                found.setdefault(statement.get("Sid", ""), set()).update(listed)
        return found

    controller = actions_of(roles["controller-machine"])
    assert controller["ReadSecrets"] == {"secretsmanager:GetSecretValue"}
    for worker in ("workers", "spill"):
        granted = actions_of(roles[worker])
        every = set().union(*granted.values())
        assert "ReadSecrets" not in granted and not {a for a in every if a.startswith("secretsmanager:")}
        # Data bucket: read by default; nothing that writes or deletes objects anywhere.
        assert granted["DataObjects"] == {"s3:GetObject"}
        assert not {a for a in every if a.startswith(("s3:Put", "s3:Delete"))}


def test_only_the_hyperpod_controller_may_publish_the_daily_copy_metric(templates: dict[str, dict[str, Any]]) -> None:
    """Issue 33 item 1: a job on any other node (which can read its node's role) cannot keep the copy alarm quiet.

    Each group's managed policies are evaluated as that role's identity policy: ``PutMetricData`` in the
    copy's namespace is allowed for the controller only, and HyperPod's own namespace stays every node's.
    """
    t = templates["hp/Cluster"]
    ((_, cluster),) = of_type(t, "AWS::SageMaker::Cluster").items()
    roles = {
        g["InstanceGroupName"]: g["ExecutionRole"]["Fn::GetAtt"][0] for g in cluster["Properties"]["InstanceGroups"]
    }

    def may_put(role_id: str, namespace: str) -> bool:
        principal = ("AWS", f"arn:aws:iam::111111111111:role/{role_id}")
        statements = [
            {**statement, "Principal": {"AWS": principal[1]}}
            for policy in of_type(t, "AWS::IAM::ManagedPolicy").values()
            if {"Ref": role_id} in policy["Properties"].get("Roles", [])
            for statement in policy["Properties"]["PolicyDocument"]["Statement"]
        ]
        request = Request(principal, "cloudwatch:PutMetricData", "*", {"cloudwatch:namespace": namespace})
        return evaluate(statements, request).allowed

    assert SCHEDULED_COPY_NAMESPACE != "/aws/sagemaker/Clusters"
    assert may_put(roles["controller-machine"], SCHEDULED_COPY_NAMESPACE)
    others = [name for name in roles if name != "controller-machine"]
    assert others == ["workers", "spill", "efa"]
    for name in others:
        assert not may_put(roles[name], SCHEDULED_COPY_NAMESPACE), name
        assert may_put(roles[name], "/aws/sagemaker/Clusters"), name
    # The grant is the namespace, not a prefix of it.
    assert not may_put(roles["controller-machine"], f"{SCHEDULED_COPY_NAMESPACE}X")


def test_hyperpod_controller_may_write_only_its_patch_backup_prefix(templates: dict[str, dict[str, Any]]) -> None:
    """`mlcluster patch` runs mlcluster-backup on the controller; with the default read access it must still write there.

    The grant is the cluster's own prefix of the cluster's patch backup bucket (never the data bucket),
    on the controller's role only.
    """
    t = templates["hp/Cluster"]
    ((_, cluster),) = of_type(t, "AWS::SageMaker::Cluster").items()
    roles = {
        g["InstanceGroupName"]: g["ExecutionRole"]["Fn::GetAtt"][0] for g in cluster["Properties"]["InstanceGroups"]
    }

    def backup_statements(role_id: str) -> list[dict[str, Any]]:
        return [
            statement
            for policy in of_type(t, "AWS::IAM::ManagedPolicy").values()
            if {"Ref": role_id} in policy["Properties"].get("Roles", [])
            for statement in policy["Properties"]["PolicyDocument"]["Statement"]
            if statement.get("Sid", "").startswith("PatchBackup")
        ]

    controller = {s["Sid"]: s for s in backup_statements(roles["controller-machine"])}
    objects = controller["PatchBackupObjects"]
    assert set(objects["Action"]) == {"s3:GetObject", "s3:PutObject"}
    assert json.dumps(objects["Resource"]).endswith('/mlcluster/patch/mlcluster-hp/*"]]}')
    backup_bucket = t["Outputs"]["PatchBackupBucketName"]["Value"]["Ref"]
    assert backup_bucket.startswith("PatchBackups") and backup_bucket in of_type(t, "AWS::S3::Bucket")
    assert objects["Resource"]["Fn::Join"][1][0] == {"Fn::GetAtt": [backup_bucket, "Arn"]}
    listing = controller["PatchBackupList"]
    assert listing["Condition"] == {"StringLike": {"s3:prefix": ["mlcluster/patch/mlcluster-hp/*"]}}
    for worker in ("workers", "spill"):
        assert backup_statements(roles[worker]) == []


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


def test_app_reports_pre_deploy_error_without_traceback(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``app.py`` (what ``cdk synth`` runs) exits 1 with the config error and no traceback.

    Run in this process as ``python app.py`` runs it (``runpy``, as ``__main__``): an
    exception other than the exit would escape ``run_path`` and fail the test.
    """
    name_too_long = {**PCLUSTER, "cluster": {**PCLUSTER["cluster"], "name": "n" * 61}}
    write_env(tmp_path / "environments", "long", name_too_long)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as raised:
        runpy.run_path(str(ROOT / "app.py"), run_name="__main__")
    assert raised.value.code == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert "environments/long.yaml: cluster.name:" in err


def test_hyperpod_zone_not_in_the_network_is_a_config_error(tmp_path: Path) -> None:
    workers = [{"instance_group_name": "workers", "instance_type": "ml.g5.8xlarge", "zones": ["use1-az9"]}]
    bad = {**HYPERPOD, "cluster": {"backend": "hyperpod", "hyperpod": {"workers": workers}}}
    write_env(tmp_path / "envs", "hz", bad)
    with pytest.raises(ConfigError) as caught:
        build_app(tmp_path / "envs", outdir=str(tmp_path / "out"))
    assert "hz.yaml: cluster.hyperpod.workers[0].zones: ['use1-az9'] is not valid; allowed: zones of network:" in str(
        caught.value
    )

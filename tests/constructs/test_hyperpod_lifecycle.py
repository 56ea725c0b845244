"""HyperPodLifecycle on rendered CloudFormation and staged assets: bucket name, upload, generated files, errors.

One app is synthesized once with cdk-nag's AwsSolutions pack on. The FSx DNS
name is a deploy-time value (an import from the storage stack), so the
generated provisioning parameters must carry a marker that the upload
replaces at deployment; the staged files are parsed with the lifecycle
scripts' own parsers.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import aws_cdk as cdk
import pytest
from aws_cdk.assertions import Template
from cdk_nag import AwsSolutionsChecks

from mlcluster.config.hyperpod import AccountingConfig, LifecycleConfig, PosixUser
from mlcluster.constructs.hyperpod_lifecycle import HyperPodLifecycle, features_document
from mlcluster.constructs.nag import flatten_resource
from mlcluster.lifecycle.hyperpod.plan import parse_features, parse_provisioning

SECRET = "arn:aws:secretsmanager:us-east-1:111111111111:secret:slurm-db-AbCdEf"
DNS_EXPORT = "storage-FsxDnsName"
FEATURES = LifecycleConfig(
    users=(PosixUser(name="alice", uid=2001), PosixUser(name="bob", uid=2002)),
    accounting=AccountingConfig(mode="remote", endpoint="db.example.com:3306", secret_arn=SECRET),
    observability=True,
)


class Built:
    """The synthesized template, the output directory and the construct."""

    def __init__(self, outdir: Path, template: dict[str, Any], lifecycle: HyperPodLifecycle) -> None:
        self.outdir = outdir
        self.template = template
        self.lifecycle = lifecycle


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Built:
    out = tmp_path_factory.mktemp("cdk.out")
    app = cdk.App(outdir=str(out))
    stack = cdk.Stack(app, "Lifecycle")
    lifecycle = HyperPodLifecycle(
        stack,
        "Lifecycle",
        environment_name="dev",
        controller_group="controller-machine",
        login_group="login-nodes",
        worker_groups={"gpu": "train", "cpu": "cpu"},
        fsx_dns_name=cdk.Fn.import_value(DNS_EXPORT),
        fsx_mount_name="abcdefgh",
        features=FEATURES,
    )
    cdk.Validations.of(app).add_plugins(AwsSolutionsChecks(app))
    app.synth()  # raises on any unacknowledged cdk-nag finding
    return Built(out, Template.from_stack(stack).to_json(), lifecycle)


def of_type(built: Built, kind: str) -> dict[str, dict[str, Any]]:
    return {k: v for k, v in built.template["Resources"].items() if v["Type"] == kind}


def lifecycle_bucket(built: Built) -> tuple[str, dict[str, Any]]:
    ((name, bucket),) = [
        (k, v) for k, v in of_type(built, "AWS::S3::Bucket").items() if "BucketName" in v["Properties"]
    ]
    return name, bucket


def deployment(built: Built) -> dict[str, Any]:
    (found,) = of_type(built, "Custom::CDKBucketDeployment").values()
    return found["Properties"]


def staged(built: Built, file_name: str) -> Path:
    """The staged asset folder that holds ``file_name`` (json_data and the scripts are separate assets)."""
    (folder,) = [p.parent for p in built.outdir.glob(f"asset.*/{file_name}")]
    return folder


def test_bucket_name_is_unique_per_environment_and_matches_no_managed_policy(built: Built) -> None:
    """Issue 17 item 1: no 'sagemaker' in the name in any case (AWS managed policies grant writes by that word)."""
    _, bucket = lifecycle_bucket(built)
    name = flatten_resource(bucket["Properties"]["BucketName"])
    assert name == "mlc-lifecycle-dev-<AWS::AccountId>-<AWS::Region>"
    assert "sagemaker" not in name.lower()


def test_bucket_policy_denies_object_changes_to_all_but_the_upload(built: Built) -> None:
    """Issue 17 item 1: an explicit deny for every principal but the upload function's role beats any allow."""
    name, _ = lifecycle_bucket(built)
    (policy,) = [
        p for p in of_type(built, "AWS::S3::BucketPolicy").values() if p["Properties"]["Bucket"] == {"Ref": name}
    ]
    (deny,) = [
        s for s in policy["Properties"]["PolicyDocument"]["Statement"] if s.get("Sid") == "OnlyTheDeployChangesObjects"
    ]
    assert deny["Effect"] == "Deny" and deny["Principal"] == {"AWS": "*"}
    assert {"s3:PutObject", "s3:DeleteObject", "s3:DeleteObjectVersion", "s3:PutObjectAcl"} <= set(deny["Action"])
    assert flatten_resource(deny["Resource"]) == f"<{name}.Arn>/*"
    (writer,) = deny["Condition"]["ArnNotEquals"]["aws:PrincipalArn"]
    (upload_role,) = [k for k in of_type(built, "AWS::IAM::Role") if k.startswith("CustomCDKBucketDeployment")]
    assert writer == {"Fn::GetAtt": [upload_role, "Arn"]}


def test_bucket_is_secured_like_the_data_bucket(built: Built) -> None:
    name, bucket = lifecycle_bucket(built)
    props = bucket["Properties"]
    assert props["VersioningConfiguration"] == {"Status": "Enabled"}
    (rule,) = props["BucketEncryption"]["ServerSideEncryptionConfiguration"]
    assert rule["ServerSideEncryptionByDefault"] == {"SSEAlgorithm": "AES256"}
    # All four settings, each true: all() over the values would pass with one setting alone.
    assert props["PublicAccessBlockConfiguration"] == {
        "BlockPublicAcls": True,
        "BlockPublicPolicy": True,
        "IgnorePublicAcls": True,
        "RestrictPublicBuckets": True,
    }
    assert "DestinationBucketName" in props["LoggingConfiguration"]
    assert bucket["DeletionPolicy"] == "Retain"
    policies = [
        p["Properties"]["PolicyDocument"]["Statement"]
        for p in of_type(built, "AWS::S3::BucketPolicy").values()
        if p["Properties"]["Bucket"] == {"Ref": name}
    ]
    (statements,) = policies
    # Exactly CDK's enforce_ssl statement: a Deny of every S3 action on the bucket and its objects when
    # aws:SecureTransport is "false" (a "true" there would refuse TLS requests and allow plain HTTP ones).
    tls = [s for s in statements if "aws:SecureTransport" in json.dumps(s.get("Condition"))]
    assert tls == [
        {
            "Action": "s3:*",
            "Condition": {"Bool": {"aws:SecureTransport": "false"}},
            "Effect": "Deny",
            "Principal": {"AWS": "*"},
            "Resource": [
                {"Fn::GetAtt": [name, "Arn"]},
                {"Fn::Join": ["", [{"Fn::GetAtt": [name, "Arn"]}, "/*"]]},
            ],
        }
    ]


def test_upload_goes_under_the_prefix_and_prunes(built: Built) -> None:
    name, _ = lifecycle_bucket(built)
    props = deployment(built)
    assert props["DestinationBucketName"] == {"Ref": name}
    assert props["DestinationBucketKeyPrefix"] == "lifecycle/"
    assert props["Prune"] is True
    # scripts, rendered on_create.sh, two JSON files, the collector's and the exporters' shared scripts
    assert len(props["SourceObjectKeys"]) == 6


def test_provisioning_parameters_carry_groups_and_the_deploy_time_fsx_name(built: Built) -> None:
    text = (staged(built, "provisioning_parameters.json") / "provisioning_parameters.json").read_text()
    props = deployment(built)

    def markers_of(file_name: str) -> dict[str, Any]:
        """The upload markers of the source that uploads ``file_name`` (markers are numbered per source)."""
        key = staged(built, file_name).name.removeprefix("asset.") + ".zip"
        return dict(props["SourceMarkers"][props["SourceObjectKeys"].index(key)])

    ((marker, value),) = markers_of("provisioning_parameters.json").items()
    # At deployment the marker becomes the storage stack's export, inside the JSON string.
    assert value == {"Fn::ImportValue": DNS_EXPORT}
    # on_create.sh carries its copy of the generated file as a base64 data line that CloudFormation encodes
    # (Fn::Base64 of the same text with the same deploy-time value), never as shell text (issue 24).
    on_create = (staged(built, "on_create.sh") / "on_create.sh").read_text()
    ((copy_marker, copy_value),) = markers_of("on_create.sh").items()
    assert set(copy_value) == {"Fn::Base64"} and json.dumps(value) in json.dumps(copy_value)
    assert copy_marker in on_create and text.replace(marker, copy_marker) not in on_create
    content = json.loads(text.replace(marker, "fs-0123456789abcdef0.fsx.us-east-1.amazonaws.com"))
    assert content == {
        "version": "1.0.0",
        "workload_manager": "slurm",
        "controller_group": "controller-machine",
        "login_group": "login-nodes",
        "worker_groups": [
            {"instance_group_name": "gpu", "partition_name": "train"},
            {"instance_group_name": "cpu", "partition_name": "cpu"},
        ],
        "fsx_dns_name": "fs-0123456789abcdef0.fsx.us-east-1.amazonaws.com",
        "fsx_mountname": "abcdefgh",
    }
    params = parse_provisioning(content)
    assert [g.partition_name for g in params.worker_groups] == ["train", "cpu"]


def test_an_efa_file_system_names_the_groups_that_reach_it_over_efa(tmp_path: Path) -> None:
    app = cdk.App(outdir=str(tmp_path))
    stack = cdk.Stack(app, "Efa")
    HyperPodLifecycle(
        stack, "Lifecycle", **{**VALID, "worker_groups": {"gpu": "dev", "cpu": "cpu"}}, fsx_efa_groups=["gpu"]
    )
    app.synth()
    (folder,) = [p.parent for p in tmp_path.glob("asset.*/provisioning_parameters.json")]
    content = json.loads((folder / "provisioning_parameters.json").read_text())
    assert (content["fsx_efa_enabled"], content["fsx_efa_groups"]) == (True, ["gpu"])
    params = parse_provisioning(content)
    assert (params.fsx_efa_enabled, params.fsx_efa_groups) == (True, ("gpu",))


def test_features_file_is_what_the_scripts_parse(built: Built) -> None:
    content = json.loads((staged(built, "mlcluster_features.json") / "mlcluster_features.json").read_text())
    assert content == {
        "users": [{"name": "alice", "uid": 2001}, {"name": "bob", "uid": 2002}],
        "accounting": {"mode": "remote", "endpoint": "db.example.com:3306", "secret_arn": SECRET},
        "docker": True,
        "enroot_pyxis": True,
        "home_on_fsx": True,
        "observability": True,
        "docker_group": False,
        "rootless_podman": True,
        "collector": False,
    }
    features = parse_features(content)
    assert features.accounting.secret_arn == SECRET and [u.name for u in features.users] == ["alice", "bob"]


def test_default_features_leave_out_unused_accounting_keys() -> None:
    assert features_document(LifecycleConfig())["accounting"] == {"mode": "local"}
    parse_features(features_document(LifecycleConfig()))


def test_scripts_are_uploaded_without_caches(built: Built) -> None:
    folder = staged(built, "plan.py")  # on_create.sh is uploaded rendered, as its own source
    assert (folder / "plan.py").is_file()
    assert (folder / "steps").is_dir()
    assert not list(folder.rglob("__pycache__")) and not list(folder.rglob("*.pyc"))


def test_attributes_for_the_cluster(built: Built) -> None:
    lifecycle = built.lifecycle
    stack = cdk.Stack.of(lifecycle)
    name, _ = lifecycle_bucket(built)
    assert stack.resolve(lifecycle.source_s3_uri) == {"Fn::Join": ["", ["s3://", {"Ref": name}, "/lifecycle/"]]}
    assert lifecycle.on_create == "on_create.sh"
    assert lifecycle.provisioning_parameters_key == "lifecycle/provisioning_parameters.json"
    assert lifecycle.features_key == "lifecycle/mlcluster_features.json"
    assert lifecycle.worker_groups == {"gpu": "train", "cpu": "cpu"}


def test_upload_function_findings_are_acknowledged_on_it(built: Built) -> None:
    acknowledged: dict[str, str] = {}
    for entries in json.loads((built.outdir / "Lifecycle.metadata.json").read_text()).values():
        for entry in entries:
            if entry["type"] == "aws:cdk:acknowledged-rules":
                acknowledged.update({k.removeprefix("Annotation::"): v for k, v in entry["data"].items()})
    assets = (
        "AwsSolutions-IAM5[Resource::arn:<AWS::Partition>:s3:::cdk-hnb659fds-assets-<AWS::AccountId>-<AWS::Region>/*]"
    )
    assert assets in acknowledged
    assert "AwsSolutions-L1" in acknowledged
    assert all(len(reason) > 40 for reason in acknowledged.values())


# -- validation ---------------------------------------------------------------------------------

VALID: dict[str, Any] = {
    "environment_name": "dev",
    "controller_group": "controller-machine",
    "worker_groups": {"gpu": "dev"},
    "fsx_dns_name": "fs-0123456789abcdef0.fsx.us-east-1.amazonaws.com",
    "fsx_mount_name": "abcdefgh",
}


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"environment_name": "Dev"}, "environment_name: 'Dev' is not allowed"),
        ({"environment_name": "sagemaker-dev"}, "environment_name: 'sagemaker-dev' is not allowed"),
        ({"environment_name": "e" * 21}, "up to 64 characters long; S3 allows 63"),
        ({"controller_group": "-controller"}, "controller_group: '-controller' is not an instance group name"),
        ({"login_group": "gpu"}, "group names ['controller-machine', 'gpu', 'gpu'] repeat"),
        ({"worker_groups": {}}, "worker_groups: {} is not allowed"),
        ({"worker_groups": {"gpu": "a b"}}, "worker_groups['gpu']: partition 'a b' is not allowed"),
        ({"fsx_mount_name": " "}, "fsx_mount_name: ' ' is empty"),
        ({"prefix": "lifecycle"}, "prefix: 'lifecycle' is not allowed"),
        ({"removal_policy": cdk.RemovalPolicy.SNAPSHOT}, "removal_policy:"),
        ({"fsx_efa_groups": ["cpu"]}, "fsx_efa_groups: ['cpu'] are not instance groups of this cluster"),
    ],
)
def test_bad_props_are_named(changes: dict[str, Any], message: str) -> None:
    stack = cdk.Stack(cdk.App(), "Checks")
    with pytest.raises(ValueError, match="HyperPodLifecycle: ") as caught:
        HyperPodLifecycle(stack, "Lifecycle", **{**VALID, **changes})
    assert message in str(caught.value)


def test_known_account_and_region_allow_a_longer_environment_name() -> None:
    env = cdk.Environment(account="111111111111", region="us-east-1")
    stack = cdk.Stack(cdk.App(), "Known", env=env)
    # 14 + 25 + 1 + 12 + 1 + 9 = 62 characters: fits once the region is known to be us-east-1.
    lifecycle = HyperPodLifecycle(stack, "Lifecycle", **{**VALID, "environment_name": "e" * 25})
    assert lifecycle.prefix == "lifecycle/"
    with pytest.raises(ValueError, match="up to 65 characters long"):
        HyperPodLifecycle(
            cdk.Stack(cdk.App(), "Known", env=env), "Lifecycle", **{**VALID, "environment_name": "e" * 28}
        )


def test_scripts_dir_must_hold_on_create(tmp_path: Path) -> None:
    stack = cdk.Stack(cdk.App(), "Checks")
    with pytest.raises(ValueError, match=r"scripts_dir: '.*' has no on_create.sh"):
        HyperPodLifecycle(stack, "Lifecycle", **VALID, scripts_dir=tmp_path)


def test_the_daily_copy_is_written_only_when_on() -> None:
    """``scheduled_backup`` (on by default) puts the bucket, key and prefix in the features file; false leaves them out."""
    target = {
        "bucket": "hyperpod-cluster-patchbackups-1a2b3c",
        "key_arn": "arn:aws:kms:us-east-1:123456789012:key/1234abcd-12ab-34cd-56ef-1234567890ab",
        "prefix": "mlcluster/patch/ml/scheduled/",
        "cluster_name": "ml",
    }
    on = features_document(LifecycleConfig(), scheduled_backup=target)
    assert on["scheduled_backup"] == target
    assert parse_features(on).scheduled_backup is not None
    off = features_document(LifecycleConfig(scheduled_backup=False), scheduled_backup=target)
    assert "scheduled_backup" not in off
    assert parse_features(off).scheduled_backup is None

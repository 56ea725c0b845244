"""HyperPodExecutionRole on rendered CloudFormation: trust, the scope of every statement, validation errors.

One app is synthesized once with cdk-nag's AwsSolutions pack on: a storage
stack holds a KMS-encrypted data bucket, a cluster stack the network and
three roles (read/write data access with a secret, read-only, no data). The
data bucket crosses stacks, so its wildcard acknowledgement must name the
export cdk-nag reports, which the synth proves.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import aws_cdk as cdk
import pytest
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_s3 as s3
from aws_cdk.assertions import Template
from cdk_nag import AwsSolutionsChecks

from mlcluster.constructs.data_bucket import DataBucket
from mlcluster.constructs.hyperpod_role import HyperPodExecutionRole
from mlcluster.constructs.nag import flatten_resource
from mlcluster.constructs.network import ClusterNetwork
from mlcluster.constructs.patch_backup import PatchBackupBucket
from mlcluster.lifecycle.hyperpod.plan import SCHEDULED_COPY_NAMESPACE

SECRET = "arn:aws:secretsmanager:us-east-1:111111111111:secret:slurm-db-AbCdEf"
LIFECYCLE_BUCKET = "mlc-lifecycle-test-111111111111-us-east-1"
LOG_GROUPS = "arn:<AWS::Partition>:logs:<AWS::Region>:<AWS::AccountId>:log-group:/aws/sagemaker/Clusters/*"
EC2 = "arn:<AWS::Partition>:ec2:<AWS::Region>:<AWS::AccountId>"


class Built:
    """The synthesized cluster stack's template and the output directory."""

    def __init__(self, outdir: Path, template: dict[str, Any]) -> None:
        self.outdir = outdir
        self.template = template


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Built:
    out = tmp_path_factory.mktemp("cdk.out")
    app = cdk.App(outdir=str(out))
    storage = cdk.Stack(app, "Storage")
    data = DataBucket(storage, "Data", encryption="kms")
    stack = cdk.Stack(app, "Cluster")
    net = ClusterNetwork(stack, "Net", availability_zone_id="use1-az4")
    lifecycle_bucket = s3.Bucket.from_bucket_name(stack, "LifecycleBucket", LIFECYCLE_BUCKET)
    common: dict[str, Any] = {
        "vpc": net.vpc,
        "subnets": net.private_subnets,
        "security_groups": [net.security_group],
        "lifecycle_bucket": lifecycle_bucket,
    }
    HyperPodExecutionRole(
        stack, "Full", **common, data_bucket=data.bucket, data_bucket_access="read_write", secret_arns=[SECRET]
    )
    HyperPodExecutionRole(stack, "ReadOnly", **common, data_bucket=data.bucket)
    HyperPodExecutionRole(stack, "Minimal", **common)
    cdk.Validations.of(app).add_plugins(AwsSolutionsChecks(app))
    app.synth()  # raises on any unacknowledged cdk-nag finding
    return Built(out, Template.from_stack(stack).to_json())


def resources(template: dict[str, Any], kind: str, prefix: str = "") -> dict[str, dict[str, Any]]:
    return {k: v for k, v in template["Resources"].items() if v["Type"] == kind and k.startswith(prefix)}


def role(built: Built, name: str) -> dict[str, Any]:
    (found,) = [v for k, v in resources(built.template, "AWS::IAM::Role", name).items() if "Telemetry" not in k]
    return found


def policy(built: Built, role_name: str, policy_name: str) -> dict[str, Any]:
    (found,) = resources(built.template, "AWS::IAM::ManagedPolicy", f"{role_name}{policy_name}").values()
    return found


def statement(built: Built, role_name: str, policy_name: str, sid: str) -> dict[str, Any]:
    document = policy(built, role_name, policy_name)["Properties"]["PolicyDocument"]
    (found,) = [s for s in document["Statement"] if s.get("Sid") == sid]
    return found


def texts(value: Any) -> list[str]:
    """A statement's Action or Resource as flat strings (cdk-nag's rendering)."""
    return [flatten_resource(v) for v in (value if isinstance(value, list) else [value])]


def test_trust_is_the_documented_hyperpod_trust_policy(built: Built) -> None:
    """Issue 10 path 9: the SageMaker guide's trust policy, without conditions on keys it does not say it sends."""
    (trust,) = role(built, "Full")["Properties"]["AssumeRolePolicyDocument"]["Statement"]
    assert trust == {"Action": "sts:AssumeRole", "Effect": "Allow", "Principal": {"Service": "sagemaker.amazonaws.com"}}


def test_no_inline_or_aws_managed_policies(built: Built) -> None:
    for name in ("Full", "ReadOnly", "Minimal"):
        props = role(built, name)["Properties"]
        assert "Policies" not in props and "ManagedPolicyArns" not in props
    ours = {k for k in resources(built.template, "AWS::IAM::Role") if k.startswith(("Full", "ReadOnly", "Minimal"))}
    for inline in resources(built.template, "AWS::IAM::Policy").values():
        assert not {r["Ref"] for r in inline["Properties"]["Roles"]} & ours


def test_every_policy_is_attached_to_its_role(built: Built) -> None:
    (full_role,) = [k for k in resources(built.template, "AWS::IAM::Role", "Full")]
    names = ("Telemetry", "SessionManager", "Lifecycle", "Network", "DataBucket", "Secrets")
    for name in names:
        assert policy(built, "Full", name)["Properties"]["Roles"] == [{"Ref": full_role}]
    minimal = resources(built.template, "AWS::IAM::ManagedPolicy", "Minimal")
    assert len(minimal) == 4  # no data bucket, no secrets


def test_logs_only_under_the_cluster_log_groups(built: Built) -> None:
    groups = statement(built, "Full", "Telemetry", "ClusterLogGroups")
    assert groups["Action"] == ["logs:CreateLogGroup", "logs:DescribeLogStreams"]
    assert texts(groups["Resource"]) == [LOG_GROUPS]
    streams = statement(built, "Full", "Telemetry", "ClusterLogStreams")
    assert set(streams["Action"]) == {"logs:CreateLogStream", "logs:PutLogEvents", "logs:DescribeLogStreams"}
    assert texts(streams["Resource"]) == [f"{LOG_GROUPS}:log-stream:*"]


def test_metrics_only_in_the_hyperpod_namespace(built: Built) -> None:
    metrics = statement(built, "Full", "Telemetry", "ClusterMetrics")
    assert metrics["Action"] == "cloudwatch:PutMetricData"
    assert metrics["Resource"] == "*"
    assert metrics["Condition"] == {"StringEquals": {"cloudwatch:namespace": "/aws/sagemaker/Clusters"}}
    # Every node's role holds this one: the daily copy's data point must not be in it (jobs could forge it).
    assert metrics["Condition"]["StringEquals"]["cloudwatch:namespace"] != SCHEDULED_COPY_NAMESPACE
    assert not resources(built.template, "AWS::IAM::ManagedPolicy", "FullScheduledCopyMetric")


def test_copy_metric_namespace_is_its_own_policy() -> None:
    app = cdk.App()
    stack = cdk.Stack(app, "Cluster")
    net = ClusterNetwork(stack, "Net", availability_zone_id="use1-az4")
    HyperPodExecutionRole(
        stack,
        "Controller",
        vpc=net.vpc,
        subnets=net.private_subnets,
        security_groups=[net.security_group],
        lifecycle_bucket=s3.Bucket.from_bucket_name(stack, "LifecycleBucket", LIFECYCLE_BUCKET),
        copy_metric_namespace=SCHEDULED_COPY_NAMESPACE,
    )
    cdk.Validations.of(app).add_plugins(AwsSolutionsChecks(app))
    app.synth()  # the wildcard is acknowledged
    built = Built(Path(), Template.from_stack(stack).to_json())
    metric = statement(built, "Controller", "ScheduledCopyMetric", "ScheduledCopyMetric")
    assert metric["Action"] == "cloudwatch:PutMetricData"
    assert metric["Condition"] == {"StringEquals": {"cloudwatch:namespace": SCHEDULED_COPY_NAMESPACE}}


@pytest.mark.parametrize("namespace", ["/aws/sagemaker/Clusters", "AWS/EC2", ":x", "", "n" * 256])
def test_copy_metric_namespace_is_never_a_shared_one(parts: dict[str, Any], namespace: str) -> None:
    with pytest.raises(ValueError, match=f"copy_metric_namespace: {re.escape(repr(namespace))} is not allowed"):
        HyperPodExecutionRole(
            parts["stack"],
            f"BadNamespace{len(parts['stack'].node.children)}",
            vpc=parts["vpc"],
            subnets=parts["subnets"][:1],
            security_groups=parts["groups"][:1],
            lifecycle_bucket=parts["bucket"],
            copy_metric_namespace=namespace,
        )


def test_session_manager_channels(built: Built) -> None:
    channels = statement(built, "Full", "SessionManager", "SessionChannels")
    assert sorted(channels["Action"]) == [
        "ssmmessages:CreateControlChannel",
        "ssmmessages:CreateDataChannel",
        "ssmmessages:OpenControlChannel",
        "ssmmessages:OpenDataChannel",
    ]
    assert channels["Resource"] == "*"


def test_lifecycle_read_is_limited_to_the_prefix(built: Built) -> None:
    read = statement(built, "Full", "Lifecycle", "ReadLifecycleScripts")
    assert read["Action"] == "s3:GetObject"
    assert texts(read["Resource"]) == [f"arn:<AWS::Partition>:s3:::{LIFECYCLE_BUCKET}/lifecycle/*"]
    listing = statement(built, "Full", "Lifecycle", "ListLifecycleScripts")
    assert listing["Action"] == "s3:ListBucket"
    assert texts(listing["Resource"]) == [f"arn:<AWS::Partition>:s3:::{LIFECYCLE_BUCKET}"]
    assert listing["Condition"] == {"StringLike": {"s3:prefix": ["lifecycle/*"]}}


def test_interfaces_are_created_only_in_the_cluster_subnets_and_groups(built: Built) -> None:
    create = statement(built, "Full", "Network", "CreateInterfacesInClusterSubnets")
    assert create["Action"] == "ec2:CreateNetworkInterface"
    subnet = next(k for k in resources(built.template, "AWS::EC2::Subnet") if "Private1" in k)
    group = next(iter(resources(built.template, "AWS::EC2::SecurityGroup")))
    assert sorted(texts(create["Resource"])) == [
        f"{EC2}:network-interface/*",
        f"{EC2}:security-group/<{group}.GroupId>",
        f"{EC2}:subnet/<{subnet}>",
    ]
    tag = statement(built, "Full", "Network", "TagInterfacesOnCreate")
    assert tag["Condition"] == {"StringEquals": {"ec2:CreateAction": "CreateNetworkInterface"}}
    assert texts(tag["Resource"]) == [f"{EC2}:network-interface/*"]


def test_interface_changes_are_held_to_the_cluster_vpc(built: Built) -> None:
    (vpc,) = resources(built.template, "AWS::EC2::VPC")
    manage = statement(built, "Full", "Network", "ManageInterfacesInClusterVpc")
    assert "ec2:DeleteNetworkInterface" in manage["Action"]
    assert "ec2:DeleteNetworkInterfacePermission" in manage["Action"]
    assert texts(manage["Resource"]) == [f"{EC2}:network-interface/*"]
    assert texts(manage["Condition"]["ArnEquals"]["ec2:Vpc"]) == [f"{EC2}:vpc/<{vpc}>"]
    detach = statement(built, "Full", "Network", "DetachInterfacesInClusterVpc")
    assert detach["Action"] == "ec2:DetachNetworkInterface"
    assert texts(detach["Condition"]["ArnEqualsIfExists"]["ec2:Vpc"]) == [f"{EC2}:vpc/<{vpc}>"]
    describe = statement(built, "Full", "Network", "DescribeNetwork")
    assert describe["Resource"] == "*"
    assert all(a.startswith("ec2:Describe") for a in describe["Action"])


def test_read_write_data_access_with_the_bucket_key(built: Built) -> None:
    objects = statement(built, "Full", "DataBucket", "DataObjects")
    assert {"s3:GetObject", "s3:PutObject", "s3:DeleteObject", "s3:AbortMultipartUpload"} <= set(objects["Action"])
    (resource,) = texts(objects["Resource"])
    # A weak cross-stack reference: the storage stack's output, read with Fn::GetStackOutput.
    assert '"Fn::GetStackOutput"' in resource and "OutputFnGetAttData" in resource and resource.endswith("/*")
    key = statement(built, "Full", "DataBucket", "DataBucketKey")
    assert key["Action"] == ["kms:Decrypt", "kms:GenerateDataKey"]
    assert "OutputFnGetAttDataKey" in texts(key["Resource"])[0]
    assert texts(key["Condition"]["StringEquals"]["kms:ViaService"]) == ["s3.<AWS::Region>.<AWS::URLSuffix>"]


def test_read_only_data_access(built: Built) -> None:
    objects = statement(built, "ReadOnly", "DataBucket", "DataObjects")
    assert objects["Action"] == "s3:GetObject"
    assert statement(built, "ReadOnly", "DataBucket", "DataBucketKey")["Action"] == "kms:Decrypt"
    listing = statement(built, "ReadOnly", "DataBucket", "DataBucket")
    assert set(listing["Action"]) == {"s3:ListBucket", "s3:GetBucketLocation"}


def test_secrets_are_read_by_exact_arn(built: Built) -> None:
    read = statement(built, "Full", "Secrets", "ReadSecrets")
    assert read == {
        "Sid": "ReadSecrets",
        "Effect": "Allow",
        "Action": "secretsmanager:GetSecretValue",
        "Resource": SECRET,
    }


def test_cross_stack_wildcard_is_acknowledged_by_its_export_name(built: Built) -> None:
    acknowledged: dict[str, str] = {}
    for metadata in built.outdir.glob("Cluster.metadata.json"):
        for entries in json.loads(metadata.read_text()).values():
            for entry in entries:
                if entry["type"] == "aws:cdk:acknowledged-rules":
                    acknowledged.update({k.removeprefix("Annotation::"): v for k, v in entry["data"].items()})
    exported = [f for f in acknowledged if f.startswith('AwsSolutions-IAM5[Resource::{"Fn::GetStackOutput"')]
    assert exported, sorted(acknowledged)
    assert all(len(acknowledged[f]) > 40 for f in acknowledged)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("arn:${AWS::Partition}:s3:::b/*", "arn:<AWS::Partition>:s3:::b/*"),
        ({"Ref": "Bucket"}, "<Bucket>"),
        ({"Fn::GetAtt": ["Bucket", "Arn"]}, "<Bucket.Arn>"),
        ({"Fn::Join": ["", [{"Fn::GetAtt": ["Bucket", "Arn"]}, "/*"]]}, "<Bucket.Arn>/*"),
        ({"Fn::Sub": "arn:${AWS::Partition}:x"}, "arn:<AWS::Partition>:x"),
        ({"Fn::ImportValue": "Other:Export"}, "Other:Export"),
        ({"Fn::Select": [0, ["a"]]}, '{"Fn::Select":[0,["a"]]}'),
    ],
)
def test_flatten_resource_matches_cdk_nag(value: object, expected: str) -> None:
    assert flatten_resource(value) == expected


# -- validation ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def parts() -> dict[str, Any]:
    """Imported network pieces in an unsynthesized stack: enough to construct roles cheaply."""
    stack = cdk.Stack(cdk.App(), "Checks")
    vpc = ec2.Vpc.from_vpc_attributes(stack, "Vpc", vpc_id="vpc-0123456789abcdef0", availability_zones=["use1-az4"])
    return {
        "stack": stack,
        "vpc": vpc,
        "subnets": [ec2.Subnet.from_subnet_id(stack, f"Subnet{i}", f"subnet-{i:017x}") for i in range(17)],
        "groups": [ec2.SecurityGroup.from_security_group_id(stack, f"Sg{i}", f"sg-{i:017x}") for i in range(6)],
        "bucket": s3.Bucket.from_bucket_name(stack, "Lc", LIFECYCLE_BUCKET),
    }


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"subnets": 0}, "subnets: [] is not allowed"),
        ({"subnets": 17}, "subnets: 17 given; HyperPod allows 1 to 16"),
        ({"security_groups": 0}, "security_groups: 0 given; HyperPod allows 1 to 5"),
        ({"security_groups": 6}, "security_groups: 6 given"),
        ({"lifecycle_prefix": "lifecycle"}, "lifecycle_prefix: 'lifecycle' is not allowed"),
        ({"lifecycle_prefix": "/lifecycle/"}, "lifecycle_prefix: '/lifecycle/' is not allowed"),
        ({"data_bucket_access": "read"}, "data_bucket_access: 'read' needs data_bucket"),
        ({"data_bucket_access": "write"}, "data_bucket_access: 'write' is not allowed; use 'none', 'read'"),
        ({"secret_arns": ["my-secret"]}, "secret_arns: 'my-secret' is not a Secrets Manager secret ARN"),
    ],
)
def test_bad_props_are_named(parts: dict[str, Any], changes: dict[str, Any], message: str) -> None:
    changes = dict(changes)  # the parametrized dict is shared by every run of this test in the process
    props: dict[str, Any] = {
        "vpc": parts["vpc"],
        "subnets": parts["subnets"][: changes.pop("subnets", 1)],
        "security_groups": parts["groups"][: changes.pop("security_groups", 1)],
        "lifecycle_bucket": parts["bucket"],
        **changes,
    }
    with pytest.raises(ValueError, match="HyperPodExecutionRole: ") as caught:
        HyperPodExecutionRole(parts["stack"], f"Bad{len(parts['stack'].node.children)}", **props)
    assert message in str(caught.value)


def test_all_problems_are_reported_at_once(parts: dict[str, Any]) -> None:
    with pytest.raises(ValueError) as caught:
        HyperPodExecutionRole(
            parts["stack"],
            "ManyProblems",
            vpc=parts["vpc"],
            subnets=[],
            security_groups=[],
            lifecycle_bucket=parts["bucket"],
            lifecycle_prefix="x",
        )
    assert all(p in str(caught.value) for p in ("subnets:", "security_groups:", "lifecycle_prefix:"))


def _backup_role(**backup: Any) -> None:
    app = cdk.App()
    stack = cdk.Stack(app, "Cluster")
    net = ClusterNetwork(stack, "Net", availability_zone_id="use1-az4")
    data = DataBucket(stack, "Data")
    HyperPodExecutionRole(
        stack,
        "Controller",
        vpc=net.vpc,
        subnets=net.private_subnets,
        security_groups=[net.security_group],
        lifecycle_bucket=s3.Bucket.from_bucket_name(stack, "LifecycleBucket", LIFECYCLE_BUCKET),
        data_bucket=data.bucket,
        **{key: (data.bucket if value == "data" else value) for key, value in backup.items()},
    )


@pytest.mark.parametrize(
    ("backup", "message"),
    [
        ({"backup_bucket": "data", "backup_prefix": "mlcluster/patch/c/"}, "backup_bucket: the data bucket is not"),
        ({"backup_prefix": "mlcluster/patch/c/"}, "backup_bucket and backup_prefix: give both"),
    ],
    ids=["data-bucket", "prefix-alone"],
)
def test_patch_backups_never_go_to_the_data_bucket(backup: dict[str, Any], message: str) -> None:
    """Jobs and the Lustre DRA write the data bucket, and mlcluster-backup restores as root from its location."""
    with pytest.raises(ValueError, match=message):
        _backup_role(**backup)


def test_patch_backups_in_their_own_bucket_are_accepted() -> None:
    app = cdk.App()
    stack = cdk.Stack(app, "Cluster")
    net = ClusterNetwork(stack, "Net", availability_zone_id="use1-az4")
    backups = PatchBackupBucket(stack, "Backups")
    made = HyperPodExecutionRole(
        stack,
        "Controller",
        vpc=net.vpc,
        subnets=net.private_subnets,
        security_groups=[net.security_group],
        lifecycle_bucket=s3.Bucket.from_bucket_name(stack, "LifecycleBucket", LIFECYCLE_BUCKET),
        backup_bucket=backups.bucket,
        backup_prefix="mlcluster/patch/c/",
    )
    text = json.dumps(Template.from_stack(stack).to_json())
    assert "PatchBackupObjects" in text and "PatchBackupKey" in text  # its KMS key, through S3 only
    assert made.role is not None

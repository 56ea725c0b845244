"""HyperPodExecutionRole as a compliance reviewer reads it: every policy whole, every acknowledged finding.

The other role tests check one statement at a time against a module-scoped synthesis, and a mutation
run (issue 27) showed what that leaves open: a renamed action, a dropped ``Sid``, an ARN of another
format, a policy no longer attached, a changed description or acknowledgement reason all passed.
Here a controller role with every option (data bucket read and write under a KMS key, a secret under
its own key, patch backups, the copy metric, Prometheus remote write, a non-default lifecycle
prefix) is built in the test itself, in a stack with a concrete account and region and imported
network pieces, so each ARN is literal and the expected documents are written out in full:

- every rendered resource (the role and its nine customer managed policies: ``Description``,
  ``Roles``, every statement's ``Sid``, ``Effect``, ``Action``, ``Resource`` and ``Condition``, and
  the checkov skips with their reasons) equals the reviewed one. A policy's ``Description`` is
  create-only in CloudFormation (cfn-lint's AWS::IAM::ManagedPolicy schema), so a changed one
  replaces the policy; the logical ids are a contract for the same reason.
- every cdk-nag finding acknowledged on the role's policies, with its reason, equals the reviewed
  table, as ``tools/compliance_report.py`` reads it from the cloud assembly (cdk-nag's AwsSolutions
  pack is on: the synthesis fails on a finding no acknowledgement names exactly).

IAM reads action names without regard to case, so a case-changed action grants the same; the
rendered template is still the reviewed artefact (and a changed document is a policy update on the
next deploy), which is what these tests pin.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import aws_cdk as cdk
import pytest
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3
from aws_cdk.assertions import Template
from cdk_nag import AwsSolutionsChecks

from mlcluster.constructs.hyperpod_role import HyperPodExecutionRole
from mlcluster.constructs.nag import flatten_resource
from tools.compliance_report import acknowledgements

ACCOUNT = "111111111111"
REGION = "us-east-1"
EC2 = f"arn:aws:ec2:{REGION}:{ACCOUNT}"
LOGS = f"arn:aws:logs:{REGION}:{ACCOUNT}:log-group:/aws/sagemaker/Clusters/*"
LIFECYCLE_BUCKET = f"mlc-lifecycle-test-{ACCOUNT}-{REGION}"
VPC_ID = "vpc-0123456789abcdef0"
SUBNET_IDS = ("subnet-0123456789abcdef0", "subnet-0223456789abcdef0")
GROUP_ID = "sg-0123456789abcdef0"
DATA_KEY = f"arn:aws:kms:{REGION}:{ACCOUNT}:key/11111111-1111-1111-1111-111111111111"
BACKUP_KEY = f"arn:aws:kms:{REGION}:{ACCOUNT}:key/22222222-2222-2222-2222-222222222222"
SECRET_KEY = f"arn:aws:kms:{REGION}:{ACCOUNT}:key/33333333-3333-3333-3333-333333333333"
SECRET = f"arn:aws:secretsmanager:{REGION}:{ACCOUNT}:secret:slurm-db-AbCdEf"
WORKSPACE = f"arn:aws:aps:{REGION}:{ACCOUNT}:workspace/ws-01234567-89ab-cdef-0123-456789abcdef"
NAMESPACE = "mlcluster/ScheduledCopy"
ROLE = "Controller9BE1D41E"
ROLE_REF = [f"<{ROLE}>"]


def readable(value: Any) -> Any:
    """A rendered template value with each intrinsic function flattened as cdk-nag shows it (``<Ref>``)."""
    if isinstance(value, dict):
        if len(value) == 1 and ("Ref" in value or next(iter(value)).startswith("Fn::")):
            return flatten_resource(value)
        return {key: readable(item) for key, item in value.items()}
    if isinstance(value, list):
        return [readable(item) for item in value]
    return value


def checkov_skip(comment: str) -> dict[str, Any]:
    """The metadata of a policy whose ``Resource: *`` finding is acknowledged (checkov's CKV_AWS_111)."""
    return {"checkov": {"skip": [{"id": "CKV_AWS_111", "comment": comment}]}}


def managed_policy(description: str, statements: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    """A customer managed policy of the controller role, as rendered."""
    return {
        "Type": "AWS::IAM::ManagedPolicy",
        "Properties": {
            "Description": description,
            "Path": "/",
            "PolicyDocument": {"Statement": statements, "Version": "2012-10-17"},
            "Roles": ROLE_REF,
        },
        **extra,
    }


TELEMETRY_METRICS_REASON = (
    "cloudwatch:PutMetricData has no resource-level permissions; the statement is limited by the "
    "cloudwatch:namespace condition to HyperPod's /aws/sagemaker/Clusters namespace."
)
SESSION_REASON = (
    "The ssmmessages channel actions have no resource-level permissions in IAM; they only let the SSM agent on "
    "the node open the session channels that operators reach the controller and login nodes through."
)
DESCRIBE_REASON = (
    "The EC2 Describe calls HyperPod makes (interfaces, VPCs, DHCP options, subnets, security groups) have no "
    "resource-level permissions in IAM; they are read-only."
)
COPY_METRIC_REASON = (
    f"cloudwatch:PutMetricData has no resource-level permissions; the statement is limited by the "
    f"cloudwatch:namespace condition to {NAMESPACE}, which only the controller's role may write."
)
S3_VIA_SERVICE = {"StringEquals": {"kms:ViaService": f"s3.{REGION}.<AWS::URLSuffix>"}}
IN_VPC = f"{EC2}:vpc/{VPC_ID}"

#: Every resource the role makes, by logical id, as the reviewer approved it.
EXPECTED_RESOURCES: dict[str, dict[str, Any]] = {
    ROLE: {
        "Type": "AWS::IAM::Role",
        "Properties": {
            "AssumeRolePolicyDocument": {
                "Statement": [
                    {
                        "Action": "sts:AssumeRole",
                        "Effect": "Allow",
                        "Principal": {"Service": "sagemaker.amazonaws.com"},
                    }
                ],
                "Version": "2012-10-17",
            },
            "Description": "SageMaker HyperPod cluster nodes: logs, metrics, SSM, lifecycle scripts, VPC interfaces",
        },
    },
    "ControllerTelemetryFB604F4F": managed_policy(
        "HyperPod node logs under /aws/sagemaker/Clusters/ and metrics in that namespace",
        [
            {
                "Action": ["logs:CreateLogGroup", "logs:DescribeLogStreams"],
                "Effect": "Allow",
                "Resource": LOGS,
                "Sid": "ClusterLogGroups",
            },
            {
                "Action": ["logs:CreateLogStream", "logs:DescribeLogStreams", "logs:PutLogEvents"],
                "Effect": "Allow",
                "Resource": f"{LOGS}:log-stream:*",
                "Sid": "ClusterLogStreams",
            },
            {
                "Action": "cloudwatch:PutMetricData",
                "Condition": {"StringEquals": {"cloudwatch:namespace": "/aws/sagemaker/Clusters"}},
                "Effect": "Allow",
                "Resource": "*",
                "Sid": "ClusterMetrics",
            },
        ],
        Metadata=checkov_skip(TELEMETRY_METRICS_REASON),
    ),
    "ControllerSessionManagerBAEDCCD7": managed_policy(
        "SSM Session Manager channels to HyperPod nodes",
        [
            {
                "Action": [
                    "ssmmessages:CreateControlChannel",
                    "ssmmessages:CreateDataChannel",
                    "ssmmessages:OpenControlChannel",
                    "ssmmessages:OpenDataChannel",
                ],
                "Effect": "Allow",
                "Resource": "*",
                "Sid": "SessionChannels",
            }
        ],
        Metadata=checkov_skip(SESSION_REASON),
    ),
    "ControllerLifecycleD84B3C9A": managed_policy(
        "Read the HyperPod lifecycle scripts",
        [
            {
                "Action": "s3:GetObject",
                "Effect": "Allow",
                "Resource": f"arn:aws:s3:::{LIFECYCLE_BUCKET}/scripts/v2/*",
                "Sid": "ReadLifecycleScripts",
            },
            {
                "Action": "s3:ListBucket",
                "Condition": {"StringLike": {"s3:prefix": ["scripts/v2/*"]}},
                "Effect": "Allow",
                "Resource": f"arn:aws:s3:::{LIFECYCLE_BUCKET}",
                "Sid": "ListLifecycleScripts",
            },
        ],
    ),
    "ControllerNetworkF39EE35E": managed_policy(
        "Network interfaces of HyperPod nodes in the cluster's VPC",
        [
            {
                "Action": "ec2:CreateNetworkInterface",
                "Effect": "Allow",
                "Resource": [
                    f"{EC2}:network-interface/*",
                    f"{EC2}:security-group/{GROUP_ID}",
                    f"{EC2}:subnet/{SUBNET_IDS[0]}",
                    f"{EC2}:subnet/{SUBNET_IDS[1]}",
                ],
                "Sid": "CreateInterfacesInClusterSubnets",
            },
            {
                "Action": "ec2:CreateTags",
                "Condition": {"StringEquals": {"ec2:CreateAction": "CreateNetworkInterface"}},
                "Effect": "Allow",
                "Resource": f"{EC2}:network-interface/*",
                "Sid": "TagInterfacesOnCreate",
            },
            {
                "Action": [
                    "ec2:AssignPrivateIpAddresses",
                    "ec2:CreateNetworkInterfacePermission",
                    "ec2:DeleteNetworkInterface",
                    "ec2:DeleteNetworkInterfacePermission",
                    "ec2:UnassignPrivateIpAddresses",
                ],
                "Condition": {"ArnEquals": {"ec2:Vpc": IN_VPC}},
                "Effect": "Allow",
                "Resource": f"{EC2}:network-interface/*",
                "Sid": "ManageInterfacesInClusterVpc",
            },
            {
                "Action": "ec2:DetachNetworkInterface",
                "Condition": {"ArnEqualsIfExists": {"ec2:Vpc": IN_VPC}},
                "Effect": "Allow",
                "Resource": [f"{EC2}:instance/*", f"{EC2}:network-interface/*"],
                "Sid": "DetachInterfacesInClusterVpc",
            },
            {
                "Action": [
                    "ec2:DescribeDhcpOptions",
                    "ec2:DescribeNetworkInterfaces",
                    "ec2:DescribeSecurityGroups",
                    "ec2:DescribeSubnets",
                    "ec2:DescribeVpcs",
                ],
                "Effect": "Allow",
                "Resource": "*",
                "Sid": "DescribeNetwork",
            },
        ],
        Metadata=checkov_skip(DESCRIBE_REASON),
    ),
    "ControllerDataBucketF90358A6": managed_policy(
        "HyperPod nodes read and write the data bucket",
        [
            {
                "Action": [
                    "s3:AbortMultipartUpload",
                    "s3:DeleteObject",
                    "s3:GetObject",
                    "s3:ListMultipartUploadParts",
                    "s3:PutObject",
                ],
                "Effect": "Allow",
                "Resource": "arn:aws:s3:::training-data/*",
                "Sid": "DataObjects",
            },
            {
                "Action": ["s3:GetBucketLocation", "s3:ListBucket", "s3:ListBucketMultipartUploads"],
                "Effect": "Allow",
                "Resource": "arn:aws:s3:::training-data",
                "Sid": "DataBucket",
            },
            {
                "Action": ["kms:Decrypt", "kms:GenerateDataKey"],
                "Condition": S3_VIA_SERVICE,
                "Effect": "Allow",
                "Resource": DATA_KEY,
                "Sid": "DataBucketKey",
            },
        ],
    ),
    "ControllerSecrets86229150": managed_policy(
        "HyperPod nodes read the listed secrets (Slurm accounting credentials)",
        [
            {
                "Action": "secretsmanager:GetSecretValue",
                "Effect": "Allow",
                "Resource": SECRET,
                "Sid": "ReadSecrets",
            },
            {
                "Action": "kms:Decrypt",
                "Condition": {"StringEquals": {"kms:ViaService": f"secretsmanager.{REGION}.<AWS::URLSuffix>"}},
                "Effect": "Allow",
                "Resource": SECRET_KEY,
                "Sid": "DecryptSecrets",
            },
        ],
    ),
    "ControllerPatchBackupE8EC6DEF": managed_policy(
        "The controller saves and restores its patch backups",
        [
            {
                "Action": ["s3:GetObject", "s3:PutObject"],
                "Effect": "Allow",
                "Resource": "arn:aws:s3:::patch-backups/mlcluster/patch/c/*",
                "Sid": "PatchBackupObjects",
            },
            {
                "Action": "s3:ListBucket",
                "Condition": {"StringLike": {"s3:prefix": ["mlcluster/patch/c/*"]}},
                "Effect": "Allow",
                "Resource": "arn:aws:s3:::patch-backups",
                "Sid": "PatchBackupList",
            },
            {
                "Action": ["kms:Decrypt", "kms:GenerateDataKey"],
                "Condition": S3_VIA_SERVICE,
                "Effect": "Allow",
                "Resource": BACKUP_KEY,
                "Sid": "PatchBackupKey",
            },
        ],
    ),
    "ControllerScheduledCopyMetricBEECD37A": managed_policy(
        f"Metrics of this node's own in {NAMESPACE} (the controller's daily copy)",
        [
            {
                "Action": "cloudwatch:PutMetricData",
                "Condition": {"StringEquals": {"cloudwatch:namespace": NAMESPACE}},
                "Effect": "Allow",
                "Resource": "*",
                "Sid": "ScheduledCopyMetric",
            }
        ],
        Metadata=checkov_skip(COPY_METRIC_REASON),
    ),
    "ControllerPrometheusRemoteWriteEB5D5DAA": managed_policy(
        "The metrics collector on this node writes samples to the environment's Prometheus workspace",
        [{"Action": "aps:RemoteWrite", "Effect": "Allow", "Resource": WORKSPACE, "Sid": "RemoteWrite"}],
    ),
}

#: Every cdk-nag finding acknowledged on the role's resources, with the reason the compliance report shows.
EXPECTED_ACKNOWLEDGEMENTS: dict[str, dict[str, str]] = {
    ROLE: {},
    "ControllerTelemetryFB604F4F": {
        "AwsSolutions-IAM5[Resource::*]": TELEMETRY_METRICS_REASON,
        f"AwsSolutions-IAM5[Resource::{LOGS}]": (
            "HyperPod names each cluster's log group /aws/sagemaker/Clusters/<name>/<cluster id>, with an id the "
            "service assigns at creation; the wildcard stays inside that prefix of this account and region."
        ),
        f"AwsSolutions-IAM5[Resource::{LOGS}:log-stream:*]": (
            "Each node writes its own log streams (named after instance ids the service assigns) into the cluster "
            "log groups under /aws/sagemaker/Clusters/; the streams cannot be named before the nodes exist."
        ),
    },
    "ControllerSessionManagerBAEDCCD7": {"AwsSolutions-IAM5[Resource::*]": SESSION_REASON},
    "ControllerLifecycleD84B3C9A": {
        f"AwsSolutions-IAM5[Resource::arn:aws:s3:::{LIFECYCLE_BUCKET}/scripts/v2/*]": (
            "Nodes download every lifecycle script and generated input file under scripts/v2/ of the lifecycle "
            "bucket when they start; the set of files changes with the scripts, so the prefix is the scope."
        ),
    },
    "ControllerNetworkF39EE35E": {
        "AwsSolutions-IAM5[Resource::*]": DESCRIBE_REASON,
        f"AwsSolutions-IAM5[Resource::{EC2}:network-interface/*]": (
            "HyperPod creates one interface per node in the cluster's subnets and the ids do not exist beforehand; "
            "creation is limited to the cluster's subnets and security groups, tagging to creation time, and every "
            "other change to interfaces whose ec2:Vpc is the cluster's VPC."
        ),
        f"AwsSolutions-IAM5[Resource::{EC2}:instance/*]": (
            "DetachNetworkInterface also authorizes the instance the node interface is attached to, a HyperPod "
            "instance whose id is assigned at launch; the interface side is held to the cluster's VPC."
        ),
    },
    "ControllerDataBucketF90358A6": {
        "AwsSolutions-IAM5[Resource::arn:aws:s3:::training-data/*]": (
            "Training jobs on the nodes read and write datasets and checkpoints anywhere in the data bucket, under "
            "keys chosen by the jobs; the wildcard covers that one bucket's objects only."
        ),
    },
    "ControllerSecrets86229150": {},
    "ControllerPatchBackupE8EC6DEF": {
        "AwsSolutions-IAM5[Resource::arn:aws:s3:::patch-backups/mlcluster/patch/c/*]": (
            "mlcluster-backup writes one folder per patch run under this cluster's own prefix of the patch backup "
            "bucket; the wildcard is the run folders below that prefix, nothing else in the bucket."
        ),
    },
    "ControllerScheduledCopyMetricBEECD37A": {"AwsSolutions-IAM5[Resource::*]": COPY_METRIC_REASON},
    "ControllerPrometheusRemoteWriteEB5D5DAA": {},
}


def controller_props(stack: cdk.Stack) -> dict[str, Any]:
    """A controller role's props in ``stack`` (concrete account and region) with every option given."""
    vpc = ec2.Vpc.from_vpc_attributes(stack, "Vpc", vpc_id=VPC_ID, availability_zones=[f"{REGION}a"])

    def bucket(construct_id: str, name: str, key_arn: str) -> s3.IBucket:
        key = kms.Key.from_key_arn(stack, f"{construct_id}Key", key_arn)
        return s3.Bucket.from_bucket_attributes(stack, construct_id, bucket_name=name, encryption_key=key)

    return {
        "vpc": vpc,
        "subnets": [ec2.Subnet.from_subnet_id(stack, f"Subnet{i}", s) for i, s in enumerate(SUBNET_IDS)],
        "security_groups": [ec2.SecurityGroup.from_security_group_id(stack, "Group", GROUP_ID)],
        "lifecycle_bucket": s3.Bucket.from_bucket_name(stack, "LifecycleBucket", LIFECYCLE_BUCKET),
        "lifecycle_prefix": "scripts/v2/",
        "data_bucket": bucket("Data", "training-data", DATA_KEY),
        "data_bucket_access": "read_write",
        "secret_arns": [SECRET],
        "secret_key_arns": [SECRET_KEY],
        "backup_bucket": bucket("Backups", "patch-backups", BACKUP_KEY),
        "backup_prefix": "mlcluster/patch/c/",
        "remote_write_workspace_arn": WORKSPACE,
        "copy_metric_namespace": NAMESPACE,
    }


def cluster_stack(app: cdk.App) -> cdk.Stack:
    return cdk.Stack(app, "Cluster", env=cdk.Environment(account=ACCOUNT, region=REGION))


def test_the_controller_role_is_the_reviewed_one(tmp_path: Path) -> None:
    """Every policy whole (statements, description, attachment, checkov skips) and every acknowledged finding."""
    app = cdk.App(outdir=str(tmp_path))
    stack = cluster_stack(app)
    HyperPodExecutionRole(stack, "Controller", **controller_props(stack))
    cdk.Validations.of(app).add_plugins(AwsSolutionsChecks(app))
    app.synth()  # raises on any cdk-nag finding no acknowledgement names exactly

    rendered = Template.from_stack(stack).to_json()["Resources"]
    ours = {key: readable(value) for key, value in rendered.items() if key.startswith("Controller")}
    assert ours == EXPECTED_RESOURCES

    acknowledged = {key: found for (_, key), found in acknowledgements(tmp_path).items() if key in ours}
    assert acknowledged == EXPECTED_ACKNOWLEDGEMENTS


def test_secret_keys_without_secrets_are_refused() -> None:
    """A key given for secrets the role does not read is a mistake (the secret list was lost), never a no-op."""
    stack = cluster_stack(cdk.App())
    with pytest.raises(ValueError) as caught:
        HyperPodExecutionRole(stack, "Controller", **{**controller_props(stack), "secret_arns": []})
    assert str(caught.value) == "HyperPodExecutionRole: secret_key_arns is only used with secret_arns"


def test_patch_backups_in_the_data_bucket_are_refused_with_the_reason_and_the_fix() -> None:
    """The operator reads which prop, why (jobs and the Lustre DRA write the data bucket; restore runs as root)
    and what to give instead."""
    stack = cluster_stack(cdk.App())
    props = controller_props(stack)
    with pytest.raises(ValueError) as caught:
        HyperPodExecutionRole(stack, "Controller", **{**props, "backup_bucket": props["data_bucket"]})
    assert str(caught.value) == (
        "backup_bucket: the data bucket is not allowed; jobs and the Lustre DRA write it, and restore runs as root "
        "on the controller (use the cluster's PatchBackupBucket)"
    )


def test_a_role_for_no_subnets_is_refused_with_the_range_hyperpod_allows() -> None:
    """The operator reads the prop, the bad value and what to give: the nodes' subnets, 1 to 16 of them."""
    stack = cluster_stack(cdk.App())
    with pytest.raises(ValueError) as caught:
        HyperPodExecutionRole(stack, "Controller", **{**controller_props(stack), "subnets": []})
    assert str(caught.value) == (
        "HyperPodExecutionRole: subnets: [] is not allowed; give the subnets the cluster's nodes use (1 to 16)"
    )

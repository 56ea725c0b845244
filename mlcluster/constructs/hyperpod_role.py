"""The IAM role HyperPod cluster nodes run as (the instance groups' ``ExecutionRole``).

It replaces the AWS managed ``AmazonSageMakerClusterInstanceRolePolicy`` and
the hand-written VPC statements of the reference set-up with customer managed
policies scoped to this environment: the cluster log groups and metric
namespace, the lifecycle scripts' prefix, this VPC's subnets, security group
and network interfaces, and (as asked) the data bucket and the Slurm
accounting secret. Each policy covers one concern, so every cdk-nag wildcard
finding that remains is acknowledged with a reason about that concern only.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Literal

import aws_cdk as cdk
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_iam as iam
from aws_cdk import aws_s3 as s3
from constructs import Construct

from mlcluster.constructs.key_grants import decrypt_through_secrets_manager
from mlcluster.constructs.nag import acknowledge, acknowledge_wildcard_resource
from mlcluster.constructs.session_manager import session_channels_statement

#: Where HyperPod writes cluster and node logs, and the metric namespace it uses.
CLUSTER_LOG_GROUP_PREFIX = "/aws/sagemaker/Clusters"
CLUSTER_METRIC_NAMESPACE = "/aws/sagemaker/Clusters"
DataAccess = Literal["none", "read", "read_write"]
DATA_ACCESS: tuple[DataAccess, ...] = ("none", "read", "read_write")
#: A lifecycle prefix: S3 key characters, ending in '/', not starting with one.
PREFIX = re.compile(r"[A-Za-z0-9!_.*'()-]+(/[A-Za-z0-9!_.*'()-]+)*/")
#: A CloudWatch namespace (botocore's cloudwatch model, shape Namespace: 1-255 characters, pattern ``[^:].*``).
METRIC_NAMESPACE = re.compile(r"[^:].{0,254}")
SECRET_ARN = re.compile(r"arn:aws[a-z-]*:secretsmanager:[a-z0-9-]+:\d{12}:secret:.+")


class HyperPodExecutionRole(Construct):
    """The role SageMaker HyperPod gives the nodes of a cluster.

    Trusted by ``sagemaker.amazonaws.com`` with the trust policy the SageMaker
    Developer Guide documents for HyperPod execution roles (no conditions).
    Give each instance group its own role, so that worker nodes hold neither
    the accounting secret nor anything the controller alone needs.
    Its permissions sit in customer managed policies attached to the role (no
    inline and no AWS managed policies), each a child of the role so anything
    that depends on the role also waits for its permissions:

    - ``Telemetry``: create log groups and streams and put events under
      ``/aws/sagemaker/Clusters/``, and ``cloudwatch:PutMetricData`` only in
      the ``/aws/sagemaker/Clusters`` namespace.
    - ``SessionManager``: the four ``ssmmessages`` channel actions SSM
      sessions to the nodes need.
    - ``Lifecycle``: read the lifecycle scripts (``GetObject`` under the
      prefix, ``ListBucket`` of that prefix only).
    - ``Network``: create network interfaces only in the given subnets with
      the given security groups; delete, detach, share and re-address
      interfaces only in the cluster's VPC (``ec2:Vpc`` condition); tag them
      only while creating them; ``Describe*`` calls, which have no resource
      scope in IAM.
    - ``DataBucket`` (when a data bucket is given and access is not
      ``none``): read, or read and write, its objects; ``kms:Decrypt`` (and
      ``GenerateDataKey`` for writes) through S3 on its key, if it has one.
    - ``Secrets`` (when secrets are given): ``GetSecretValue`` on them, e.g.
      the Slurm accounting database credentials.
    - ``PatchBackup`` (when a backup prefix is given, for the controller):
      read and write objects under that prefix of the data bucket only, so
      ``mlcluster-backup`` can save and restore what the root volume holds
      around a software patch even when the data bucket is read-only.
    - ``ScheduledCopyMetric`` (when a namespace is given, for the controller):
      ``cloudwatch:PutMetricData`` only in that namespace, mlcluster's own, so
      that no job on a worker or login node (which can read its node's role
      credentials) can publish the daily copy's data point and keep its alarm
      quiet. ``Telemetry``'s ``/aws/sagemaker/Clusters`` is every node's.
    - ``PrometheusRemoteWrite`` (when a workspace is given, for the
      controller, whose collector signs its writes with this role):
      ``aps:RemoteWrite`` on that workspace only.

    Default settings: no data bucket access unless a data bucket is given
    (then read only); no secrets; lifecycle prefix ``lifecycle/``.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        vpc: ec2.IVpc,
        subnets: Sequence[ec2.ISubnet],
        security_groups: Sequence[ec2.ISecurityGroup],
        lifecycle_bucket: s3.IBucket,
        lifecycle_prefix: str = "lifecycle/",
        data_bucket: s3.IBucket | None = None,
        data_bucket_access: DataAccess | None = None,
        secret_arns: Sequence[str] = (),
        secret_key_arns: Sequence[str] = (),
        backup_bucket: s3.IBucket | None = None,
        backup_prefix: str | None = None,
        remote_write_workspace_arn: str | None = None,
        copy_metric_namespace: str | None = None,
        description: str = "SageMaker HyperPod cluster nodes: logs, metrics, SSM, lifecycle scripts, VPC interfaces",
    ) -> None:
        """Create the role and its policies.

        :param vpc: the cluster's VPC; interface changes are limited to it.
        :param subnets: the subnets the cluster's nodes use (its ``VpcConfig``).
        :param security_groups: the security groups of the nodes' interfaces.
        :param lifecycle_bucket: the bucket holding the lifecycle scripts.
        :param lifecycle_prefix: the scripts' key prefix, ending in ``/``. Default: ``lifecycle/``.
        :param data_bucket: the data bucket the nodes use. Default: none.
        :param data_bucket_access: ``none``, ``read`` or ``read_write``. Default:
            ``read`` when ``data_bucket`` is given, else ``none``.
        :param secret_arns: full ARNs of Secrets Manager secrets the nodes read
            (the Slurm accounting database's credentials). Default: none.
        :param secret_key_arns: KMS keys that encrypt ``secret_arns``; the nodes may decrypt with them
            only through Secrets Manager (``kms:ViaService``). Default: none (secrets under the
            ``aws/secretsmanager`` key need no grant).
        :param backup_bucket: the cluster's patch backup bucket (``PatchBackupBucket``),
            never the data bucket: jobs and the Lustre DRA write that one. Default: none.
        :param backup_prefix: the key prefix of ``backup_bucket``, ending in ``/``, the
            nodes may read and write (the controller's patch backups and their
            state). Default: none.
        :param remote_write_workspace_arn: an Amazon Managed Service for Prometheus workspace the nodes
            remote-write to (the controller's metrics collector). Default: none.
        :param copy_metric_namespace: a CloudWatch namespace the nodes may put metrics in, besides HyperPod's
            (the controller's daily copy metric); neither HyperPod's nor an ``AWS/`` one. Default: none.
        :param description: the role's description, e.g. naming its instance group.
        """
        super().__init__(scope, construct_id)
        access: DataAccess = data_bucket_access or ("read" if data_bucket is not None else "none")
        _check_props(
            subnets=subnets,
            security_groups=security_groups,
            lifecycle_prefix=lifecycle_prefix,
            data_bucket=data_bucket,
            data_bucket_access=access,
            secret_arns=secret_arns,
        )
        stack = cdk.Stack.of(self)
        # The trust policy is the one the SageMaker Developer Guide gives for the HyperPod execution role
        # ("IAM role for SageMaker HyperPod", https://docs.aws.amazon.com/sagemaker/latest/dg/
        # sagemaker-hyperpod-prerequisites-iam.html#sagemaker-hyperpod-prerequisites-iam-role-for-hyperpod):
        # sagemaker.amazonaws.com, sts:AssumeRole, no conditions. The guide does not say which aws:SourceArn or
        # aws:SourceAccount SageMaker sends when it assumes the role for cluster instances, and a condition on a
        # key the service does not send fails every node's launch, so there is none. Only principals of this
        # account with iam:PassRole on this role can hand it to a cluster.
        self.role = iam.Role(
            self,
            "Resource",
            description=description,
            assumed_by=iam.ServicePrincipal("sagemaker.amazonaws.com"),
        )
        self._telemetry(stack)
        self._session_manager()
        self._lifecycle(lifecycle_bucket, lifecycle_prefix)
        self._network(stack, vpc, subnets, security_groups)
        if data_bucket is not None and access != "none":
            self._data(stack, data_bucket, access)
        if secret_key_arns and not secret_arns:
            raise ValueError("HyperPodExecutionRole: secret_key_arns is only used with secret_arns")
        if secret_arns:
            self._secrets(stack, secret_arns, secret_key_arns)
        if (backup_prefix is None) != (backup_bucket is None):
            raise ValueError("backup_bucket and backup_prefix: give both (the controller) or neither")
        if backup_bucket is not None and backup_prefix is not None:
            if not backup_prefix.endswith("/") or backup_prefix.startswith("/"):
                raise ValueError(f"backup_prefix: {backup_prefix!r} is not allowed; use a key prefix ending in '/'")
            if data_bucket is not None and backup_bucket is data_bucket:
                raise ValueError(
                    "backup_bucket: the data bucket is not allowed; jobs and the Lustre DRA write it, and restore "
                    "runs as root on the controller (use the cluster's PatchBackupBucket)"
                )
            self._backup(stack, backup_bucket, backup_prefix)
        if copy_metric_namespace is not None:
            self._copy_metric(copy_metric_namespace)
        if remote_write_workspace_arn is not None:
            self._policy(
                "PrometheusRemoteWrite",
                "The metrics collector on this node writes samples to the environment's Prometheus workspace",
                [
                    iam.PolicyStatement(
                        sid="RemoteWrite", actions=["aps:RemoteWrite"], resources=[remote_write_workspace_arn]
                    )
                ],
            )

    @property
    def role_arn(self) -> str:
        """The role's ARN (the instance groups' ``ExecutionRole``)."""
        return self.role.role_arn

    def _policy(self, name: str, description: str, statements: list[iam.PolicyStatement]) -> iam.ManagedPolicy:
        return iam.ManagedPolicy(self.role, name, description=description, statements=statements, roles=[self.role])

    def _telemetry(self, stack: cdk.Stack) -> None:
        log_groups = stack.format_arn(
            service="logs",
            resource="log-group",
            resource_name=f"{CLUSTER_LOG_GROUP_PREFIX}/*",
            arn_format=cdk.ArnFormat.COLON_RESOURCE_NAME,
        )
        policy = self._policy(
            "Telemetry",
            "HyperPod node logs under /aws/sagemaker/Clusters/ and metrics in that namespace",
            [
                iam.PolicyStatement(
                    sid="ClusterLogGroups",
                    actions=["logs:CreateLogGroup", "logs:DescribeLogStreams"],
                    resources=[log_groups],
                ),
                iam.PolicyStatement(
                    sid="ClusterLogStreams",
                    actions=["logs:CreateLogStream", "logs:PutLogEvents", "logs:DescribeLogStreams"],
                    resources=[f"{log_groups}:log-stream:*"],
                ),
                iam.PolicyStatement(
                    sid="ClusterMetrics",
                    actions=["cloudwatch:PutMetricData"],
                    resources=["*"],
                    conditions={"StringEquals": {"cloudwatch:namespace": CLUSTER_METRIC_NAMESPACE}},
                ),
            ],
        )
        acknowledge_wildcard_resource(
            policy,
            log_groups,
            "HyperPod names each cluster's log group /aws/sagemaker/Clusters/<name>/<cluster id>, with an id the "
            "service assigns at creation; the wildcard stays inside that prefix of this account and region.",
        )
        acknowledge_wildcard_resource(
            policy,
            f"{log_groups}:log-stream:*",
            "Each node writes its own log streams (named after instance ids the service assigns) into the cluster "
            "log groups under /aws/sagemaker/Clusters/; the streams cannot be named before the nodes exist.",
        )
        acknowledge(
            policy,
            "AwsSolutions-IAM5[Resource::*]",
            "cloudwatch:PutMetricData has no resource-level permissions; the statement is limited by the "
            "cloudwatch:namespace condition to HyperPod's /aws/sagemaker/Clusters namespace.",
        )

    def _copy_metric(self, namespace: str) -> None:
        if (
            namespace == CLUSTER_METRIC_NAMESPACE
            or namespace.startswith("AWS/")
            or not METRIC_NAMESPACE.fullmatch(namespace)
        ):
            raise ValueError(
                f"copy_metric_namespace: {namespace!r} is not allowed; use a namespace of mlcluster's own "
                f"(1-255 characters, not starting with ':', not {CLUSTER_METRIC_NAMESPACE} and not AWS/...)"
            )
        policy = self._policy(
            "ScheduledCopyMetric",
            f"Metrics of this node's own in {namespace} (the controller's daily copy)",
            [
                iam.PolicyStatement(
                    sid="ScheduledCopyMetric",
                    actions=["cloudwatch:PutMetricData"],
                    resources=["*"],
                    conditions={"StringEquals": {"cloudwatch:namespace": namespace}},
                ),
            ],
        )
        acknowledge(
            policy,
            "AwsSolutions-IAM5[Resource::*]",
            f"cloudwatch:PutMetricData has no resource-level permissions; the statement is limited by the "
            f"cloudwatch:namespace condition to {namespace}, which only the controller's role may write.",
        )

    def _session_manager(self) -> None:
        policy = self._policy(
            "SessionManager",
            "SSM Session Manager channels to HyperPod nodes",
            [
                session_channels_statement(),
            ],
        )
        acknowledge(
            policy,
            "AwsSolutions-IAM5[Resource::*]",
            "The ssmmessages channel actions have no resource-level permissions in IAM; they only let the SSM agent "
            "on the node open the session channels that operators reach the controller and login nodes through.",
        )

    def _lifecycle(self, bucket: s3.IBucket, prefix: str) -> None:
        policy = self._policy(
            "Lifecycle",
            "Read the HyperPod lifecycle scripts",
            [
                iam.PolicyStatement(
                    sid="ReadLifecycleScripts",
                    actions=["s3:GetObject"],
                    resources=[bucket.arn_for_objects(f"{prefix}*")],
                ),
                iam.PolicyStatement(
                    sid="ListLifecycleScripts",
                    actions=["s3:ListBucket"],
                    resources=[bucket.bucket_arn],
                    conditions={"StringLike": {"s3:prefix": [f"{prefix}*"]}},
                ),
            ],
        )
        acknowledge_wildcard_resource(
            policy,
            bucket.arn_for_objects(f"{prefix}*"),
            f"Nodes download every lifecycle script and generated input file under {prefix} of the lifecycle "
            "bucket when they start; the set of files changes with the scripts, so the prefix is the scope.",
        )

    def _network(
        self,
        stack: cdk.Stack,
        vpc: ec2.IVpc,
        subnets: Sequence[ec2.ISubnet],
        security_groups: Sequence[ec2.ISecurityGroup],
    ) -> None:
        interfaces = stack.format_arn(service="ec2", resource="network-interface", resource_name="*")
        instances = stack.format_arn(service="ec2", resource="instance", resource_name="*")
        in_vpc = {"ArnEquals": {"ec2:Vpc": stack.format_arn(service="ec2", resource="vpc", resource_name=vpc.vpc_id)}}
        policy = self._policy(
            "Network",
            "Network interfaces of HyperPod nodes in the cluster's VPC",
            [
                iam.PolicyStatement(
                    sid="CreateInterfacesInClusterSubnets",
                    actions=["ec2:CreateNetworkInterface"],
                    resources=[
                        interfaces,
                        *(
                            stack.format_arn(service="ec2", resource="subnet", resource_name=s.subnet_id)
                            for s in subnets
                        ),
                        *(
                            stack.format_arn(
                                service="ec2", resource="security-group", resource_name=g.security_group_id
                            )
                            for g in security_groups
                        ),
                    ],
                ),
                iam.PolicyStatement(
                    sid="TagInterfacesOnCreate",
                    actions=["ec2:CreateTags"],
                    resources=[interfaces],
                    conditions={"StringEquals": {"ec2:CreateAction": "CreateNetworkInterface"}},
                ),
                iam.PolicyStatement(
                    sid="ManageInterfacesInClusterVpc",
                    actions=[
                        "ec2:DeleteNetworkInterface",
                        "ec2:CreateNetworkInterfacePermission",
                        "ec2:DeleteNetworkInterfacePermission",
                        "ec2:AssignPrivateIpAddresses",
                        "ec2:UnassignPrivateIpAddresses",
                    ],
                    resources=[interfaces],
                    conditions=in_vpc,
                ),
                iam.PolicyStatement(
                    # DetachNetworkInterface also names the instance, which has no ec2:Vpc key: the
                    # IfExists form applies the VPC check to the interface and lets the instance through.
                    sid="DetachInterfacesInClusterVpc",
                    actions=["ec2:DetachNetworkInterface"],
                    resources=[interfaces, instances],
                    conditions={"ArnEqualsIfExists": in_vpc["ArnEquals"]},
                ),
                iam.PolicyStatement(
                    sid="DescribeNetwork",
                    actions=[
                        "ec2:DescribeNetworkInterfaces",
                        "ec2:DescribeVpcs",
                        "ec2:DescribeDhcpOptions",
                        "ec2:DescribeSubnets",
                        "ec2:DescribeSecurityGroups",
                    ],
                    resources=["*"],
                ),
            ],
        )
        acknowledge_wildcard_resource(
            policy,
            interfaces,
            "HyperPod creates one interface per node in the cluster's subnets and the ids do not exist beforehand; "
            "creation is limited to the cluster's subnets and security groups, tagging to creation time, and every "
            "other change to interfaces whose ec2:Vpc is the cluster's VPC.",
        )
        acknowledge_wildcard_resource(
            policy,
            instances,
            "DetachNetworkInterface also authorizes the instance the node interface is attached to, a HyperPod "
            "instance whose id is assigned at launch; the interface side is held to the cluster's VPC.",
        )
        acknowledge(
            policy,
            "AwsSolutions-IAM5[Resource::*]",
            "The EC2 Describe calls HyperPod makes (interfaces, VPCs, DHCP options, subnets, security groups) have "
            "no resource-level permissions in IAM; they are read-only.",
        )

    def _data(self, stack: cdk.Stack, bucket: s3.IBucket, access: DataAccess) -> None:
        object_actions = ["s3:GetObject"]
        bucket_actions = ["s3:ListBucket", "s3:GetBucketLocation"]
        key_actions = ["kms:Decrypt"]
        if access == "read_write":
            object_actions += [
                "s3:PutObject",
                "s3:DeleteObject",
                "s3:AbortMultipartUpload",
                "s3:ListMultipartUploadParts",
            ]
            bucket_actions += ["s3:ListBucketMultipartUploads"]
            key_actions += ["kms:GenerateDataKey"]
        statements = [
            iam.PolicyStatement(sid="DataObjects", actions=object_actions, resources=[bucket.arn_for_objects("*")]),
            iam.PolicyStatement(sid="DataBucket", actions=bucket_actions, resources=[bucket.bucket_arn]),
        ]
        if bucket.encryption_key is not None:
            statements.append(
                iam.PolicyStatement(
                    sid="DataBucketKey",
                    actions=key_actions,
                    resources=[bucket.encryption_key.key_arn],
                    conditions={"StringEquals": {"kms:ViaService": f"s3.{stack.region}.{stack.url_suffix}"}},
                )
            )
        what = "read and write" if access == "read_write" else "read"
        policy = self._policy("DataBucket", f"HyperPod nodes {what} the data bucket", statements)
        acknowledge_wildcard_resource(
            policy,
            bucket.arn_for_objects("*"),
            f"Training jobs on the nodes {what} datasets and checkpoints anywhere in the data bucket, under keys "
            "chosen by the jobs; the wildcard covers that one bucket's objects only.",
        )

    def _backup(self, stack: cdk.Stack, bucket: s3.IBucket, prefix: str) -> None:
        statements = [
            iam.PolicyStatement(
                sid="PatchBackupObjects",
                actions=["s3:GetObject", "s3:PutObject"],
                resources=[bucket.arn_for_objects(f"{prefix}*")],
            ),
            iam.PolicyStatement(
                sid="PatchBackupList",
                actions=["s3:ListBucket"],
                resources=[bucket.bucket_arn],
                conditions={"StringLike": {"s3:prefix": [f"{prefix}*"]}},
            ),
        ]
        if bucket.encryption_key is not None:
            statements.append(
                iam.PolicyStatement(
                    sid="PatchBackupKey",
                    actions=["kms:Decrypt", "kms:GenerateDataKey"],
                    resources=[bucket.encryption_key.key_arn],
                    conditions={"StringEquals": {"kms:ViaService": f"s3.{stack.region}.{stack.url_suffix}"}},
                )
            )
        policy = self._policy("PatchBackup", "The controller saves and restores its patch backups", statements)
        acknowledge_wildcard_resource(
            policy,
            bucket.arn_for_objects(f"{prefix}*"),
            "mlcluster-backup writes one folder per patch run under this cluster's own prefix of the patch backup "
            "bucket; the wildcard is the run folders below that prefix, nothing else in the bucket.",
        )

    def _secrets(self, stack: cdk.Stack, secret_arns: Sequence[str], key_arns: Sequence[str]) -> None:
        statements = [
            iam.PolicyStatement(
                sid="ReadSecrets", actions=["secretsmanager:GetSecretValue"], resources=list(secret_arns)
            )
        ]
        if key_arns:
            statements.append(decrypt_through_secrets_manager(self, sid="DecryptSecrets", key_arns=list(key_arns)))
        self._policy("Secrets", "HyperPod nodes read the listed secrets (Slurm accounting credentials)", statements)


def _check_props(
    *,
    subnets: Sequence[ec2.ISubnet],
    security_groups: Sequence[ec2.ISecurityGroup],
    lifecycle_prefix: str,
    data_bucket: s3.IBucket | None,
    data_bucket_access: str,
    secret_arns: Sequence[str],
) -> None:
    """Check every prop at once and raise one ValueError listing all problems."""
    problems: list[str] = []
    if not subnets:
        problems.append("subnets: [] is not allowed; give the subnets the cluster's nodes use (1 to 16)")
    elif len(subnets) > 16:
        problems.append(f"subnets: {len(subnets)} given; HyperPod allows 1 to 16")
    if not 1 <= len(security_groups) <= 5:
        problems.append(f"security_groups: {len(security_groups)} given; HyperPod allows 1 to 5")
    if not PREFIX.fullmatch(lifecycle_prefix):
        problems.append(
            f"lifecycle_prefix: {lifecycle_prefix!r} is not allowed; use a key prefix such as 'lifecycle/' "
            "(letters, digits, !_.*'()- and '/', ending in '/', not starting with '/')"
        )
    if data_bucket_access not in DATA_ACCESS:
        problems.append(
            f"data_bucket_access: {data_bucket_access!r} is not allowed; use 'none', 'read' or 'read_write'"
        )
    elif data_bucket is None and data_bucket_access != "none":
        problems.append(f"data_bucket_access: {data_bucket_access!r} needs data_bucket; give the bucket or use 'none'")
    for arn in secret_arns:
        if not cdk.Token.is_unresolved(arn) and not SECRET_ARN.fullmatch(arn):
            problems.append(f"secret_arns: {arn!r} is not a Secrets Manager secret ARN (arn:aws:secretsmanager:...)")
    if problems:
        raise ValueError("HyperPodExecutionRole: " + "; ".join(problems))

"""An AWS ParallelCluster cluster launched through ParallelCluster's own CloudFormation custom resource."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any, Literal

import aws_cdk as cdk
from constructs import Construct

from mlcluster.pcluster import checks

#: The newest ParallelCluster 3 release this project is tested with (its schema
#: package is pinned to the same version in requirements-pcluster.txt).
DEFAULT_PCLUSTER_VERSION = "3.16.1"


def provider_template_url(version: str) -> str:
    """The official provider template of ``version``, in the deploying region and partition."""
    return cdk.Fn.sub(
        "https://${AWS::Region}-aws-parallelcluster.s3.${AWS::Region}.${AWS::URLSuffix}"
        f"/parallelcluster/{version}/templates/custom_resource/cluster.yaml"
    )


def check_cluster_name(name: str, *, stack_name: str | None, slurm_accounting: bool) -> None:
    """Raise ``ValueError`` unless ``name`` is a cluster name ParallelCluster accepts here.

    The rules are the pre-deploy checks' (``mlcluster.pcluster.checks``):
    letters, digits and hyphens starting with a letter; at most 60
    characters, or 40 with Slurm accounting; different from the
    CloudFormation stack's name. Unresolved tokens are not checked.
    """
    if cdk.Token.is_unresolved(name):
        return
    known_stack = stack_name if stack_name is not None and not cdk.Token.is_unresolved(stack_name) else None
    problems = checks.check_cluster_name(name, stack_name=known_stack, accounting=slurm_accounting)
    if problems:
        raise ValueError("cluster_name: " + "; ".join(p.message for p in problems))


class PclusterCluster(Construct):
    """A ParallelCluster 3 cluster as part of a CDK stack.

    Creates the ParallelCluster provider stack from the official template of
    the pinned version (a nested ``AWS::CloudFormation::Stack``) and a
    ``Custom::PclusterCluster`` resource carrying the cluster's name and its
    configuration (the pcluster YAML as an object, CloudFormation references
    allowed). ParallelCluster's own Lambda validates, creates, updates and
    deletes the cluster, polling every two minutes.

    Default settings:
    - ParallelCluster 3.16.1.
    - ``deletion_policy="Retain"``: deleting the stack leaves the cluster
      running; pass ``"Delete"`` for throw-away environments.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        cluster_name: str,
        cluster_configuration: Mapping[str, Any],
        version: str = DEFAULT_PCLUSTER_VERSION,
        deletion_policy: Literal["Delete", "Retain"] = "Retain",
        slurm_accounting: bool = False,
        provider_additional_iam_policies: Sequence[str] = (),
    ) -> None:
        """Create the provider stack and the cluster.

        :param cluster_name: the cluster's name (cannot change after creation).
        :param cluster_configuration: the ParallelCluster 3 configuration.
        :param version: ParallelCluster version of the provider. Default: 3.16.1.
        :param deletion_policy: ``Retain`` (default) or ``Delete`` the cluster with the stack.
        :param slurm_accounting: whether the configuration enables Slurm accounting
            (shortens the allowed name to 40 characters). Default: false.
        :param provider_additional_iam_policies: policy ARNs the provider's Lambda
            also needs, e.g. to attach the head node's additional policies. Default: none.
        """
        super().__init__(scope, construct_id)
        if not re.fullmatch(r"3\.\d+\.\d+", version):
            raise ValueError(f"version: {version!r} is not a ParallelCluster 3 version such as '3.16.1'")
        if deletion_policy not in ("Delete", "Retain"):
            raise ValueError(f"deletion_policy: {deletion_policy!r} is not allowed; use 'Delete' or 'Retain'")
        stack = cdk.Stack.of(self)
        check_cluster_name(cluster_name, stack_name=stack.stack_name, slurm_accounting=slurm_accounting)
        parameters = {}
        if provider_additional_iam_policies:
            parameters["AdditionalIamPolicies"] = ",".join(provider_additional_iam_policies)
        self.provider = cdk.CfnStack(
            self,
            "Provider",
            template_url=provider_template_url(version),
            parameters=parameters or None,
        )
        self.resource = cdk.CfnResource(
            self,
            "Resource",
            type="Custom::PclusterCluster",
            properties={
                "ServiceToken": self.provider.get_att("Outputs.ServiceToken"),
                "ClusterName": cluster_name,
                "ClusterConfiguration": dict(cluster_configuration),
                "DeletionPolicy": deletion_policy,
            },
        )
        self.cluster_name = cluster_name
        self.version = version

    @property
    def head_node_instance_id(self) -> str:
        """The head node's EC2 instance ID."""
        return self.resource.get_att("headNode.instanceId").to_string()

    @property
    def head_node_private_ip(self) -> str:
        """The head node's private IP address."""
        return self.resource.get_att("headNode.privateIpAddress").to_string()

    @property
    def validation_messages(self) -> str:
        """Validation messages of the last create or update, as ParallelCluster reports them."""
        return self.resource.get_att("validationMessages").to_string()

    @property
    def ssm_command(self) -> str:
        """The shell command that opens an SSM session on the head node."""
        return cdk.Fn.join(
            "", ["aws ssm start-session --region ", cdk.Aws.REGION, " --target ", self.head_node_instance_id]
        )

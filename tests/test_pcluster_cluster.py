"""ParallelCluster's official custom resource, as rendered into CloudFormation."""

from __future__ import annotations

from typing import Any

import aws_cdk as cdk
import pytest
from aws_cdk.assertions import Template

from mlcluster.constructs.pcluster_cluster import PclusterCluster, check_cluster_name

CONFIG = {"Region": "us-east-1", "Image": {"Os": "alinux2023"}, "HeadNode": {"InstanceType": "m5.8xlarge"}}


@pytest.fixture(scope="module")
def rendered() -> tuple[Template, PclusterCluster]:
    stack = cdk.Stack(cdk.App(), "ClusterStack")
    cluster = PclusterCluster(
        stack,
        "Cluster",
        cluster_name="train",
        cluster_configuration=CONFIG,
        deletion_policy="Delete",
        provider_additional_iam_policies=["arn:aws:iam::aws:policy/AmazonSSMManagedInstanceCore"],
    )
    cdk.CfnOutput(stack, "HeadNode", value=cluster.head_node_instance_id)
    cdk.CfnOutput(stack, "Ssm", value=cluster.ssm_command)
    return Template.from_stack(stack), cluster


def test_provider_stack_from_official_template(rendered: tuple[Template, PclusterCluster]) -> None:
    t, _ = rendered
    (provider,) = t.find_resources("AWS::CloudFormation::Stack").values()
    url = provider["Properties"]["TemplateURL"]["Fn::Sub"]
    assert url == (
        "https://${AWS::Region}-aws-parallelcluster.s3.${AWS::Region}.${AWS::URLSuffix}"
        "/parallelcluster/3.16.1/templates/custom_resource/cluster.yaml"
    )
    assert provider["Properties"]["Parameters"] == {
        "AdditionalIamPolicies": "arn:aws:iam::aws:policy/AmazonSSMManagedInstanceCore"
    }


def test_cluster_resource_properties(rendered: tuple[Template, PclusterCluster]) -> None:
    t, _ = rendered
    (provider_id,) = t.find_resources("AWS::CloudFormation::Stack")
    (cluster,) = t.find_resources("Custom::PclusterCluster").values()
    props = cluster["Properties"]
    assert props["ServiceToken"] == {"Fn::GetAtt": [provider_id, "Outputs.ServiceToken"]}
    assert props["ClusterName"] == "train"
    assert props["ClusterConfiguration"] == CONFIG
    assert props["DeletionPolicy"] == "Delete"


def test_outputs_read_describe_cluster_attributes(rendered: tuple[Template, PclusterCluster]) -> None:
    t, _ = rendered
    (cluster_id,) = t.find_resources("Custom::PclusterCluster")
    outputs: dict[str, Any] = t.to_json()["Outputs"]
    assert outputs["HeadNode"]["Value"] == {"Fn::GetAtt": [cluster_id, "headNode.instanceId"]}
    joined = outputs["Ssm"]["Value"]["Fn::Join"][1]
    assert joined[0] == "aws ssm start-session --region "
    assert {"Fn::GetAtt": [cluster_id, "headNode.instanceId"]} in joined


@pytest.mark.parametrize(
    ("name", "accounting", "stack", "message"),
    [
        ("9lives", False, None, "starting with a letter"),
        ("a_b", False, None, "starting with a letter"),
        ("a" * 61, False, None, "61 characters; at most 60"),
        ("a" * 41, True, None, "at most 40 allowed with Slurm accounting"),
        ("same", False, "same", "equals the CloudFormation stack name"),
    ],
)
def test_cluster_name_rules(name: str, accounting: bool, stack: str | None, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        check_cluster_name(name, stack_name=stack, slurm_accounting=accounting)


def test_cluster_name_rules_accept_limits() -> None:
    check_cluster_name("a" * 60, stack_name="dev-Cluster", slurm_accounting=False)
    check_cluster_name("a" * 40, stack_name=None, slurm_accounting=True)


@pytest.mark.parametrize(
    ("props", "message"),
    [
        ({"version": "2.11.0"}, "not a ParallelCluster 3 version"),
        ({"deletion_policy": "Snapshot"}, "'Delete' or 'Retain'"),
    ],
)
def test_bad_props(props: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        PclusterCluster(cdk.Stack(cdk.App(), "S"), "C", cluster_name="c", cluster_configuration=CONFIG, **props)

"""The provider's CustomLambdaRole, the node roles' permissions boundary and the Session Manager policy, as synthesized."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import pytest

from mlcluster.pcluster.provider_iam import NODE_POLICY_PATH
from tests.pcluster.pcluster_support import PCLUSTER_EXAMPLES, cluster_resource

Templates = dict[str, dict[str, Any]]


def resources(templates: Templates, example: str, kind: str) -> dict[str, Mapping[str, Any]]:
    template = templates[f"{example}/Cluster"]
    return {k: v for k, v in template["Resources"].items() if v["Type"] == kind}


def statements(document: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    return {s["Sid"]: s for s in document["Statement"]}


def as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def provider_role(templates: Templates, example: str) -> tuple[str, Mapping[str, Any]]:
    roles = {
        k: v
        for k, v in resources(templates, example, "AWS::IAM::Role").items()
        if v["Properties"]["AssumeRolePolicyDocument"]["Statement"][0]["Principal"]
        == {"Service": "lambda.amazonaws.com"}
        and any(p["PolicyName"] == "Provider" for p in v["Properties"].get("Policies", []))
    }
    ((logical, role),) = roles.items()
    return logical, role


def policy_by_description(templates: Templates, example: str, fragment: str) -> tuple[str, Mapping[str, Any]]:
    (found,) = [
        (k, v)
        for k, v in resources(templates, example, "AWS::IAM::ManagedPolicy").items()
        if fragment in v["Properties"].get("Description", "")
    ]
    return found


@pytest.mark.parametrize("example", PCLUSTER_EXAMPLES)
def test_provider_stack_runs_with_our_role(pcluster_templates: Templates, example: str) -> None:
    logical, _ = provider_role(pcluster_templates, example)
    (provider,) = resources(pcluster_templates, example, "AWS::CloudFormation::Stack").values()
    assert provider["Properties"]["Parameters"] == {"CustomLambdaRole": {"Fn::GetAtt": [logical, "Arn"]}}


@pytest.mark.parametrize("example", PCLUSTER_EXAMPLES)
def test_provider_role_creates_roles_only_with_the_boundary_and_attaches_only_the_configured_policies(
    pcluster_templates: Templates, example: str
) -> None:
    _, role = provider_role(pcluster_templates, example)
    (policy,) = role["Properties"]["Policies"]
    by_sid = statements(policy["PolicyDocument"])
    boundary_logical, _ = policy_by_description(pcluster_templates, example, "Permissions boundary")
    boundary_ref = {"Ref": boundary_logical}
    for sid in ("ClusterRolesWithBoundary", "AttachTheConfiguredPolicies"):
        assert by_sid[sid]["Condition"]["StringEquals"]["iam:PermissionsBoundary"] == boundary_ref
    assert set(as_list(by_sid["ClusterRolesWithBoundary"]["Action"])) == {
        "iam:CreateRole",
        "iam:PutRolePolicy",
        "iam:DeleteRolePolicy",
    }
    # Attach: exactly the policies the configuration names, plus the CloudWatch agent policy ParallelCluster adds.
    _, cluster = cluster_resource(pcluster_templates, example)
    config = cluster["Properties"]["ClusterConfiguration"]
    groups = [config["HeadNode"], *config["Scheduling"]["SlurmQueues"], *config.get("LoginNodes", {}).get("Pools", [])]
    configured = [e["Policy"] for g in groups for e in g.get("Iam", {}).get("AdditionalIamPolicies", [])]
    allowed = as_list(by_sid["AttachTheConfiguredPolicies"]["Condition"]["ArnEquals"]["iam:PolicyARN"])
    unique = [p for i, p in enumerate(configured) if p not in configured[:i]]
    assert allowed[:-1] == unique
    assert json.dumps(allowed[-1]).endswith(':iam::aws:policy/CloudWatchAgentServerPolicy"]]}')
    # Detach (an edit that drops a policy): this stack's node policies by their name, or the CloudWatch agent's;
    # never attach by that pattern.
    detach = by_sid["DetachTheAppsPolicies"]
    assert as_list(detach["Action"]) == ["iam:DetachRolePolicy"]
    assert detach["Condition"]["StringEquals"]["iam:PermissionsBoundary"] == boundary_ref
    patterns = json.dumps(detach["Condition"]["ArnLike"]["iam:PolicyARN"])
    assert f':policy/parallelcluster/{example}-Cluster-*"' in patterns
    assert patterns.endswith(':iam::aws:policy/CloudWatchAgentServerPolicy"]]}]')
    assert json.dumps(detach["Resource"]).endswith('/*"]]}')  # the node roles, role/parallelcluster/<cluster>/*
    # No IAM action is granted on every resource, and every IAM resource is this cluster's or read-only.
    for sid, statement in by_sid.items():
        actions = as_list(statement["Action"])
        if any(a.startswith("iam:") and a not in ("iam:GetRole", "iam:GetRolePolicy") for a in actions):
            assert statement["Resource"] != "*", sid
            if sid != "ReadIam":
                # Every resource of the statement is the cluster's (path parallelcluster/), or, for the
                # service-linked roles only, a service-linked role: not one or the other for any statement.
                expected = "aws-service-role/" if sid == "ServiceLinkedRoles" else "parallelcluster/"
                for resource in as_list(statement["Resource"]):
                    assert expected in json.dumps(resource), (sid, resource)
        assert "iam:*" not in actions and "*" not in actions, sid


@pytest.mark.parametrize("example", PCLUSTER_EXAMPLES)
def test_boundary_denies_iam_changes_and_parameter_reads(pcluster_templates: Templates, example: str) -> None:
    _, boundary = policy_by_description(pcluster_templates, example, "Permissions boundary")
    assert boundary["Properties"]["Path"] == NODE_POLICY_PATH
    by_sid = statements(boundary["Properties"]["PolicyDocument"])
    assert by_sid["NoIamOrAccountChanges"]["Effect"] == "Deny"
    assert {"iam:Create*", "iam:Attach*", "iam:Put*"} <= set(by_sid["NoIamOrAccountChanges"]["Action"])
    parameters = by_sid["NoParameterReadsBeyondTheCloudWatchAgent"]
    assert parameters["Effect"] == "Deny" and parameters["Action"] == "ssm:GetParameter*"
    assert json.dumps(parameters["NotResource"]).endswith(':parameter/AmazonCloudWatch-*"]]}')
    _, cluster = cluster_resource(pcluster_templates, example)
    logical, _ = policy_by_description(pcluster_templates, example, "Permissions boundary")
    assert cluster["Properties"]["ClusterConfiguration"]["Iam"] == {"PermissionsBoundary": {"Ref": logical}}


@pytest.mark.parametrize("example", PCLUSTER_EXAMPLES)
def test_session_manager_policy_has_no_parameter_reads(pcluster_templates: Templates, example: str) -> None:
    logical, policy = policy_by_description(pcluster_templates, example, "Session Manager")
    assert policy["Properties"]["Path"] == NODE_POLICY_PATH
    actions = {a for s in policy["Properties"]["PolicyDocument"]["Statement"] for a in as_list(s["Action"])}
    assert actions == {
        "ssm:UpdateInstanceInformation",
        "ssmmessages:CreateControlChannel",
        "ssmmessages:CreateDataChannel",
        "ssmmessages:OpenControlChannel",
        "ssmmessages:OpenDataChannel",
    }
    _, cluster = cluster_resource(pcluster_templates, example)
    config = cluster["Properties"]["ClusterConfiguration"]
    head = [e["Policy"] for e in config["HeadNode"]["Iam"]["AdditionalIamPolicies"]]
    assert {"Ref": logical} in head
    for pool in config.get("LoginNodes", {}).get("Pools", []):
        assert {"Ref": logical} in [e["Policy"] for e in pool["Iam"]["AdditionalIamPolicies"]]
    for queue in config["Scheduling"]["SlurmQueues"]:
        attached = [e["Policy"] for e in queue.get("Iam", {}).get("AdditionalIamPolicies", [])]
        assert {"Ref": logical} not in attached, f"compute queue {queue['Name']} gets Session Manager by default"
    assert config["HeadNode"]["Imds"] == {"Secured": True}


def test_no_template_mentions_the_broad_ssm_policy(pcluster_templates: Templates) -> None:
    text = json.dumps(pcluster_templates)
    assert "AmazonSSMManagedInstanceCore" not in text


def test_provider_role_and_additional_policies_are_exclusive() -> None:
    import aws_cdk as cdk
    from aws_cdk import aws_iam as iam

    from mlcluster.constructs.pcluster_cluster import PclusterCluster

    stack = cdk.Stack(cdk.App(), "Stack")
    role = iam.Role(stack, "Role", assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"))
    with pytest.raises(ValueError, match="provider_additional_iam_policies: the provider template ignores them"):
        PclusterCluster(
            stack,
            "Cluster",
            cluster_name="train",
            cluster_configuration={},
            provider_role=role,
            provider_additional_iam_policies=["arn:aws:iam::aws:policy/AmazonS3ReadOnlyAccess"],
        )

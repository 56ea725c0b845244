"""IAM attachability: every policy ParallelCluster's provider attaches to a node role is one it may attach.

The provider attaches each node group's ``Iam.AdditionalIamPolicies`` to the
role it creates for that group, and may do so only for the policies of its
allow-list (``mlcluster.pcluster.provider_iam``). A policy outside it fails
the creation at the node role; these tests fail first.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import pytest
import yaml

from mlcluster.config import ConfigError
from mlcluster.pcluster.provider_iam import NODE_POLICY_PATH, attachable
from mlcluster.pcluster.render import render_cluster_config
from tests.pcluster.cfn_resolve import Resolver, managed_policy_arn
from tests.pcluster.pcluster_support import (
    ARCHETYPES_YAML,
    PCLUSTER_EXAMPLES,
    cluster_resource,
    inputs,
    pcluster,
)

ACCOUNT = "123456789012"


def attached_policies(config: Mapping[str, Any]) -> Iterator[tuple[str, str]]:
    """``(node group, policy ARN)`` for every AdditionalIamPolicies entry of a rendered configuration."""
    groups: list[tuple[str, Mapping[str, Any]]] = [("HeadNode", config["HeadNode"])]
    groups += [(f"queue {q['Name']}", q) for q in config["Scheduling"]["SlurmQueues"]]
    groups += [(f"login pool {p['Name']}", p) for p in config.get("LoginNodes", {}).get("Pools", [])]
    for name, group in groups:
        for entry in group.get("Iam", {}).get("AdditionalIamPolicies", []):
            yield name, entry["Policy"]


@pytest.mark.parametrize(
    "arn",
    [
        "arn:aws:iam::123456789012:policy/parallelcluster-node-extra",
        "arn:aws:iam::123456789012:policy/parallelcluster/mlcluster/NodeScriptRead",
        "arn:aws-cn:iam::123456789012:policy/parallelcluster",
        "arn:aws:iam::aws:policy/CloudWatchAgentServerPolicy",
        "arn:aws:iam::aws:policy/AmazonS3ReadOnlyAccess",
        "arn:aws:iam::aws:policy/service-role/AmazonEC2SpotFleetTaggingRole",
    ],
)
def test_attachable_at_the_edge(arn: str) -> None:
    assert attachable(arn)


@pytest.mark.parametrize(
    "arn",
    [
        "arn:aws:iam::123456789012:policy/mlcluster-node-scripts",  # our old name
        "arn:aws:iam::123456789012:policy/team/parallelcluster-x",  # another path
        "arn:aws:iam::123456789012:policy/ParallelCluster-x",  # ArnLike is case-sensitive
        "arn:aws:iam::aws:policy/AmazonS3FullAccess",
        "arn:aws:iam::aws:policy/AdministratorAccess",
        "arn:aws:iam::aws:policy/parallelcluster-x",  # AWS-owned, not in the list
        "not-an-arn",
    ],
)
def test_not_attachable(arn: str) -> None:
    assert not attachable(arn)


@pytest.mark.parametrize("where", ["head_node", "queue"])
def test_config_refuses_a_policy_the_provider_cannot_attach(where: str) -> None:
    bad = "arn:aws:iam::123456789012:policy/team-data-read"
    text = "queues: [{name: train, compute_resources: [{name: gpu, instance_type: p5.48xlarge}]"
    if where == "queue":
        text += f", additional_iam_policies: [{bad}]}}]"
        key = "queues[0].additional_iam_policies[0]"
    else:
        text += f"}}]\nhead_node: {{additional_iam_policies: [{bad}]}}"
        key = "head_node.additional_iam_policies[0]"
    with pytest.raises(ConfigError) as err:
        pcluster(text)
    message = str(err.value)
    assert f"test.yaml: {key}: '{bad}'" in message
    assert "cannot attach" in message and "'/parallelcluster/'" in message and "AmazonS3ReadOnlyAccess" in message


def test_config_accepts_allowed_policies() -> None:
    cfg = pcluster(
        "queues: [{name: train, compute_resources: [{name: gpu, instance_type: p5.48xlarge}], "
        "additional_iam_policies: [arn:aws:iam::aws:policy/AmazonS3ReadOnlyAccess]}]\n"
        "head_node: {additional_iam_policies: [arn:aws:iam::123456789012:policy/parallelcluster/team-read]}"
    )
    assert cfg.queues[0].additional_iam_policies == ("arn:aws:iam::aws:policy/AmazonS3ReadOnlyAccess",)


def _physical(resolver: Resolver) -> Any:
    def physical(stack: str, logical: str, resource: Mapping[str, Any], attribute: str | None) -> Any:
        if resource["Type"] == "AWS::IAM::ManagedPolicy" and attribute is None:
            return managed_policy_arn(resolver, stack, logical, resource)
        return f"{logical}-{attribute or 'ref'}"

    return physical


@pytest.mark.parametrize("example", PCLUSTER_EXAMPLES)
def test_every_example_attaches_only_attachable_policies(
    pcluster_templates: dict[str, dict[str, Any]], example: str
) -> None:
    templates = pcluster_templates
    stack, cluster = cluster_resource(templates, example)
    resolver = Resolver(templates, physical=lambda *a: None)
    resolver.physical = _physical(resolver)
    config = resolver.resolve(stack, cluster["Properties"]["ClusterConfiguration"])
    attached = list(attached_policies(config))
    assert attached, "every example attaches at least the Session Manager policy"
    refused = [(group, arn) for group, arn in attached if not attachable(arn)]
    assert refused == []


def test_our_generated_node_policies_live_under_the_parallelcluster_path(
    pcluster_templates: dict[str, dict[str, Any]],
) -> None:
    templates = pcluster_templates
    seen = 0
    for example in PCLUSTER_EXAMPLES:
        stack, cluster = cluster_resource(templates, example)
        refs = {
            entry["Policy"]["Ref"]
            for _, entry in _entries(cluster["Properties"]["ClusterConfiguration"])
            if isinstance(entry["Policy"], dict) and "Ref" in entry["Policy"]
        }
        for ref in refs:
            seen += 1
            assert templates[stack]["Resources"][ref]["Properties"]["Path"] == NODE_POLICY_PATH
    assert seen, "the p4de example's login nodes attach the generated node-script policy"


def _entries(config: Mapping[str, Any]) -> Iterator[tuple[str, Mapping[str, Any]]]:
    groups = [config["HeadNode"], *config["Scheduling"]["SlurmQueues"], *config.get("LoginNodes", {}).get("Pools", [])]
    for group in groups:
        for entry in group.get("Iam", {}).get("AdditionalIamPolicies", []):
            yield "group", entry


def variants() -> dict[str, dict[str, Any]]:
    """The archetypes, and each with login nodes, without Session Manager, and with allowed user policies."""
    out: dict[str, dict[str, Any]] = {}
    for name in sorted(ARCHETYPES_YAML):
        base = yaml.safe_load(ARCHETYPES_YAML[name])["cluster"]["pcluster"]
        out[name] = base
        out[f"{name}+login"] = {**base, "login_nodes": {"count": 2}}
        out[f"{name}-ssm"] = {
            **base,
            "head_node": {**base.get("head_node", {}), "ssm": False},
            "queues": [{**q, "ssm": False} for q in base["queues"]],
        }
        out[f"{name}+policies"] = {
            **base,
            "head_node": {**base.get("head_node", {}), "additional_iam_policies": [ALLOWED_ACCOUNT]},
            "queues": [{**q, "additional_iam_policies": [ALLOWED_AWS]} for q in base["queues"]],
        }
    return out


ALLOWED_ACCOUNT = "arn:aws:iam::123456789012:policy/parallelcluster/team-read"
ALLOWED_AWS = "arn:aws:iam::aws:policy/CloudWatchAgentServerPolicy"
VARIANTS = variants()


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_table_variants_attach_only_attachable_policies(name: str) -> None:
    config = render_cluster_config(pcluster(VARIANTS[name]), inputs())
    attached = list(attached_policies(config))
    refused = [(group, arn) for group, arn in attached if not attachable(arn)]
    assert refused == []
    if name.endswith("+policies"):
        assert ("HeadNode", ALLOWED_ACCOUNT) in attached

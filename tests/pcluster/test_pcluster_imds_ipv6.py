"""Issue 17: the IPv6 metadata endpoint (fd00:ec2::254) is no way around IMDS restrictions on ParallelCluster nodes.

A node reaches the IPv6 endpoint only when its launch template enables ``HttpProtocolIpv6`` (and
its subnet has IPv6). ParallelCluster writes the head node, queue and login node launch templates
itself; in the version we pin (``requirements/pcluster.in``) they set only ``HttpTokens``, so
the endpoint stays at EC2's default, disabled. The cluster configuration has no key that turns it
on, and our networks have no IPv6. Where a later ParallelCluster enables it, ``Imds.Secured``
already covers it: its cookbook's ``imds-access.sh`` writes the same owner rules with ``ip6tables``
for ``fd00:ec2::254``.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import pytest

from tests.pcluster.pcluster_support import (
    PCLUSTER_EXAMPLES,
    PCLUSTER_PYTHON,
    cluster_resource,
)

#: ParallelCluster's launch template builders (head node, queues, login node pools).
LAUNCH_TEMPLATE_MODULES = ("cluster_stack.py", "queues_stack.py", "login_nodes_stack.py")


def pcluster_templates_dir() -> Path:
    found = sorted(PCLUSTER_PYTHON.parent.parent.glob("lib/python3*/site-packages/pcluster/templates"))
    if not found:
        pytest.skip(".venv-pcluster is not set up (make pytest does)")
    return found[-1]


def metadata_options_keywords(source: str) -> list[set[str]]:
    """The keyword names of every ``...MetadataOptionsProperty(...)`` call in ``source``."""
    calls = [
        node
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "MetadataOptionsProperty"
    ]
    return [{keyword.arg or "**" for keyword in call.keywords} for call in calls]


def test_parallelclusters_launch_templates_leave_the_ipv6_endpoint_disabled() -> None:
    folder = pcluster_templates_dir()
    for module in LAUNCH_TEMPLATE_MODULES:
        source = (folder / module).read_text(encoding="utf-8")
        found = metadata_options_keywords(source)
        assert found == [{"http_tokens"}], f"{module}: MetadataOptionsProperty keywords {found}"
        assert "http_protocol_ipv6" not in source


def test_the_reader_sees_an_enabled_ipv6_endpoint() -> None:
    enabled = "ec2.CfnLaunchTemplate.MetadataOptionsProperty(http_tokens='required', http_protocol_ipv6='enabled')"
    assert metadata_options_keywords(enabled) == [{"http_tokens", "http_protocol_ipv6"}]
    assert metadata_options_keywords("f(**opts).MetadataOptionsProperty(**opts)") == [{"**"}]


@pytest.mark.parametrize("example", PCLUSTER_EXAMPLES)
def test_no_ipv6_in_our_templates_and_the_head_node_imds_secured(
    pcluster_templates: dict[str, dict[str, Any]], example: str
) -> None:
    templates = pcluster_templates
    for name, template in templates.items():
        if not name.startswith(f"{example}/"):
            continue
        for logical_id, resource in template.get("Resources", {}).items():
            kind, props = resource["Type"], resource.get("Properties", {})
            where = f"{name} {logical_id}"
            if kind == "AWS::EC2::LaunchTemplate":
                options = props.get("LaunchTemplateData", {}).get("MetadataOptions", {})
                assert options.get("HttpProtocolIpv6", "disabled") == "disabled", where
            assert kind != "AWS::EC2::VPCCidrBlock" or not (
                {"AmazonProvidedIpv6CidrBlock", "Ipv6Pool", "Ipv6CidrBlock", "Ipv6IpamPoolId"} & set(props)
            ), where
            if kind == "AWS::EC2::Subnet":
                assert not {"Ipv6CidrBlock", "AssignIpv6AddressOnCreation", "Ipv6Native"} & set(props), where
    _, cluster = cluster_resource(templates, example)
    config = cluster["Properties"]["ClusterConfiguration"]
    assert config["HeadNode"]["Imds"] == {"Secured": True}
    assert config["Imds"] == {"ImdsSupport": "v2.0"}

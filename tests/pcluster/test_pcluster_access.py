"""Login nodes behind an internet-facing load balancer get public IPs from their subnet, and only they."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import aws_cdk as cdk
import pytest
from aws_cdk.assertions import Template

from mlcluster.config import Environment
from mlcluster.stacks.network import NetworkStack
from tests.pcluster.pcluster_support import NETWORK

MakeEnv = Callable[..., Environment]
QUEUE = {"name": "train", "compute_resources": [{"name": "gpu", "instance_type": "p5.48xlarge"}]}


def subnets_by_type(make_env: MakeEnv, pcluster: dict[str, Any]) -> dict[str, list[bool]]:
    env = make_env(
        {"network": NETWORK, "cluster": {"backend": "pcluster", "pcluster": {"queues": [QUEUE], **pcluster}}}
    )
    subnets = Template.from_stack(NetworkStack(cdk.App(), "Network", environment=env)).find_resources(
        "AWS::EC2::Subnet"
    )
    out: dict[str, list[bool]] = {}
    for subnet in subnets.values():
        props = subnet["Properties"]
        kind = next(t["Value"] for t in props["Tags"] if t["Key"] == "mlcluster:subnet-type")
        out.setdefault(kind, []).append(props["MapPublicIpOnLaunch"])
    return out


@pytest.mark.parametrize(
    "pcluster",
    [{}, {"login_nodes": {}}, {"head_node": {"subnet": "public"}}],
    ids=["no login nodes", "internal login nodes", "public head node (Elastic IP)"],
)
def test_no_public_ips_unless_login_nodes_face_the_internet(make_env: MakeEnv, pcluster: dict[str, Any]) -> None:
    by_type = subnets_by_type(make_env, pcluster)
    assert by_type["public"] == [False]
    assert set(by_type["private"]) == {False}


def test_internet_facing_login_nodes_get_public_ips_in_the_public_subnet_only(make_env: MakeEnv) -> None:
    by_type = subnets_by_type(make_env, {"login_nodes": {"internet_facing": True}})
    assert by_type["public"] == [True]
    assert set(by_type["private"]) == {False}

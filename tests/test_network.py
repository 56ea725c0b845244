"""The network stack, option by option, on rendered CloudFormation."""

from __future__ import annotations

import json
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aws_cdk as cdk
import pytest
from aws_cdk.assertions import Match, Template

from mlcluster.config import Environment, load_environment
from mlcluster.config.network import Zone
from mlcluster.constructs.network import ClusterNetwork, ImportedNetwork
from mlcluster.stacks.network import NetworkStack
from tests.support import write_env

MakeEnv = Callable[..., Environment]


def template(make_env: MakeEnv, network: dict[str, Any], **top: Any) -> Template:
    env = make_env({"network": network, **top}, name="net")
    stack = NetworkStack(cdk.App(), "Network", environment=env)
    return Template.from_stack(stack)


def resources(t: Template, kind: str) -> dict[str, Any]:
    return t.find_resources(kind)


@pytest.fixture(scope="module")
def default() -> Template:

    with tempfile.TemporaryDirectory() as tmp:
        env = load_environment(write_env(Path(tmp), "dev", {"network": {"availability_zone": "us-east-1a"}}))
    return Template.from_stack(NetworkStack(cdk.App(), "Network", environment=env))


def test_vpc_with_dns(default: Template) -> None:
    default.has_resource_properties(
        "AWS::EC2::VPC", {"CidrBlock": "10.0.0.0/16", "EnableDnsHostnames": True, "EnableDnsSupport": True}
    )


def test_one_public_one_private_subnet_in_named_zone(default: Template) -> None:
    subnets = resources(default, "AWS::EC2::Subnet")
    assert len(subnets) == 2
    by_type = {
        next(t["Value"] for t in s["Properties"]["Tags"] if t["Key"] == "mlcluster:subnet-type"): s["Properties"]
        for s in subnets.values()
    }
    assert by_type["public"]["CidrBlock"] == "10.0.0.0/20"
    assert by_type["private"]["CidrBlock"] == "10.0.64.0/18"
    for props in by_type.values():
        assert props["AvailabilityZone"] == "us-east-1a"
        assert "AvailabilityZoneId" not in props
        assert props["MapPublicIpOnLaunch"] is False


def test_internet_and_single_nat(default: Template) -> None:
    default.resource_count_is("AWS::EC2::InternetGateway", 1)
    default.resource_count_is("AWS::EC2::NatGateway", 1)
    default.has_resource_properties(
        "AWS::EC2::Route", {"DestinationCidrBlock": "0.0.0.0/0", "GatewayId": Match.any_value()}
    )
    default.has_resource_properties(
        "AWS::EC2::Route", {"DestinationCidrBlock": "0.0.0.0/0", "NatGatewayId": Match.any_value()}
    )


def test_s3_gateway_endpoint_on_every_route_table(default: Template) -> None:
    tables = set(resources(default, "AWS::EC2::RouteTable"))
    endpoints = resources(default, "AWS::EC2::VPCEndpoint")
    assert len(endpoints) == 1
    props = next(iter(endpoints.values()))["Properties"]
    assert props["VpcEndpointType"] == "Gateway"
    assert props["ServiceName"] == {"Fn::Sub": "com.amazonaws.${AWS::Region}.s3"}
    assert {r["Ref"] for r in props["RouteTableIds"]} == tables


def _endpoint_allows(policy: dict[str, Any], action: str, bucket_account: str) -> bool:
    """Evaluate the endpoint policy for one request (this account is 111111111111)."""
    for statement in policy["Statement"]:
        actions = statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]
        if not any(a == action or (a.endswith("*") and action.startswith(a[:-1])) for a in actions):
            continue
        condition = statement.get("Condition", {}).get("StringEquals", {}).get("aws:ResourceAccount")
        if condition is None or (condition == {"Ref": "AWS::AccountId"} and bucket_account == "111111111111"):
            return True
    return False


#: The S3 gateway endpoint's policy: reads of any bucket, everything else only on this account's buckets.
S3_ENDPOINT_POLICY = {
    "Version": "2012-10-17",
    "Statement": [
        {
            "Sid": "ReadAnyBucket",
            "Effect": "Allow",
            "Principal": {"AWS": "*"},
            "Action": [
                "s3:GetObject",
                "s3:GetObjectVersion",
                "s3:GetBucketLocation",
                "s3:ListBucket",
                "s3:ListAllMyBuckets",
            ],
            "Resource": "*",
        },
        {
            "Sid": "AnythingOnThisAccountsBuckets",
            "Effect": "Allow",
            "Principal": {"AWS": "*"},
            "Action": "s3:*",
            "Resource": "*",
            "Condition": {"StringEquals": {"aws:ResourceAccount": {"Ref": "AWS::AccountId"}}},
        },
    ],
}


def test_s3_endpoint_policy_statements(default: Template) -> None:
    (endpoint,) = resources(default, "AWS::EC2::VPCEndpoint").values()
    assert endpoint["Properties"]["PolicyDocument"] == S3_ENDPOINT_POLICY


@pytest.mark.parametrize(
    ("action", "account", "allowed"),
    [
        ("s3:GetObject", "999999999999", True),  # package repositories, ECR layers, ParallelCluster's buckets
        ("s3:ListBucket", "999999999999", True),
        ("s3:GetBucketLocation", "999999999999", True),
        ("s3:PutObject", "999999999999", False),
        ("s3:DeleteObject", "999999999999", False),
        ("s3:AbortMultipartUpload", "999999999999", False),
        ("s3:PutObjectAcl", "999999999999", False),
        ("s3:PutBucketPolicy", "999999999999", False),
        ("s3:PutObject", "111111111111", True),
        ("s3:DeleteObject", "111111111111", True),
        ("s3:PutObjectTagging", "111111111111", True),
    ],
)
def test_s3_endpoint_writes_only_to_this_accounts_buckets(
    default: Template, action: str, account: str, allowed: bool
) -> None:
    (endpoint,) = resources(default, "AWS::EC2::VPCEndpoint").values()
    assert _endpoint_allows(endpoint["Properties"]["PolicyDocument"], action, account) is allowed


def test_node_subnet_cidrs() -> None:
    stack = cdk.Stack(cdk.App(), "Net")
    net = ClusterNetwork(stack, "Net", availability_zone="us-east-1a", secondary_cidr="10.1.0.0/16")
    assert net.node_subnet_cidrs(include_public=False) == ["10.1.0.0/18"]
    assert net.node_subnet_cidrs(include_public=True) == ["10.1.0.0/18", "10.0.0.0/20"]
    imported = ImportedNetwork(
        stack,
        "Imported",
        vpc_id="vpc-0abc1234",
        vpc_cidr="10.20.0.0/16",
        private_subnet_ids=["subnet-0abc1234"],
        security_group_id="sg-0abc1234",
        availability_zone="us-east-1a",
    )
    assert imported.node_subnet_cidrs(include_public=True) == ["10.20.0.0/16"]


def test_flow_logs_wired_to_their_log_group(default: Template) -> None:
    groups = resources(default, "AWS::Logs::LogGroup")
    assert len(groups) == 1
    (group_id, group), *_ = groups.items()
    assert group["Properties"]["RetentionInDays"] == 365
    assert group["DeletionPolicy"] == "RetainExceptOnCreate"
    default.has_resource_properties(
        "AWS::EC2::FlowLog",
        {
            "ResourceType": "VPC",
            "TrafficType": "ALL",
            "LogDestinationType": "cloud-watch-logs",
            "LogGroupName": {"Ref": group_id},
            "MaxAggregationInterval": 600,
        },
    )
    # The role may write exactly that group, nothing else.
    (policy,) = resources(default, "AWS::IAM::ManagedPolicy").values()
    statement = policy["Properties"]["PolicyDocument"]["Statement"]
    assert statement == [
        {
            "Action": ["logs:CreateLogStream", "logs:DescribeLogStreams", "logs:PutLogEvents"],
            "Effect": "Allow",
            "Resource": {"Fn::GetAtt": [group_id, "Arn"]},
        }
    ]
    (role,) = resources(default, "AWS::IAM::Role").values()
    trust = role["Properties"]["AssumeRolePolicyDocument"]["Statement"][0]
    assert trust["Principal"] == {"Service": "vpc-flow-logs.amazonaws.com"}
    assert "aws:SourceAccount" in trust["Condition"]["StringEquals"]


def test_security_group_self_rules_and_internet_egress(default: Template) -> None:
    (sg_id, sg), *_ = resources(default, "AWS::EC2::SecurityGroup").items()
    (egress,) = sg["Properties"]["SecurityGroupEgress"]
    assert (egress["CidrIp"], egress["IpProtocol"]) == ("0.0.0.0/0", "-1")
    assert egress["Description"]
    self_ref = {"Fn::GetAtt": [sg_id, "GroupId"]}
    default.has_resource_properties(
        "AWS::EC2::SecurityGroupIngress",
        {"IpProtocol": "-1", "GroupId": self_ref, "SourceSecurityGroupId": self_ref, "Description": Match.any_value()},
    )
    default.has_resource_properties(
        "AWS::EC2::SecurityGroupEgress",
        {
            "IpProtocol": "-1",
            "GroupId": self_ref,
            "DestinationSecurityGroupId": self_ref,
            "Description": Match.any_value(),
        },
    )


def test_outputs_exported_per_environment(default: Template) -> None:
    outputs = default.to_json()["Outputs"]
    exports = {o["Export"]["Name"] for o in outputs.values() if "Export" in o}
    assert {"dev-VpcId", "dev-PrivateSubnet1Id", "dev-PublicSubnetId", "dev-SecurityGroupId"} <= exports


def test_zone_by_id(make_env: MakeEnv) -> None:
    t = template(make_env, {"availability_zone_id": "use1-az4"})
    for subnet in resources(t, "AWS::EC2::Subnet").values():
        assert subnet["Properties"]["AvailabilityZoneId"] == "use1-az4"
        assert "AvailabilityZone" not in subnet["Properties"]


def test_secondary_cidr_holds_private_subnets(make_env: MakeEnv) -> None:
    t = template(
        make_env,
        {
            "availability_zone_id": "use1-az4",
            "secondary_cidr": "10.1.0.0/16",
            "extra_zones": [{"availability_zone_id": "use1-az6"}],
        },
    )
    (block_id, block), *_ = resources(t, "AWS::EC2::VPCCidrBlock").items()
    assert block["Properties"]["CidrBlock"] == "10.1.0.0/16"
    private = [s for s in resources(t, "AWS::EC2::Subnet").values() if s["Properties"]["CidrBlock"].startswith("10.1.")]
    assert sorted(s["Properties"]["CidrBlock"] for s in private) == ["10.1.0.0/18", "10.1.64.0/18"]
    assert all(block_id in s.get("DependsOn", []) for s in private)
    t.resource_count_is("AWS::EC2::NatGateway", 1)


def test_nat_per_zone(make_env: MakeEnv) -> None:
    t = template(
        make_env,
        {
            "availability_zone": "us-east-1a",
            "nat_gateways": "per_zone",
            "extra_zones": [{"availability_zone": "us-east-1b"}],
        },
    )
    t.resource_count_is("AWS::EC2::NatGateway", 2)
    t.resource_count_is("AWS::EC2::Subnet", 4)
    nat_routes = [
        r["Properties"]["NatGatewayId"]["Ref"]
        for r in resources(t, "AWS::EC2::Route").values()
        if "NatGatewayId" in r["Properties"]
    ]
    assert len(set(nat_routes)) == 2


def test_explicit_subnet_cidrs(make_env: MakeEnv) -> None:
    t = template(
        make_env,
        {
            "availability_zone": "us-east-1a",
            "public_subnet_cidr": "10.0.0.0/24",
            "private_subnet_cidr": "10.0.128.0/17",
        },
    )
    blocks = sorted(s["Properties"]["CidrBlock"] for s in resources(t, "AWS::EC2::Subnet").values())
    assert blocks == ["10.0.0.0/24", "10.0.128.0/17"]


def test_dynamodb_endpoint(make_env: MakeEnv) -> None:
    t = template(make_env, {"availability_zone": "us-east-1a", "dynamodb_endpoint": True})
    t.has_resource_properties(
        "AWS::EC2::VPCEndpoint", {"ServiceName": {"Fn::Sub": "com.amazonaws.${AWS::Region}.dynamodb"}}
    )


def test_flow_log_options_and_destroy_retention(make_env: MakeEnv) -> None:
    t = template(
        make_env,
        {
            "availability_zone": "us-east-1a",
            "flow_logs": {"traffic_type": "REJECT", "max_aggregation_interval_seconds": 60},
        },
        retention={"on_delete": "destroy", "log_retention_days": 30},
    )
    t.has_resource_properties("AWS::EC2::FlowLog", {"TrafficType": "REJECT", "MaxAggregationInterval": 60})
    (group,) = resources(t, "AWS::Logs::LogGroup").values()
    assert group["Properties"]["RetentionInDays"] == 30
    assert group["DeletionPolicy"] == "Delete"


def test_peering_routes_both_ways(make_env: MakeEnv) -> None:
    t = template(
        make_env,
        {
            "availability_zone": "us-east-1a",
            "secondary_cidr": "10.1.0.0/16",
            "peering": {
                "peer_vpc_id": "vpc-0abc1234",
                "peer_cidr": "172.31.0.0/16",
                "peer_route_table_ids": ["rtb-0aaa1111", "rtb-0bbb2222"],
            },
        },
    )
    (pcx_id, pcx), *_ = resources(t, "AWS::EC2::VPCPeeringConnection").items()
    assert pcx["Properties"]["PeerVpcId"] == "vpc-0abc1234"
    routes = [
        r["Properties"] for r in resources(t, "AWS::EC2::Route").values() if "VpcPeeringConnectionId" in r["Properties"]
    ]
    ours = [r for r in routes if r["DestinationCidrBlock"] == "172.31.0.0/16"]
    assert len(ours) == len(resources(t, "AWS::EC2::RouteTable"))
    theirs = {(r["RouteTableId"], r["DestinationCidrBlock"]) for r in routes if isinstance(r["RouteTableId"], str)}
    assert theirs == {
        (rtb, cidr) for rtb in ("rtb-0aaa1111", "rtb-0bbb2222") for cidr in ("10.0.0.0/16", "10.1.0.0/16")
    }
    assert all(r["VpcPeeringConnectionId"] == {"Ref": pcx_id} for r in routes)


def test_existing_network_creates_nothing(make_env: MakeEnv) -> None:
    t = template(
        make_env,
        {
            "availability_zone": "us-east-1a",
            "existing": {
                "vpc_id": "vpc-0abc1234",
                "vpc_cidr": "10.20.0.0/16",
                "private_subnet_ids": ["subnet-0abc1234", "subnet-0def5678"],
                "public_subnet_id": "subnet-0fff0000",
                "security_group_id": "sg-0abc1234",
            },
        },
    )
    # Only the record of what was imported (CloudFormation refuses a template without resources) and the
    # environment's log key, which every environment has.
    resources_made = {
        k: v
        for k, v in t.to_json()["Resources"].items()
        if v["Type"] != "AWS::CDK::Metadata" and not k.startswith("EnvironmentKey")
    }
    (record,) = resources_made.values()
    assert record["Type"] == "AWS::SSM::Parameter"
    assert json.loads(record["Properties"]["Value"])["vpc_id"] == "vpc-0abc1234"
    outputs = {k: v["Value"] for k, v in t.to_json()["Outputs"].items()}
    assert outputs["VpcId"] == "vpc-0abc1234"
    assert outputs["PrivateSubnet2Id"] == "subnet-0def5678"
    assert outputs["SecurityGroupId"] == "sg-0abc1234"


ERRORS = [
    ("no zone", {}, "give exactly one of availability_zone or availability_zone_id"),
    ("bad zone", {"availability_zone": "nowhere"}, "is not an AZ name"),
    ("bad zone id", {"availability_zone_id": "az4"}, "is not an AZ ID"),
    ("bad cidr", {"availability_zone": "us-east-1a", "cidr": "10.0.0.0"}, "must be a /16 to /24 block"),
    ("not cidr", {"availability_zone": "us-east-1a", "cidr": "ten"}, "not an IPv4 CIDR block"),
    ("overlap", {"availability_zone": "us-east-1a", "public_subnet_cidr": "10.0.64.0/24"}, "overlaps"),
    ("outside", {"availability_zone": "us-east-1a", "private_subnet_cidr": "10.9.0.0/24"}, "not inside the VPC"),
    ("nat", {"availability_zone": "us-east-1a", "nat_gateways": "many"}, "use 'one' or 'per_zone'"),
    ("interval", {"availability_zone": "us-east-1a", "flow_log_max_aggregation_interval_seconds": 5}, "use 60 or 600"),
    (
        "no room",
        {"availability_zone": "us-east-1a", "extra_zones": [Zone(availability_zone=f"us-east-1{z}") for z in "bcd"]},
        "add secondary_cidr",
    ),
]


@pytest.mark.parametrize(("props", "message"), [e[1:] for e in ERRORS], ids=[e[0] for e in ERRORS])
def test_construct_rejects_bad_props(props: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        ClusterNetwork(cdk.Stack(cdk.App(), "S"), "Network", **props)


@pytest.mark.parametrize(
    ("props", "message"),
    [
        ({"vpc_id": "vpc-1"}, "vpc_id: 'vpc-1' is not a valid ID"),
        ({"private_subnet_ids": []}, "give at least one private subnet"),
        ({"security_group_id": "sg"}, "security_group_id: 'sg'"),
        ({"vpc_cidr": "x"}, "vpc_cidr: 'x'"),
    ],
)
def test_imported_network_validates_ids(props: dict[str, Any], message: str) -> None:
    base = {
        "vpc_id": "vpc-0abc1234",
        "vpc_cidr": "10.0.0.0/16",
        "private_subnet_ids": ["subnet-0abc1234"],
        "security_group_id": "sg-0abc1234",
    }
    with pytest.raises(ValueError, match=message):
        ImportedNetwork(cdk.Stack(cdk.App(), "S"), "Network", **{**base, **props})

"""ClusterNetwork and ImportedNetwork: behaviour `make mutation MODULE=constructs-security` showed no test asserted.

tests/test_network.py checks most of this on a module fixture, which mutmut maps to the first test that builds
it only; each test here builds its own network, so every mutant of the constructs meets all of them.

- A zone error names the zone: ``primary zone`` or ``extra_zones[i]`` (``_plan_subnets`` mutants 4, 5).
- The S3 gateway endpoint: on every route table, with the whole policy (writes only to this account's
  buckets) written out (``__init__`` mutant 265, ``s3_endpoint_policy`` mutant 28); no DynamoDB endpoint unless
  asked (``__init__`` mutant 4).
- Logical ids are a contract (a changed one replaces the resource): the network's own resources (the
  secondary CIDR block, the flow log policy: mutants 91, 93, ``_flow_logs`` 63) and what a library user hangs
  on the VPC and subnets it hands out, whose ids derive from theirs (``Vpc``, ``Private<n>Ref``: mutants 329,
  330, 367, ``ImportedNetwork`` 66).
- The private subnets know their zone (mutant 357); the nodes' group is known to allow all outbound, so a
  consumer's rule from it adds no egress rule to it (``ClusterSecurityGroup`` mutant 99).
- A subnet pinned to a zone name is clean under cfn-lint (its W3010 is silenced on that subnet only:
  ``_subnet`` mutants 52, 60, 61); every acknowledgement the compliance report shows for the network is its
  finding with its reason (mutant 77).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import aws_cdk as cdk
import pytest
from aws_cdk import aws_ec2 as ec2
from aws_cdk.assertions import Template

from mlcluster.config.network import Peering, Zone
from mlcluster.constructs.network import ClusterNetwork, ImportedNetwork
from tests.support import cfn_lint
from tests.test_network import S3_ENDPOINT_POLICY

ENV = cdk.Environment(account="111111111111", region="us-east-1")


def network(**props: Any) -> tuple[cdk.Stack, ClusterNetwork]:
    stack = cdk.Stack(cdk.App(), "Net", env=ENV)
    return stack, ClusterNetwork(stack, "Network", **props)


def by_type(t: Template, kind: str) -> dict[str, Any]:
    return t.find_resources(kind)


@pytest.mark.parametrize(
    ("props", "message"),
    [
        ({}, r"^primary zone: give exactly one of availability_zone or availability_zone_id$"),
        (
            {"availability_zone": "us-east-1a", "extra_zones": [Zone(availability_zone="nowhere")]},
            r"^extra_zones\[0\]: availability_zone 'nowhere' is not an AZ name like 'us-east-1a'$",
        ),
        (
            {
                "availability_zone": "us-east-1a",
                "extra_zones": [Zone(availability_zone="us-east-1b"), Zone(availability_zone_id="az6")],
            },
            r"^extra_zones\[1\]: availability_zone_id 'az6' is not an AZ ID like 'use1-az4'$",
        ),
    ],
)
def test_a_zone_error_names_the_zone(props: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        network(**props)


def test_the_s3_endpoint_serves_every_route_table_and_writes_only_to_this_accounts_buckets() -> None:
    stack, _ = network(availability_zone="us-east-1a", extra_zones=[Zone(availability_zone="us-east-1b")])
    t = Template.from_stack(stack)
    (endpoint,) = by_type(t, "AWS::EC2::VPCEndpoint").values()  # no DynamoDB endpoint unless asked
    props = endpoint["Properties"]
    assert props["ServiceName"] == {"Fn::Sub": "com.amazonaws.${AWS::Region}.s3"}
    tables = sorted(by_type(t, "AWS::EC2::RouteTable"))
    assert len(tables) == 3  # the public subnet's and both private subnets'
    assert sorted(r["Ref"] for r in props["RouteTableIds"]) == tables
    assert props["PolicyDocument"] == S3_ENDPOINT_POLICY


def test_the_networks_resources_keep_their_logical_ids() -> None:
    """A changed logical id replaces the resource: a new CIDR block association (refused while the old one
    holds the block) or a new flow log policy. The whole set, written out: nothing added by default either."""
    stack, _ = network(availability_zone="us-east-1a", secondary_cidr="10.1.0.0/16")
    resources = {k: v["Type"] for k, v in Template.from_stack(stack).to_json()["Resources"].items()}
    assert resources == {
        "Network1C6012B5": "AWS::EC2::VPC",
        "NetworkSecondaryCidrB8AD81B7": "AWS::EC2::VPCCidrBlock",
        "NetworkInternetGatewayD8FF3F66": "AWS::EC2::InternetGateway",
        "NetworkInternetGatewayAttachment4FEFFDBC": "AWS::EC2::VPCGatewayAttachment",
        "NetworkPublic1Subnet2EC4E260": "AWS::EC2::Subnet",
        "NetworkPublic1RouteTable427BA52F": "AWS::EC2::RouteTable",
        "NetworkPublic1RouteTableAssociationB15EC17A": "AWS::EC2::SubnetRouteTableAssociation",
        "NetworkPublic1DefaultRouteE54D8095": "AWS::EC2::Route",
        "NetworkPublic1NatIpDD04E743": "AWS::EC2::EIP",
        "NetworkPublic1NatGateway847305B2": "AWS::EC2::NatGateway",
        "NetworkPrivate1SubnetA7C71D78": "AWS::EC2::Subnet",
        "NetworkPrivate1RouteTableCC181843": "AWS::EC2::RouteTable",
        "NetworkPrivate1RouteTableAssociation2AC9EE63": "AWS::EC2::SubnetRouteTableAssociation",
        "NetworkPrivate1DefaultRouteB87DC609": "AWS::EC2::Route",
        "NetworkS3Endpoint635CABAC": "AWS::EC2::VPCEndpoint",
        "NetworkFlowLogGroup4F8CEEEF": "AWS::Logs::LogGroup",
        "NetworkFlowLogRole4C0B2D1D": "AWS::IAM::Role",
        "NetworkFlowLogPolicyC5431858": "AWS::IAM::ManagedPolicy",
        "NetworkFlowLogC0B00A8E": "AWS::EC2::FlowLog",
        "NetworkSecurityGroup6335DB55": "AWS::EC2::SecurityGroup",
        "NetworkSecurityGroupSelfIngressB533DA1C": "AWS::EC2::SecurityGroupIngress",
        "NetworkSecurityGroupSelfEgressCD72E488": "AWS::EC2::SecurityGroupEgress",
    }


def test_what_a_user_adds_to_the_vpc_and_subnets_keeps_its_logical_id() -> None:
    """An endpoint added to ``network.vpc`` or a network ACL associated with a subnet is made inside that
    construct, so its logical id carries the construct's id: renaming ``Vpc`` or ``Private<n>Ref`` would
    replace the user's resources."""
    stack, net = network(availability_zone="us-east-1a", extra_zones=[Zone(availability_zone="us-east-1b")])
    net.vpc.add_gateway_endpoint("DynamoDb", service=ec2.GatewayVpcEndpointAwsService.DYNAMODB)
    acl = ec2.NetworkAcl(stack, "Acl", vpc=net.vpc)
    for subnet in net.private_subnets:
        subnet.associate_network_acl("Acl", acl)
    imported = ImportedNetwork(
        stack,
        "Imported",
        vpc_id="vpc-0abc1234",
        vpc_cidr="10.20.0.0/16",
        private_subnet_ids=["subnet-0abc1234"],
        security_group_id="sg-0abc1234",
        availability_zone="us-east-1a",
    )
    imported.vpc.add_interface_endpoint(
        "Ssm",
        service=ec2.InterfaceVpcEndpointAwsService.SSM,
        subnets=ec2.SubnetSelection(subnets=imported.private_subnets),
    )
    t = Template.from_stack(stack)
    assert sorted(by_type(t, "AWS::EC2::VPCEndpoint")) == [
        "ImportedVpcSsm797675F5",
        "NetworkS3Endpoint635CABAC",
        "NetworkVpcDynamoDbCF49C09B",
    ]
    assert sorted(by_type(t, "AWS::EC2::SubnetNetworkAclAssociation")) == [
        "AclAclNetNetworkPrivate1RefA131E095B92A508B",
        "AclAclNetNetworkPrivate2Ref0081B9F7184867C7",
    ]


def test_the_private_subnets_know_their_zone() -> None:
    """Consumers place file systems and nodes by the subnet's zone (``ISubnet.availability_zone``)."""
    stack, net = network(availability_zone="us-east-1a", extra_zones=[Zone(availability_zone_id="use1-az6")])
    t = Template.from_stack(stack)
    subnets = {v["Properties"]["CidrBlock"]: k for k, v in by_type(t, "AWS::EC2::Subnet").items()}
    for subnet in net.private_subnets:
        assert stack.resolve(subnet.availability_zone) == {
            "Fn::GetAtt": [subnets[subnet.ipv4_cidr_block], "AvailabilityZone"]
        }


def test_a_rule_from_the_nodes_group_adds_no_egress_rule_to_it() -> None:
    """The nodes' group already allows all traffic out (0.0.0.0/0): a consumer's ingress from it (a database,
    a file system) must not add egress rules to it, which would be written into the consumer's stack."""
    stack, net = network(availability_zone="us-east-1a")
    database = ec2.SecurityGroup(stack, "Database", vpc=net.vpc, allow_all_outbound=False)
    database.connections.allow_from(net.security_group, ec2.Port.tcp(3306), "MySQL from the nodes")
    assert net.security_group.allow_all_outbound is True
    t = Template.from_stack(stack)
    assert sorted(by_type(t, "AWS::EC2::SecurityGroupEgress")) == ["NetworkSecurityGroupSelfEgressCD72E488"]
    (ingress,) = [
        r["Properties"]
        for r in by_type(t, "AWS::EC2::SecurityGroupIngress").values()
        if r["Properties"].get("FromPort") == 3306
    ]
    assert ingress["SourceSecurityGroupId"] == {"Fn::GetAtt": ["NetworkSecurityGroup6335DB55", "GroupId"]}


def test_a_subnet_pinned_to_a_zone_name_is_clean_under_cfn_lint(tmp_path: Path) -> None:
    """cfn-lint's W3010 (hard-coded zone) is the design for a named zone: silenced on those subnets only."""
    app = cdk.App(outdir=str(tmp_path))
    stack = cdk.Stack(app, "Net", env=ENV)
    ClusterNetwork(stack, "Network", availability_zone="us-east-1a")
    app.synth()
    template = tmp_path / "Net.template.json"
    subnets = [r for r in json.loads(template.read_text())["Resources"].values() if r["Type"] == "AWS::EC2::Subnet"]
    assert len(subnets) == 2
    for subnet in subnets:
        assert subnet["Metadata"]["cfn-lint"] == {"config": {"ignore_checks": ["W3010"]}}
    assert cfn_lint([template]) == {str(template): []}


def acknowledged(outdir: Path) -> dict[str, dict[str, str]]:
    """Every acknowledgement in the assembly, as the compliance report shows it: path -> finding -> reason."""
    found: dict[str, dict[str, str]] = {}
    for metadata in outdir.glob("*.metadata.json"):
        for path, entries in json.loads(metadata.read_text()).items():
            for entry in entries:
                if entry["type"] == "aws:cdk:acknowledged-rules":
                    found.setdefault(path, {}).update(
                        {k.removeprefix("Annotation::"): v for k, v in entry["data"].items()}
                    )
    return found


PACKS = ("NIST.800.53.R5", "HIPAA.Security", "PCI.DSS.321")


def test_every_acknowledgement_of_the_network_is_its_finding_with_its_reason(tmp_path: Path) -> None:
    """What a reviewer reads in the compliance report for the network: each acknowledged finding, once per
    pack that has it, with the reason specific to that resource (written out: a changed word is seen)."""
    app = cdk.App(outdir=str(tmp_path))
    stack = cdk.Stack(app, "Net", env=ENV)
    ClusterNetwork(stack, "Network", availability_zone="us-east-1a")
    app.synth()
    zone = "The zone is pinned on purpose: capacity reservations, FSx and the nodes must share one named zone."
    assert acknowledged(tmp_path) == {
        "/Net/Network/Resource": dict.fromkeys(
            (f"{pack}-VPCDefaultSecurityGroupClosed" for pack in PACKS),
            "Nothing mlcluster creates uses the VPC's default security group: nodes and file systems use the "
            "cluster security group. Closing it would need a custom resource Lambda in every environment.",
        ),
        "/Net/Network/Public1Subnet": {"CloudFormation-Validate::W3010": zone},
        "/Net/Network/Private1Subnet": {"CloudFormation-Validate::W3010": zone},
        "/Net/Network/Public1DefaultRoute": dict.fromkeys(
            (f"{pack}-VPCNoUnrestrictedRouteToIGW" for pack in PACKS),
            "The public subnet's default route is how its NAT gateway reaches the internet (and a public head "
            "node's Elastic IP, or internet-facing login nodes' public IPs, when the file asks for them); "
            "nodes sit in the private subnets behind NAT by default.",
        ),
        "/Net/Network/SecurityGroup/SelfIngress": dict.fromkeys(
            (f"{pack}-EC2RestrictedCommonPorts" for pack in PACKS),
            "The source is this security group itself, not an address range: only cluster members reach these "
            "ports, and EFA requires all-traffic self ingress.",
        ),
    }


def test_the_internet_gateway_is_attached_to_this_vpc() -> None:
    """The public default routes and the NAT gateways need the gateway attached to this VPC: the attachment
    whole, the gateway and the VPC by their logical ids (``__init__`` mutant 107 of the second sample)."""
    stack, _ = network(availability_zone="us-east-1a")
    attachments = by_type(Template.from_stack(stack), "AWS::EC2::VPCGatewayAttachment")
    assert attachments == {
        "NetworkInternetGatewayAttachment4FEFFDBC": {
            "Type": "AWS::EC2::VPCGatewayAttachment",
            "Properties": {
                "InternetGatewayId": {"Ref": "NetworkInternetGatewayD8FF3F66"},
                "VpcId": {"Ref": "Network1C6012B5"},
            },
        }
    }


def test_the_dynamodb_endpoint_is_a_gateway_on_every_route_table_under_its_logical_id() -> None:
    """``dynamodb_endpoint=True``: one gateway endpoint (CloudFormation's VpcEndpointType is the enum
    Interface | Gateway | GatewayLoadBalancer, case and all) on both route tables. Its logical id is the
    contract with the deployed stack: a new one replaces the endpoint, cutting DynamoDB traffic while the
    route tables switch (mutants 291, 298 of the second sample)."""
    stack, _ = network(availability_zone="us-east-1a", dynamodb_endpoint=True)
    endpoints = by_type(Template.from_stack(stack), "AWS::EC2::VPCEndpoint")
    assert sorted(endpoints) == ["NetworkDynamoDbEndpoint06D7F403", "NetworkS3Endpoint635CABAC"]
    assert endpoints["NetworkDynamoDbEndpoint06D7F403"] == {
        "Type": "AWS::EC2::VPCEndpoint",
        "Properties": {
            "RouteTableIds": [
                {"Ref": "NetworkPublic1RouteTable427BA52F"},
                {"Ref": "NetworkPrivate1RouteTableCC181843"},
            ],
            "ServiceName": {"Fn::Sub": "com.amazonaws.${AWS::Region}.dynamodb"},
            "VpcEndpointType": "Gateway",
            "VpcId": {"Ref": "Network1C6012B5"},
        },
    }


def test_the_cluster_group_and_its_self_rules_are_exactly_these() -> None:
    """The nodes' group and its two self rules, whole. A rule's ``Description`` is what the console and
    ``describe-security-group-rules`` show an operator auditing the group; the group's own description is
    create-only (a change replaces the group every node and file system is in) (``ClusterSecurityGroup``
    mutant 86 of the second sample)."""
    stack, _ = network(availability_zone="us-east-1a")
    t = Template.from_stack(stack)
    group = {"Fn::GetAtt": ["NetworkSecurityGroup6335DB55", "GroupId"]}
    assert by_type(t, "AWS::EC2::SecurityGroup") == {
        "NetworkSecurityGroup6335DB55": {
            "Type": "AWS::EC2::SecurityGroup",
            "Properties": {
                "GroupDescription": "mlcluster nodes and file systems: all traffic within the group (EFA, Slurm, Lustre)",
                "SecurityGroupEgress": [
                    {
                        "CidrIp": "0.0.0.0/0",
                        "Description": "Outbound to the internet through NAT: packages, AWS APIs",
                        "IpProtocol": "-1",
                    }
                ],
                "VpcId": {"Ref": "Network1C6012B5"},
            },
        }
    }
    assert by_type(t, "AWS::EC2::SecurityGroupIngress") == {
        "NetworkSecurityGroupSelfIngressB533DA1C": {
            "Type": "AWS::EC2::SecurityGroupIngress",
            "Properties": {
                "Description": "All traffic from cluster members (EFA, Slurm, Lustre, NFS)",
                "GroupId": group,
                "IpProtocol": "-1",
                "SourceSecurityGroupId": group,
            },
        }
    }
    assert by_type(t, "AWS::EC2::SecurityGroupEgress") == {
        "NetworkSecurityGroupSelfEgressCD72E488": {
            "Type": "AWS::EC2::SecurityGroupEgress",
            "Properties": {
                "Description": "All traffic to cluster members (EFA requires self egress)",
                "DestinationSecurityGroupId": group,
                "GroupId": group,
                "IpProtocol": "-1",
            },
        }
    }


def test_a_bad_peer_route_table_id_is_refused_naming_the_key_and_the_form() -> None:
    """The operator reads which peering key holds the bad value and the form allowed (``_peer`` mutant 7)."""
    stack = cdk.Stack(cdk.App(), "Net", env=ENV)
    peering = Peering(peer_vpc_id="vpc-0abc1234", peer_cidr="10.9.0.0/16", peer_route_table_ids=("rtb-NOPE",))
    with pytest.raises(ValueError) as caught:
        ClusterNetwork(stack, "Network", availability_zone="us-east-1a", peering=peering)
    assert str(caught.value) == (
        "peer_route_table_ids: 'rtb-NOPE' is not a valid ID; expected the form rtb-[0-9a-f]{8,17}"
    )


def test_public_ips_on_launch_are_acknowledged_with_the_login_nodes_reason(tmp_path: Path) -> None:
    """``public_ip_on_launch``: the public subnet maps public IPs, and the compliance report shows why, word for
    word, on that subnet alone (``_subnet`` mutant 45 of the second sample)."""
    app = cdk.App(outdir=str(tmp_path))
    stack = cdk.Stack(app, "Net", env=ENV)
    ClusterNetwork(stack, "Network", availability_zone_id="use1-az4", public_ip_on_launch=True)
    app.synth()
    reason = (
        "The file asks for internet-facing ParallelCluster login nodes: they sit in this subnet behind an "
        "internet-facing load balancer, and ParallelCluster's launch template gives them no public IP, "
        "their only way out here. The private subnets map none."
    )
    found = acknowledged(tmp_path)
    assert found["/Net/Network/Public1Subnet"] == dict.fromkeys(
        (f"{pack}-VPCSubnetAutoAssignPublicIpDisabled" for pack in PACKS), reason
    )
    assert "/Net/Network/Private1Subnet" not in found


def test_what_a_user_hangs_on_imported_subnets_keeps_its_logical_id() -> None:
    """An imported network's subnets are ``Private1Ref``, ``Private2Ref``..., like ClusterNetwork's: a network
    ACL associated with them is made with the subnet's id in its logical id, so a renumbering would replace
    the user's associations (``ImportedNetwork`` mutant 79 of the second sample)."""
    stack = cdk.Stack(cdk.App(), "Net", env=ENV)
    imported = ImportedNetwork(
        stack,
        "Imported",
        vpc_id="vpc-0abc1234",
        vpc_cidr="10.20.0.0/16",
        private_subnet_ids=["subnet-0abc1234", "subnet-0abc1235"],
        security_group_id="sg-0abc1234",
        availability_zone="us-east-1a",
    )
    acl = ec2.NetworkAcl(stack, "Acl", vpc=imported.vpc)
    for subnet in imported.private_subnets:
        subnet.associate_network_acl("Acl", acl)
    associations = by_type(Template.from_stack(stack), "AWS::EC2::SubnetNetworkAclAssociation")
    assert {k: v["Properties"]["SubnetId"] for k, v in associations.items()} == {
        "AclAclNetImportedPrivate1Ref6BB84925C770E9AB": "subnet-0abc1234",
        "AclAclNetImportedPrivate2RefB3C658E1ABD4D5FB": "subnet-0abc1235",
    }

"""The reachability gate (mlcluster/analysis/reachability.py) on one small hand-built network.

Behaviour `make mutation` showed no test asserted, each on the smallest template that shows it: a
route listed before the default route, a public subnet without a public IP, an EFA file system's
egress, a file system without security groups or subnets, a head node that mounts OpenZFS, a pool
or queue without subnets, rules that admit a prefix list or name no protocol (the "nothing wider"
checks), and the accounting database's rotation function.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from mlcluster.analysis.assembly import Assembly
from mlcluster.analysis.reachability import (
    check_environment,
    database_problems,
    databases,
    exporter_problems,
    rotation_functions,
)

ENV = "env"
STACK = f"{ENV}/Net"


def ref(name: str) -> dict[str, str]:
    return {"Ref": name}


def group_id(name: str) -> dict[str, list[str]]:
    return {"Fn::GetAtt": [name, "GroupId"]}


def _resource(kind: str, **properties: Any) -> dict[str, Any]:
    return {"Type": kind, "Properties": properties}


#: A VPC with a public subnet (default route to the attached internet gateway, a NAT gateway with an Elastic
#: IP) and a private subnet in the same zone (default route to the NAT), and a node group with EC2's default
#: allow-all egress: every path proved, nothing else.
NETWORK: dict[str, Any] = {
    "Vpc": _resource("AWS::EC2::VPC", CidrBlock="10.0.0.0/16"),
    "Igw": _resource("AWS::EC2::InternetGateway"),
    "Attach": _resource("AWS::EC2::VPCGatewayAttachment", VpcId=ref("Vpc"), InternetGatewayId=ref("Igw")),
    "Public": _resource("AWS::EC2::Subnet", VpcId=ref("Vpc"), CidrBlock="10.0.0.0/24", AvailabilityZone="az1"),
    "PublicTable": _resource("AWS::EC2::RouteTable", VpcId=ref("Vpc")),
    "PublicAssoc": _resource(
        "AWS::EC2::SubnetRouteTableAssociation", SubnetId=ref("Public"), RouteTableId=ref("PublicTable")
    ),
    "PublicDefault": _resource(
        "AWS::EC2::Route", RouteTableId=ref("PublicTable"), DestinationCidrBlock="0.0.0.0/0", GatewayId=ref("Igw")
    ),
    "Eip": _resource("AWS::EC2::EIP"),
    "Nat": _resource(
        "AWS::EC2::NatGateway", SubnetId=ref("Public"), AllocationId={"Fn::GetAtt": ["Eip", "AllocationId"]}
    ),
    "Private": _resource("AWS::EC2::Subnet", VpcId=ref("Vpc"), CidrBlock="10.0.1.0/24", AvailabilityZone="az1"),
    "PrivateTable": _resource("AWS::EC2::RouteTable", VpcId=ref("Vpc")),
    "PrivateAssoc": _resource(
        "AWS::EC2::SubnetRouteTableAssociation", SubnetId=ref("Private"), RouteTableId=ref("PrivateTable")
    ),
    "PrivateDefault": _resource(
        "AWS::EC2::Route", RouteTableId=ref("PrivateTable"), DestinationCidrBlock="0.0.0.0/0", NatGatewayId=ref("Nat")
    ),
    "Nodes": _resource("AWS::EC2::SecurityGroup", GroupDescription="nodes"),
}


def hyperpod(*groups: tuple[str, str, str], **resources: Any) -> Assembly:
    """A HyperPod cluster of instance groups (name, subnet, security group; the first is the controller)."""
    cluster = _resource(
        "AWS::SageMaker::Cluster",
        VpcConfig={"Subnets": [ref("Private")], "SecurityGroupIds": [group_id("Nodes")]},
        InstanceGroups=[
            {
                "InstanceGroupName": name,
                "OverrideVpcConfig": {"Subnets": [ref(subnet)], "SecurityGroupIds": [group_id(sg)]},
            }
            for name, subnet, sg in groups
        ],
    )
    return Assembly({STACK: {"Resources": {**copy.deepcopy(NETWORK), "Cluster": cluster, **resources}}})


def pcluster(config: dict[str, Any], **resources: Any) -> Assembly:
    cluster = _resource("Custom::PclusterCluster", ClusterConfiguration=config)
    return Assembly({STACK: {"Resources": {**copy.deepcopy(NETWORK), "Cluster": cluster, **resources}}})


def rule(kind: str, group: str, protocol: str | None, low: int, high: int, **peer: Any) -> dict[str, Any]:
    """A stand-alone ingress or egress rule of ``group`` (``protocol`` None: the property left out)."""
    props: dict[str, Any] = {"GroupId": group_id(group), "FromPort": low, "ToPort": high, **peer}
    if protocol is not None:
        props["IpProtocol"] = protocol
    return _resource(f"AWS::EC2::SecurityGroup{kind}", **props)


def lustre(**properties: Any) -> dict[str, Any]:
    return _resource("AWS::FSx::FileSystem", FileSystemType="LUSTRE", **properties)


FS = "lustre file system ${env/Net|Fs}"
WHERE = "env: instance group workers"


def test_a_route_before_the_default_route_does_not_hide_it() -> None:
    """The private table's first route is to a peered VPC; its default route to the NAT is still found."""
    peering = _resource(
        "AWS::EC2::Route",
        RouteTableId=ref("PrivateTable"),
        DestinationCidrBlock="10.2.0.0/16",
        VpcPeeringConnectionId="pcx-0123",
    )
    resources = hyperpod(("workers", "Private", "Nodes")).templates[STACK]["Resources"]
    report = check_environment(Assembly({STACK: {"Resources": {"Peering": peering, **resources}}}), ENV)
    assert report.problems == []
    assert report.paths["instance group workers"] == {"internet": "NAT", "s3": "NAT"}


def test_a_node_in_a_public_subnet_without_a_public_ip_is_told_which_settings_give_one() -> None:
    report = check_environment(hyperpod(("workers", "Public", "Nodes")), ENV)
    assert report.problems == [
        f"{WHERE}: no way to the internet: subnet ${{env/Net|Public}} routes to an internet gateway but the node "
        "gets no public IP (MapPublicIpOnLaunch is false and no ElasticIp/AssignPublicIp): it reaches only the VPC "
        "and its gateway endpoints",
        f"{WHERE}: cannot reach S3: no S3 gateway endpoint on the route table of ${{env/Net|Public}} and no way to "
        "the internet",
    ]


def test_an_efa_file_system_must_send_all_traffic_to_the_nodes_groups() -> None:
    """EFA-enabled Lustre: all traffic out of its groups to the nodes' groups (an address range is not enough)."""
    assembly = hyperpod(
        ("workers", "Private", "Nodes"),
        FsGroup=_resource("AWS::EC2::SecurityGroup", GroupDescription="fs", SecurityGroupEgress=[]),
        Fs=lustre(
            SubnetIds=[ref("Private")],
            SecurityGroupIds=[group_id("FsGroup")],
            LustreConfiguration={"EfaEnabled": True},
        ),
        FromNodes=rule("Ingress", "FsGroup", "-1", -1, -1, SourceSecurityGroupId=group_id("Nodes")),
        FromSelf=rule("Ingress", "FsGroup", "-1", -1, -1, SourceSecurityGroupId=group_id("FsGroup")),
        ToSubnet=rule("Egress", "FsGroup", "-1", -1, -1, CidrIp="10.0.1.0/24"),
    )
    assert check_environment(assembly, ENV).problems == [
        f"{WHERE}: EFA-enabled {FS}'s groups do not send all traffic to the nodes"
    ]


def test_a_file_system_without_security_groups_admits_no_node() -> None:
    """SecurityGroupIds is optional on AWS::FSx::FileSystem (the VPC's default group): none of ours admits."""
    assembly = hyperpod(("workers", "Private", "Nodes"), Fs=lustre(SubnetIds=[ref("Private")]))
    problems = check_environment(assembly, ENV).problems
    for label in ("TCP 988", "TCP 1018-1023"):
        assert f"{WHERE}: {FS}'s security groups admit no {label} from the node's groups or subnets" in problems


def test_a_file_system_that_names_no_subnet_is_reported_not_a_crash() -> None:
    """A Lustre file system without SubnetIds has no zone: every node subnet is reported as in another zone."""
    assembly = hyperpod(("workers", "Private", "Nodes"), Fs=lustre(SecurityGroupIds=[group_id("Nodes")]))
    problems = check_environment(assembly, ENV).problems
    assert (
        f"{WHERE}: subnet ${{env/Net|Private}} is in zone 'az1', {FS} in []: every I/O would cross zones (EFA does not)"
    ) in problems


def test_the_head_node_is_checked_against_the_openzfs_file_system_it_mounts() -> None:
    config = {
        "SharedStorage": [{"StorageType": "FsxOpenZfs"}],
        "HeadNode": {"Networking": {"SubnetId": ref("Private"), "SecurityGroups": [group_id("Nodes")]}},
    }
    zfs = _resource(
        "AWS::FSx::FileSystem",
        FileSystemType="OPENZFS",
        SubnetIds=[ref("Private")],
        SecurityGroupIds=[group_id("Nodes")],
        OpenZFSConfiguration={
            "RootVolumeConfiguration": {"NfsExports": [{"ClientConfigurations": [{"Clients": "10.9.0.0/16"}]}]}
        },
    )
    problems = check_environment(pcluster(config, Zfs=zfs), ENV).problems
    assert (
        "env: head node: openzfs file system ${env/Net|Zfs} exports /home to ['10.9.0.0/16'], not to subnet 10.0.1.0/24"
    ) in problems


def test_a_login_pool_or_queue_without_subnets_is_reported() -> None:
    config = {
        "HeadNode": {"Networking": {"SubnetId": ref("Private")}},
        "LoginNodes": {"Pools": [{"Name": "login", "Networking": {}}]},
        "Scheduling": {"SlurmQueues": [{"Name": "gpu", "Networking": {}}]},
    }
    problems = check_environment(pcluster(config), ENV).problems
    assert problems == ["env: login pool login: no subnet", "env: queue gpu: no subnet"]


def test_a_head_node_without_networking_stops_the_gate_on_its_subnet() -> None:
    """ParallelCluster requires HeadNode.Networking.SubnetId; the gate cannot place the head node without it and
    stops naming the missing key."""
    with pytest.raises(KeyError, match="SubnetId"):
        check_environment(pcluster({"HeadNode": {}}), ENV)


@pytest.mark.parametrize(
    ("protocol", "peer", "shown"),
    [
        ("tcp", {"SourcePrefixListId": "pl-0123"}, "pl-0123"),
        # IpProtocol is required; a rule without it is read as EC2's -1 (every protocol), never as narrower.
        (None, {"CidrIp": "10.0.0.0/16"}, "10.0.0.0/16"),
    ],
)
def test_an_exporter_port_open_to_an_address_range_is_wider_than_the_cluster(
    protocol: str | None, peer: dict[str, str], shown: str
) -> None:
    assembly = hyperpod(
        ("controller", "Private", "Nodes"),
        ("workers", "Private", "Workers"),
        Workers=_resource("AWS::EC2::SecurityGroup", GroupDescription="workers"),
        Scrape=rule("Ingress", "Workers", "tcp", 9100, 9100, SourceSecurityGroupId=group_id("Nodes")),
        Wide=rule("Ingress", "Workers", protocol, 9100, 9100, **peer),
    )
    assert exporter_problems(assembly, ENV, "instance group controller", [9100]) == [
        f"env: security group ${{env/Net|Workers}} admits port 9100 from {shown}, wider than the cluster's own "
        "security groups"
    ]


def test_the_rotation_function_must_reach_secrets_manager_and_the_database() -> None:
    """CDK's single-user rotation application runs in the VPC: with no egress it reaches neither."""
    assembly = hyperpod(
        ("controller", "Private", "Nodes"),
        Private2=_resource("AWS::EC2::Subnet", VpcId=ref("Vpc"), CidrBlock="10.0.2.0/24", AvailabilityZone="az2"),
        DbSubnets=_resource("AWS::RDS::DBSubnetGroup", SubnetIds=[ref("Private"), ref("Private2")]),
        DbGroup=_resource("AWS::EC2::SecurityGroup", GroupDescription="db", SecurityGroupEgress=[]),
        Db=_resource(
            "AWS::RDS::DBCluster", DBSubnetGroupName=ref("DbSubnets"), VpcSecurityGroupIds=[group_id("DbGroup")]
        ),
        RotationGroup=_resource("AWS::EC2::SecurityGroup", GroupDescription="rotation", SecurityGroupEgress=[]),
        Rotation=_resource(
            "AWS::Serverless::Application",
            Parameters={"vpcSecurityGroupIds": group_id("RotationGroup"), "vpcSubnetIds": ref("Private")},
        ),
    )
    name = "env: accounting database ${env/Net|Db}"
    rotation = "rotation function ${env/Net|Rotation}"
    assert database_problems(assembly, ENV, []) == [
        f"{name}: no security group of {rotation} lets TCP 3306 out to it",
        f"{name}: its security groups admit no TCP 3306 from {rotation}'s groups",
        f"env: {rotation}: no security group lets HTTPS out to Secrets Manager",
    ]


@pytest.mark.parametrize(
    ("parameters", "subnets"),
    [
        (
            {"vpcSubnetIds": {"Fn::Join": [",", [ref("Private"), ref("Public")]]}},
            ("${env/Net|Private}", "${env/Net|Public}"),
        ),
        ({}, ()),  # no subnets given: none, not a subnet named "None"
    ],
)
def test_a_rotation_function_runs_in_the_subnets_its_parameters_list(
    parameters: dict[str, Any], subnets: tuple[str, ...]
) -> None:
    assembly = hyperpod(
        ("controller", "Private", "Nodes"),
        Rotation=_resource("AWS::Serverless::Application", Parameters={"vpcSecurityGroupIds": "", **parameters}),
        Other=_resource("AWS::Serverless::Application", Parameters={"vpcSubnetIds": ref("Private")}),
    )
    (function,) = rotation_functions(assembly, ENV)  # an application without security groups is no VPC function
    assert function.subnets == subnets
    assert function.security_groups == ()


def test_a_default_route_to_a_transit_gateway_is_named_as_such() -> None:
    """``_Network.default_target`` mutant 25 (seed 4): a transit gateway is a default route's target like a NAT;
    the gate names it, rather than saying the table has no default route."""
    resources = hyperpod(("workers", "Private", "Nodes")).templates[STACK]["Resources"]
    resources["Tgw"] = _resource("AWS::EC2::TransitGateway")
    resources["PrivateDefault"] = _resource(
        "AWS::EC2::Route",
        RouteTableId=ref("PrivateTable"),
        DestinationCidrBlock="0.0.0.0/0",
        TransitGatewayId=ref("Tgw"),
    )
    report = check_environment(Assembly({STACK: {"Resources": resources}}), ENV)
    assert report.problems == [
        "env: instance group workers: no way to the internet: subnet ${env/Net|Private} default route goes to "
        "AWS::EC2::TransitGateway ${env/Net|Tgw}, not to a NAT or attached internet gateway",
        "env: instance group workers: cannot reach S3: no S3 gateway endpoint on the route table of "
        "${env/Net|Private} and no way to the internet",
    ]


def test_a_database_without_a_subnet_group_has_no_subnets_and_a_group_without_rules_admits_nothing() -> None:
    """``databases`` mutant 26 and ``database_problems`` mutant 32 (seed 4): an Aurora cluster written without
    DBSubnetGroupName, whose security groups have no ingress rule (one made outside the assembly), is reported,
    not a crash."""
    assembly = hyperpod(
        ("controller", "Private", "Nodes"),
        DbGroup=_resource("AWS::EC2::SecurityGroup", GroupDescription="db", SecurityGroupEgress=[]),
        # A group of the assembly without rules, and one made elsewhere (no rules of it here at all).
        Db=_resource("AWS::RDS::DBCluster", VpcSecurityGroupIds=[group_id("DbGroup"), "sg-0123456789abcdef0"]),
    )
    (database,) = databases(assembly, ENV)
    assert database.subnets == ()
    (controller,) = check_environment(assembly, ENV).groups
    name = "env: accounting database ${env/Net|Db}"
    assert database_problems(assembly, ENV, [controller]) == [
        f"{name}: its subnet group has 0 subnet(s); Aurora needs two zones",
        f"{name}: no security group of instance group controller lets TCP 3306 out to it",
        f"{name}: its security groups admit no TCP 3306 from instance group controller's groups",
    ]


def test_a_queue_is_an_efa_group_when_a_compute_resource_enables_efa() -> None:
    """``_pcluster_groups`` mutant 206 of the seed-3 sample: the flag the environment pictures draw
    (tools/environment_pictures.py), per queue; every HyperPod group is one."""
    queue = {"Networking": {"SubnetIds": [ref("Private")], "SecurityGroups": [group_id("Nodes")]}}
    config = {
        "HeadNode": {"Networking": {"SubnetId": ref("Private"), "SecurityGroups": [group_id("Nodes")]}},
        "Scheduling": {
            "SlurmQueues": [
                {"Name": "gpu", **queue, "ComputeResources": [{"Name": "a"}, {"Name": "b", "Efa": {"Enabled": True}}]},
                {"Name": "cpu", **queue, "ComputeResources": [{"Name": "c", "Efa": {"Enabled": False}}]},
            ]
        },
    }
    groups = {g.name: g.efa for g in check_environment(pcluster(config), ENV).groups}
    assert groups == {"head node": False, "queue gpu": True, "queue cpu": False}
    assert [g.efa for g in check_environment(hyperpod(("workers", "Private", "Nodes")), ENV).groups] == [True]

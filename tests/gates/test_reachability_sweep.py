"""The reachability gate (mlcluster/analysis/reachability.py): whole reports on small hand-built networks.

Each test compares the complete list of problems (the text the operator reads when the gate fails), the
paths it proved, or the node groups and file systems it read, so that a change to any rule, reason or
label shows. The network: a public subnet (default route to the attached internet gateway, a NAT gateway
with an Elastic IP) in zone az1 and a private subnet (default route to the NAT) in zone az1 too.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from mlcluster.analysis.assembly import Assembly
from mlcluster.analysis.reachability import (
    ADMITS_NODE_GROUP,
    FileSystem,
    NodeGroup,
    Rule,
    _covers,
    _is_cidr_peer,
    _Network,
    check_assembly,
    check_environment,
    database_problems,
    exporter_problems,
    file_systems,
    node_groups,
)
from tests.gates.test_reachability_kills import ENV, STACK, ref
from tests.gates.test_reachability_kills import NETWORK as KILLS_NETWORK
from tests.gates.test_reachability_kills import _resource as res
from tests.gates.test_reachability_kills import group_id as gid


def sg(*, ingress: list[dict[str, Any]] | None = None, egress: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """A security group; ``egress`` None leaves the property out (EC2's default allow-all egress)."""
    props: dict[str, Any] = {"GroupDescription": "g", "SecurityGroupIngress": ingress or []}
    if egress is not None:
        props["SecurityGroupEgress"] = egress
    return res("AWS::EC2::SecurityGroup", **props)


def tcp(low: int, high: int | None = None, **peer: Any) -> dict[str, Any]:
    return {"IpProtocol": "tcp", "FromPort": low, "ToPort": low if high is None else high, **peer}


#: The kill tests' network, its node group written with this module's ``sg`` (no rules, default egress).
NETWORK: dict[str, Any] = {**KILLS_NETWORK, "Nodes": sg()}


def assembly(config: dict[str, Any] | None = None, **resources: Any) -> Assembly:
    """The network, a ParallelCluster cluster of ``config`` (when given) and ``resources`` (replacing by name)."""
    body = {**copy.deepcopy(NETWORK), **resources}
    if config is not None:
        body["Cluster"] = res("Custom::PclusterCluster", ClusterConfiguration=config)
    return Assembly({STACK: {"Resources": body}})


def head(subnet: str = "Private", **networking: Any) -> dict[str, Any]:
    return {"HeadNode": {"Networking": {"SubnetId": ref(subnet), "SecurityGroups": [gid("Nodes")], **networking}}}


def test_parallelcluster_node_groups_are_read_with_their_networking() -> None:
    """Head node, each login pool and each queue: subnets, groups (``SecurityGroups`` replaces ParallelCluster's
    own all-egress groups, ``AdditionalSecurityGroups`` adds to them), public IP, EFA and the OpenZFS mount."""
    config = {
        "SharedStorage": [{"StorageType": "FsxLustre"}, {"StorageType": "FsxOpenZfs"}],
        "HeadNode": {"Networking": {"SubnetId": "s-h", "AdditionalSecurityGroups": ["g1"], "ElasticIp": "true"}},
        "LoginNodes": {
            "Pools": [{"Name": "lp", "Networking": {"SubnetIds": ["s-l"], "SecurityGroups": ["g2"]}}, {"Name": "bare"}]
        },
        "Scheduling": {
            "SlurmQueues": [
                {
                    "Name": "gpu",
                    "Networking": {"SubnetIds": ["s-q", "s-r"], "AssignPublicIp": "true", "SecurityGroups": []},
                    "ComputeResources": [{"Efa": {"Enabled": False}}, {"Efa": {"Enabled": True}}],
                },
                {"Name": "cpu", "Networking": {"AssignPublicIp": True}, "ComputeResources": [{}]},
                {"Name": "off", "Networking": {"AssignPublicIp": "false"}},
            ]
        },
    }
    cluster = res("Custom::PclusterCluster", ClusterConfiguration=config)
    found = node_groups(Assembly({STACK: {"Resources": {"C": cluster}}}), ENV)
    assert found == [
        NodeGroup(
            ENV, "pcluster", "head node", ("s-h",), ("g1",), managed_egress=True, public_ip=True, mounts_openzfs=True
        ),
        NodeGroup(ENV, "pcluster", "login pool lp", ("s-l",), ("g2",), managed_egress=False, mounts_openzfs=True),
        NodeGroup(ENV, "pcluster", "login pool bare", (), (), managed_egress=True, mounts_openzfs=True),
        NodeGroup(
            ENV,
            "pcluster",
            "queue gpu",
            ("s-q", "s-r"),
            (),
            managed_egress=True,
            public_ip=True,
            efa=True,
            mounts_openzfs=True,
        ),
        NodeGroup(ENV, "pcluster", "queue cpu", (), (), managed_egress=True, public_ip=True, mounts_openzfs=True),
        NodeGroup(ENV, "pcluster", "queue off", (), (), managed_egress=True, mounts_openzfs=True),
    ]


@pytest.mark.parametrize(
    ("elastic", "public"), [(False, False), ("false", False), (None, False), (True, True), ("eipalloc-1", True)]
)
def test_the_head_nodes_elastic_ip_setting(elastic: object, public: bool) -> None:
    """``ElasticIp`` false (any spelling) or null gives no public IP; true or an allocation id gives one; no
    OpenZFS mount without that storage."""
    config = {
        "HeadNode": {"Networking": {"SubnetId": "s", "ElasticIp": elastic}},
        "SharedStorage": [{"StorageType": "FsxLustre"}],
    }
    cluster = res("Custom::PclusterCluster", ClusterConfiguration=config)
    (group,) = node_groups(Assembly({STACK: {"Resources": {"C": cluster}}}), ENV)
    assert (group.public_ip, group.mounts_openzfs) == (public, False)


def _hyperpod(groups: list[dict[str, Any]]) -> list[NodeGroup]:
    spec = res(
        "AWS::SageMaker::Cluster", VpcConfig={"Subnets": ["s-v"], "SecurityGroupIds": ["g-v"]}, InstanceGroups=groups
    )
    return node_groups(Assembly({STACK: {"Resources": {"H": spec}}}), ENV)


def test_hyperpod_groups_use_their_override_and_the_first_is_the_controller_without_node_types() -> None:
    """Every group is EFA; an ``OverrideVpcConfig`` replaces the cluster's VpcConfig; without any NodeType the
    first group runs slurmctld."""
    assert _hyperpod(
        [
            {"InstanceGroupName": "a"},
            {"InstanceGroupName": "b", "OverrideVpcConfig": {"Subnets": ["s-o"], "SecurityGroupIds": ["g-o"]}},
            {"InstanceGroupName": "c", "OverrideVpcConfig": {}},
        ]
    ) == [
        NodeGroup(ENV, "hyperpod", "instance group a", ("s-v",), ("g-v",), efa=True, slurm_controller=True),
        NodeGroup(ENV, "hyperpod", "instance group b", ("s-o",), ("g-o",), efa=True, slurm_controller=False),
        NodeGroup(ENV, "hyperpod", "instance group c", ("s-v",), ("g-v",), efa=True, slurm_controller=False),
    ]


def test_with_node_types_the_controller_type_alone_runs_slurmctld() -> None:
    """Once a group names a NodeType, the ``Controller`` one is the controller, wherever it is listed."""
    groups = _hyperpod(
        [
            {"InstanceGroupName": "login", "SlurmConfig": {"NodeType": "Login"}},
            {"InstanceGroupName": "w"},
            {"InstanceGroupName": "ctl", "SlurmConfig": {"NodeType": "Controller"}},
        ]
    )
    assert [(g.name, g.slurm_controller) for g in groups] == [
        ("instance group login", False),
        ("instance group w", False),
        ("instance group ctl", True),
    ]


def test_file_systems_are_read_with_their_subnets_groups_efa_and_exports() -> None:
    """Type, subnets, groups by identity (a GroupId attribute names the group), EFA (true in either spelling)
    and each NFS export client of an OpenZFS root volume."""
    zfs = res(
        "AWS::FSx::FileSystem",
        FileSystemType="OPENZFS",
        SubnetIds=[ref("Private")],
        SecurityGroupIds=[gid("Nodes")],
        OpenZFSConfiguration={
            "RootVolumeConfiguration": {
                "NfsExports": [
                    {"ClientConfigurations": [{"Clients": "10.0.1.0/24"}, {"Clients": "10.0.2.0/24"}]},
                    {},
                ]
            }
        },
    )
    a = assembly(
        Z=zfs,
        L1=res("AWS::FSx::FileSystem", FileSystemType="LUSTRE", LustreConfiguration={"EfaEnabled": "true"}),
        L2=res("AWS::FSx::FileSystem", LustreConfiguration={"EfaEnabled": "yes"}),
    )
    resources = {r.logical_id: r for r in a.resources(ENV, "AWS::FSx::FileSystem")}
    assert file_systems(a, ENV) == [
        FileSystem(
            resources["Z"],
            "OPENZFS",
            ("${env/Net|Private}",),
            ("${env/Net|Nodes}",),
            False,
            ("10.0.1.0/24", "10.0.2.0/24"),
        ),
        FileSystem(resources["L1"], "LUSTRE", (), (), True, ()),
        FileSystem(resources["L2"], "", (), (), False, ()),
    ]


@pytest.mark.parametrize(
    ("rule", "port", "covered"),
    [
        (Rule("-1", -1, -1, "x"), ("udp", 5, 6), True),
        (Rule("tcp", -1, -1, "x"), ("tcp", 5, 6), True),
        (Rule("tcp", -1, -1, "x"), ("udp", 5, 6), False),
        (Rule("tcp", 5, 6, "x"), ("tcp", 5, 6), True),
        (Rule("tcp", 5, 6, "x"), ("tcp", 4, 6), False),
        (Rule("tcp", 5, 6, "x"), ("tcp", 5, 7), False),
        (Rule("tcp", 4, 7, "x"), ("tcp", 5, 6), True),
        (Rule("tcp", 988, 988, "x"), ("tcp", 1018, 1023), False),
        (Rule("tcp", 1018, 1023, "x"), ("tcp", 988, 988), False),
        (Rule("udp", 5, 6, "x"), ("tcp", 5, 6), False),
    ],
)
def test_a_rule_covers_a_range_only_when_it_holds_every_port(
    rule: Rule, port: tuple[str, int, int], covered: bool
) -> None:
    """All protocols cover anything; a protocol's rule covers a range inside its own, at both ends."""
    assert rule.covers(*port) is covered


@pytest.mark.parametrize(
    ("peer", "cidr", "covered"),
    [
        ("10.0.0.0/16", "10.0.1.0/24", True),
        ("10.0.1.0/24", "10.0.1.0/24", True),
        ("10.0.1.0/24", "10.0.0.0/16", False),
        ("10.1.0.0/16", "10.0.1.0/24", False),
        ("${env/Net|Nodes}", "10.0.1.0/24", False),
        ("0.0.0.0/0", "10.0.1.0/24", True),
    ],
)
def test_an_address_range_peer_covers_subnets_inside_it(peer: str, cidr: str, covered: bool) -> None:
    """A CIDR peer covers a subnet inside it; a group name covers none."""
    assert _covers(peer, cidr) is covered


@pytest.mark.parametrize(
    ("peer", "wide"),
    [
        ("10.0.0.0/16", True),
        ("10.0.0.1/16", True),
        ("::/0", True),
        ("pl-123", True),
        ("${env/Net|Nodes}", False),
        ("", False),
        ("xpl-1", False),
    ],
)
def test_address_ranges_and_prefix_lists_are_wider_than_a_group(peer: str, wide: bool) -> None:
    """A CIDR (host bits allowed) or a prefix list is a wide peer; a security group is not."""
    assert _is_cidr_peer(peer) is wide


def test_security_group_rules_are_read_with_protocol_ports_and_peer() -> None:
    """Protocol numbers and names (any case) map to one spelling, a missing protocol is all; the peer is the
    group (by identity), else the CIDR or prefix list; ports are numbers or an Aurora cluster's Endpoint.Port
    (its Port, else 3306); a group without an egress property keeps EC2's allow-all, an empty one has none."""
    a = assembly(
        G=sg(
            ingress=[
                {"IpProtocol": "6", "FromPort": 22, "ToPort": "22", "SourceSecurityGroupId": gid("Nodes")},
                {"IpProtocol": "TCP", "FromPort": "-1", "ToPort": -1, "CidrIp": "10.0.0.0/8"},
                {"IpProtocol": "17", "FromPort": 1, "ToPort": 2, "SourcePrefixListId": "pl-1"},
                {"IpProtocol": "1", "FromPort": -1, "ToPort": -1},
                {"IpProtocol": "all", "SourceSecurityGroupId": ""},
                {"IpProtocol": "-1", "CidrIp": "0.0.0.0/0"},
                {"IpProtocol": "50", "FromPort": 0, "ToPort": 0, "CidrIp": "1.2.3.4/32"},
                {"IpProtocol": "ICMPv6", "FromPort": -1, "ToPort": -1, "CidrIp": "::/0"},
            ],
            egress=[{"IpProtocol": "tcp", "FromPort": 1, "ToPort": 1, "DestinationSecurityGroupId": ref("Nodes")}],
        ),
        Empty=sg(egress=[]),
        Db=res("AWS::RDS::DBCluster"),
        Db2=res("AWS::RDS::DBCluster", Port=5432),
        In=res(
            "AWS::EC2::SecurityGroupIngress",
            GroupId=gid("G"),
            IpProtocol="tcp",
            FromPort={"Fn::GetAtt": ["Db", "Endpoint.Port"]},
            ToPort={"Fn::GetAtt": ["Db2", "Endpoint.Port"]},
            SourceSecurityGroupId=gid("Nodes"),
        ),
        Out=res(
            "AWS::EC2::SecurityGroupEgress",
            GroupId=gid("Empty"),
            IpProtocol="udp",
            FromPort=53,
            ToPort=53,
            DestinationPrefixListId="pl-2",
        ),
    )
    net = _Network(a, ENV)
    nodes = "${env/Net|Nodes}"
    assert net.ingress["${env/Net|G}"] == [
        Rule("tcp", 22, 22, nodes),
        Rule("tcp", -1, -1, "10.0.0.0/8"),
        Rule("udp", 1, 2, "pl-1"),
        Rule("icmp", -1, -1, ""),
        Rule("-1", -1, -1, ""),
        Rule("-1", -1, -1, "0.0.0.0/0"),
        Rule("50", 0, 0, "1.2.3.4/32"),
        Rule("icmpv6", -1, -1, "::/0"),
        Rule("tcp", 3306, 5432, nodes),
    ]
    assert net.egress["${env/Net|G}"] == [Rule("tcp", 1, 1, nodes)]
    assert net.egress["${env/Net|Empty}"] == [Rule("udp", 53, 53, "pl-2")]
    assert net.egress[nodes] == [Rule("-1", -1, -1, "0.0.0.0/0")]
    assert net.ingress[nodes] == []


@pytest.mark.parametrize(
    "port",
    [{"Fn::GetAtt": ["Db", "Arn"]}, {"Fn::GetAtt": ["Other", "Endpoint.Port"]}, "${x}", {"Ref": "Db"}],
)
def test_a_port_the_gate_cannot_read_stops_it_with_the_value(port: Any) -> None:
    """Only a number or an Aurora cluster's ``Endpoint.Port`` is a port; anything else is an error naming it."""
    a = assembly(
        Db=res("AWS::RDS::DBCluster"),
        Other=res("AWS::EC2::Instance"),
        G=sg(ingress=[{"IpProtocol": "tcp", "FromPort": port, "ToPort": 1, "CidrIp": "10.0.0.0/8"}]),
    )
    with pytest.raises(ValueError, match=r"^env: a security group rule's port .* is not a number this gate can read$"):
        _Network(a, ENV)


def _problems(config: dict[str, Any], **resources: Any) -> list[str]:
    return check_environment(assembly(config, **resources), ENV).problems


PRIVATE = "${env/Net|Private}"
PUBLIC = "${env/Net|Public}"


def test_a_private_node_behind_the_nat_reaches_the_internet_and_s3_through_it() -> None:
    """The good path: no problem, and the paths name the NAT for both."""
    report = check_environment(assembly(head()), ENV)
    assert (report.problems, report.paths) == ([], {"head node": {"internet": "NAT", "s3": "NAT"}})
    assert [r.environment for r in check_assembly(assembly(head()))] == [ENV]


def test_an_s3_gateway_endpoint_on_the_nodes_route_table_is_its_s3_path() -> None:
    """A Gateway endpoint whose service ends in ``.s3`` on the node's table; an interface endpoint, another
    service or another table is not."""
    endpoints = {
        "Iface": res(
            "AWS::EC2::VPCEndpoint",
            VpcEndpointType="Interface",
            ServiceName="com.amazonaws.r.s3",
            RouteTableIds=[ref("PrivateTable")],
        ),
        "Dynamo": res(
            "AWS::EC2::VPCEndpoint",
            VpcEndpointType="Gateway",
            ServiceName="com.amazonaws.r.dynamodb",
            RouteTableIds=[ref("PrivateTable")],
        ),
        "OtherTable": res(
            "AWS::EC2::VPCEndpoint",
            VpcEndpointType="Gateway",
            ServiceName="com.amazonaws.r.s3",
            RouteTableIds=[ref("PublicTable")],
        ),
    }
    assert check_environment(assembly(head(), **endpoints), ENV).paths == {
        "head node": {"internet": "NAT", "s3": "NAT"}
    }
    endpoints["S3"] = res(
        "AWS::EC2::VPCEndpoint",
        VpcEndpointType="Gateway",
        ServiceName="com.amazonaws.r.s3",
        RouteTableIds=[ref("PrivateTable")],
    )
    assert check_environment(assembly(head(), **endpoints), ENV).paths == {
        "head node": {"internet": "NAT", "s3": "gateway endpoint"}
    }
    # Without the NAT, the endpoint alone reaches S3 and the internet is the one problem.
    report = check_environment(
        assembly(
            head(),
            PrivateDefault=res(
                "AWS::EC2::Route",
                RouteTableId=ref("PrivateTable"),
                DestinationCidrBlock="10.9.0.0/16",
                NatGatewayId=ref("Nat"),
            ),
            **endpoints,
        ),
        ENV,
    )
    assert report.paths == {"head node": {"internet": "none", "s3": "gateway endpoint"}}
    assert report.problems == [
        f"env: head node: no way to the internet: subnet {PRIVATE} route table ${{env/Net|PrivateTable}} has no "
        "default route (0.0.0.0/0) to a NAT or internet gateway"
    ]


NO_S3 = f"env: head node: cannot reach S3: no S3 gateway endpoint on the route table of {PRIVATE} and no way to the internet"


@pytest.mark.parametrize(
    ("resources", "reason"),
    [
        ({"PrivateAssoc": res("AWS::EC2::VPC")}, "has no route table association"),
        (
            {
                "PrivateDefault": res(
                    "AWS::EC2::Route", RouteTableId=ref("PrivateTable"), DestinationCidrBlock="0.0.0.0/0"
                )
            },
            "route table ${env/Net|PrivateTable} has no default route (0.0.0.0/0) to a NAT or internet gateway",
        ),
        (
            {
                "Nat": res(
                    "AWS::EC2::NatGateway",
                    SubnetId=ref("Public"),
                    AllocationId="eipalloc-1",
                    ConnectivityType="private",
                )
            },
            "NAT gateway ${env/Net|Nat} is private (no Elastic IP)",
        ),
        (
            {"Nat": res("AWS::EC2::NatGateway", SubnetId=ref("Public"))},
            "NAT gateway ${env/Net|Nat} is private (no Elastic IP)",
        ),
        (
            {"Nat": res("AWS::EC2::NatGateway", SubnetId=ref("Private"), AllocationId="eipalloc-1")},
            "NAT gateway ${env/Net|Nat} sits in a subnet without a route to an attached internet gateway",
        ),
        (
            {"Nat": res("AWS::EC2::NatGateway", SubnetId="subnet-elsewhere", AllocationId="eipalloc-1")},
            "NAT gateway ${env/Net|Nat} sits in a subnet without a route to an attached internet gateway",
        ),
        (
            {"Attach": res("AWS::EC2::VPCGatewayAttachment", VpcId="vpc-other", InternetGatewayId=ref("Igw"))},
            "NAT gateway ${env/Net|Nat} sits in a subnet without a route to an attached internet gateway",
        ),
        (
            {
                "Tgw": res("AWS::EC2::TransitGateway"),
                "PrivateDefault": res(
                    "AWS::EC2::Route",
                    RouteTableId=ref("PrivateTable"),
                    DestinationCidrBlock="0.0.0.0/0",
                    TransitGatewayId=ref("Tgw"),
                ),
            },
            "default route goes to AWS::EC2::TransitGateway ${env/Net|Tgw}, not to a NAT or attached internet gateway",
        ),
        (
            {
                "Pcx": res("AWS::EC2::VPCPeeringConnection"),
                "PrivateDefault": res(
                    "AWS::EC2::Route",
                    RouteTableId=ref("PrivateTable"),
                    DestinationCidrBlock="0.0.0.0/0",
                    VpcPeeringConnectionId=ref("Pcx"),
                ),
            },
            "default route goes to AWS::EC2::VPCPeeringConnection ${env/Net|Pcx}, not to a NAT or attached internet gateway",
        ),
        (
            {
                "PrivateDefault": res(
                    "AWS::EC2::Route",
                    RouteTableId=ref("PrivateTable"),
                    DestinationCidrBlock="0.0.0.0/0",
                    GatewayId="igw-not-here",
                )
            },
            "route table ${env/Net|PrivateTable} has no default route (0.0.0.0/0) to a NAT or internet gateway",
        ),
    ],
)
def test_each_way_the_internet_is_missing_is_named(resources: dict[str, Any], reason: str) -> None:
    """No association, no default route, a private NAT (by type or without an Elastic IP), a NAT whose subnet
    has no route to an attached gateway, a route to a transit gateway or peering: each its own reason, and S3
    unreachable with it."""
    assert _problems(head(), **resources) == [
        f"env: head node: no way to the internet: subnet {PRIVATE} {reason}",
        NO_S3,
    ]


@pytest.mark.parametrize(
    ("mapped", "networking", "ok"),
    [
        (None, {}, False),
        (False, {"ElasticIp": False}, False),
        ("false", {}, False),
        (True, {}, True),
        ("true", {}, True),
        (None, {"ElasticIp": True}, True),
    ],
)
def test_a_public_subnet_reaches_the_internet_only_with_a_public_ip(
    mapped: object, networking: dict[str, Any], ok: bool
) -> None:
    """Through an internet gateway a node needs a public IP: the subnet maps one, or the head node has an Elastic
    IP; otherwise the reason names the settings that give one (S3 still unreachable)."""
    subnet = res("AWS::EC2::Subnet", VpcId=ref("Vpc"), CidrBlock="10.0.0.0/24", AvailabilityZone="az1")
    if mapped is not None:
        subnet["Properties"]["MapPublicIpOnLaunch"] = mapped
    report = check_environment(assembly(head("Public", **networking), Public=subnet), ENV)
    if ok:
        assert (report.problems, report.paths) == (
            [],
            {"head node": {"internet": "internet gateway", "s3": "internet gateway"}},
        )
    else:
        assert report.problems == [
            f"env: head node: no way to the internet: subnet {PUBLIC} routes to an internet gateway but the node "
            "gets no public IP (MapPublicIpOnLaunch is false and no ElasticIp/AssignPublicIp): it reaches only the "
            "VPC and its gateway endpoints",
            f"env: head node: cannot reach S3: no S3 gateway endpoint on the route table of {PUBLIC} and no way to the internet",
        ]


def test_a_group_without_subnets_or_with_a_foreign_one_is_reported() -> None:
    """A queue with no subnet, and one naming a subnet not in the templates: nothing can be proved."""
    config = {
        **head(),
        "Scheduling": {
            "SlurmQueues": [
                {"Name": "none", "Networking": {"SecurityGroups": [gid("Nodes")]}},
                {"Name": "foreign", "Networking": {"SubnetIds": ["subnet-0abc", ref("Private")]}},
            ]
        },
    }
    report = check_environment(assembly(config), ENV)
    assert report.problems == [
        "env: queue none: no subnet",
        "env: queue foreign: subnet subnet-0abc is not a subnet of this environment; cannot prove",
    ]
    assert report.paths == {
        "head node": {"internet": "NAT", "s3": "NAT"},
        "queue none": {},
        "queue foreign": {"internet": "NAT", "s3": "NAT"},
    }


FS = "lustre file system ${env/Net|Fs}"


def _lustre(fs_group: dict[str, Any], *, efa: bool = False, subnet: str = "Private", **extra: Any) -> list[str]:
    fs = res(
        "AWS::FSx::FileSystem",
        FileSystemType="LUSTRE",
        SubnetIds=[ref(subnet)],
        SecurityGroupIds=[gid("FsGroup")],
        LustreConfiguration={"EfaEnabled": efa},
    )
    return _problems(head(), Fs=fs, FsGroup=fs_group, **extra)


def test_a_lustre_file_system_that_admits_nothing_is_reported_port_by_port() -> None:
    """Both Lustre port ranges, each: no admission from the node, nothing sent back, no self rule; and a file
    system in another zone than the node's subnet."""
    problems = _lustre(
        sg(egress=[]),
        subnet="Public",
        Public=res("AWS::EC2::Subnet", VpcId=ref("Vpc"), CidrBlock="10.0.0.0/24", AvailabilityZoneId="use1-az2"),
    )
    where = "env: head node"
    assert problems == [
        f"{where}: {FS}'s security groups admit no TCP 988 from the node's groups or subnets",
        f"{where}: {FS}'s security groups send no TCP 988 to the node's groups or subnets",
        f"{where}: {FS}'s security groups do not admit TCP 988 from themselves (self rule)",
        f"{where}: {FS}'s security groups admit no TCP 1018-1023 from the node's groups or subnets",
        f"{where}: {FS}'s security groups send no TCP 1018-1023 to the node's groups or subnets",
        f"{where}: {FS}'s security groups do not admit TCP 1018-1023 from themselves (self rule)",
        f"{where}: subnet {PRIVATE} is in zone 'az1', {FS} in ['use1-az2']: every I/O would cross zones (EFA does not)",
    ]


LUSTRE_OK = [
    tcp(988, SourceSecurityGroupId=gid("Nodes")),
    tcp(1018, 1023, SourceSecurityGroupId=gid("Nodes")),
    tcp(988, SourceSecurityGroupId=gid("FsGroup")),
    tcp(1018, 1023, SourceSecurityGroupId=gid("FsGroup")),
]


def test_a_lustre_file_system_open_both_ways_is_proved_and_each_rule_is_needed() -> None:
    """Exactly the needed rules prove it; taking any one away names that port and direction."""
    egress = [tcp(988, CidrIp="10.0.1.0/24"), tcp(1018, 1023, DestinationSecurityGroupId=gid("Nodes"))]
    assert _lustre(sg(ingress=LUSTRE_OK, egress=egress)) == []
    where = "env: head node"
    assert _lustre(sg(ingress=LUSTRE_OK[1:], egress=egress)) == [
        f"{where}: {FS}'s security groups admit no TCP 988 from the node's groups or subnets"
    ]
    assert _lustre(sg(ingress=[*LUSTRE_OK[:3]], egress=egress)) == [
        f"{where}: {FS}'s security groups do not admit TCP 1018-1023 from themselves (self rule)"
    ]
    assert _lustre(sg(ingress=LUSTRE_OK, egress=egress[:1])) == [
        f"{where}: {FS}'s security groups send no TCP 1018-1023 to the node's groups or subnets"
    ]
    # A node group with its own egress rules must let the ports out to the file system (a CIDR covering its subnet
    # counts as much as its group).
    nodes = sg(egress=[tcp(988, DestinationSecurityGroupId=gid("FsGroup")), tcp(1018, 1023, CidrIp="10.0.0.0/16")])
    assert _lustre(sg(ingress=LUSTRE_OK, egress=egress), Nodes=nodes) == []
    assert _lustre(sg(ingress=LUSTRE_OK, egress=egress), Nodes=sg(egress=[tcp(988, 1023, CidrIp="10.0.2.0/24")])) == [
        f"{where}: no egress rule of its security groups allows TCP 988 to {FS}",
        f"{where}: no egress rule of its security groups allows TCP 1018-1023 to {FS}",
    ]


def test_an_efa_file_system_needs_all_traffic_both_ways() -> None:
    """EFA: one "all traffic" requirement, and the file system's groups send all traffic to themselves and the
    nodes."""
    where = "env: head node"
    assert _lustre(sg(egress=[]), efa=True) == [
        f"{where}: {FS}'s security groups admit no all traffic from the node's groups or subnets",
        f"{where}: {FS}'s security groups send no all traffic to the node's groups or subnets",
        f"{where}: {FS}'s security groups do not admit all traffic from themselves (self rule)",
        f"{where}: EFA-enabled {FS}'s groups do not send all traffic to the nodes",
    ]
    everything = {"IpProtocol": "-1"}
    group = sg(
        ingress=[
            {**everything, "SourceSecurityGroupId": gid("Nodes")},
            {**everything, "SourceSecurityGroupId": gid("FsGroup")},
        ],
        egress=[{**everything, "DestinationSecurityGroupId": gid("Nodes")}],
    )
    assert _lustre(group, efa=True) == []


ZFS = "openzfs file system ${env/Net|Zfs}"


def test_an_openzfs_file_system_is_checked_for_each_nfs_port_and_its_export() -> None:
    """Only for nodes that mount it: every NFS port and protocol both ways, and an export covering the node's
    subnet; a Lustre-only cluster is not held to it."""
    zfs = res(
        "AWS::FSx::FileSystem",
        FileSystemType="OPENZFS",
        SubnetIds=[ref("Private")],
        SecurityGroupIds=[gid("ZfsGroup")],
        OpenZFSConfiguration={
            "RootVolumeConfiguration": {"NfsExports": [{"ClientConfigurations": [{"Clients": "10.0.2.0/24"}]}]}
        },
    )
    config = {**head(), "SharedStorage": [{"StorageType": "FsxOpenZfs"}]}
    problems = _problems(config, Zfs=zfs, ZfsGroup=sg(egress=[]))
    where = "env: head node"
    expected = [f"{where}: {ZFS} exports /home to ['10.0.2.0/24'], not to subnet 10.0.1.0/24"]
    for label in ("TCP 111", "UDP 111", "TCP 2049", "UDP 2049", "TCP 20001-20003", "UDP 20001-20003"):
        expected += [
            f"{where}: {ZFS}'s security groups admit no {label} from the node's groups or subnets",
            f"{where}: {ZFS}'s security groups send no {label} to the node's groups or subnets",
        ]
    assert problems == expected
    open_group = sg(ingress=[{"IpProtocol": "-1", "CidrIp": "10.0.1.0/24"}])
    zfs["Properties"]["OpenZFSConfiguration"]["RootVolumeConfiguration"]["NfsExports"][0]["ClientConfigurations"][0][
        "Clients"
    ] = "10.0.0.0/16"
    assert _problems(config, Zfs=zfs, ZfsGroup=open_group) == []
    assert _problems(head(), Zfs=zfs, ZfsGroup=sg(egress=[])) == []


def _database(**extra: Any) -> dict[str, Any]:
    """An Aurora cluster in both subnets behind DbGroup, a rotation function in the private subnet."""
    return {
        "Db": res("AWS::RDS::DBCluster", DBSubnetGroupName=ref("DbSubnets"), VpcSecurityGroupIds=[gid("DbGroup")]),
        "DbSubnets": res("AWS::RDS::DBSubnetGroup", SubnetIds=[ref("Private"), ref("Public")]),
        "Rotation": res(
            "AWS::Serverless::Application",
            Parameters={
                "vpcSecurityGroupIds": {"Fn::GetAtt": ["RotationGroup", "GroupId"]},
                "vpcSubnetIds": ref("Private"),
            },
        ),
        "RotationGroup": sg(egress=[]),
        "DbGroup": sg(ingress=[tcp(3306, CidrIp="10.0.0.0/16"), tcp(3306, SourcePrefixListId="pl-9")]),
        **extra,
    }


def test_an_accounting_database_open_to_address_ranges_and_unreachable_is_reported_whole() -> None:
    """Every database rule: a public subnet, CIDR and prefix-list ingress, no path from the head node's or the
    rotation function's groups, the rotation function without HTTPS out."""
    config = {
        **head(),
        "Scheduling": {
            "SlurmQueues": [
                {"Name": "q", "Networking": {"SubnetIds": [ref("Private")], "SecurityGroups": [gid("Nodes")]}}
            ]
        },
    }
    name = "env: accounting database ${env/Net|Db}"
    assert _problems(config, **_database()) == [
        f"{name}: subnet {PUBLIC} routes to an internet gateway (a public subnet)",
        f"{name}: security group ${{env/Net|DbGroup}} admits 10.0.0.0/16, an address range",
        f"{name}: security group ${{env/Net|DbGroup}} admits pl-9, an address range",
        f"{name}: its security groups admit no TCP 3306 from head node's groups",
        f"{name}: no security group of rotation function ${{env/Net|Rotation}} lets TCP 3306 out to it",
        f"{name}: its security groups admit no TCP 3306 from rotation function ${{env/Net|Rotation}}'s groups",
        "env: rotation function ${env/Net|Rotation}: no security group lets HTTPS out to Secrets Manager",
    ]
    # The cluster's own port (3306 only when it names none): a rule for 3306 admits nothing to a 3307 database.
    db = res(
        "AWS::RDS::DBCluster", Port="3307", DBSubnetGroupName=ref("DbSubnets"), VpcSecurityGroupIds=[gid("DbGroup")]
    )
    admits_3306 = sg(ingress=[tcp(3306, SourceSecurityGroupId=gid("Nodes"))])
    assert _problems(config, **_database(Db=db, DbGroup=admits_3306)) == [
        f"{name}: subnet {PUBLIC} routes to an internet gateway (a public subnet)",
        f"{name}: its security groups admit no TCP 3307 from head node's groups",
        f"{name}: no security group of rotation function ${{env/Net|Rotation}} lets TCP 3307 out to it",
        f"{name}: its security groups admit no TCP 3307 from rotation function ${{env/Net|Rotation}}'s groups",
        "env: rotation function ${env/Net|Rotation}: no security group lets HTTPS out to Secrets Manager",
    ]


def test_a_database_reached_by_its_controller_alone_is_proved_and_a_worker_path_is_found() -> None:
    """Two private subnets, the head node and the rotation function admitted by group: proved. The queue's own
    group admitted too is a problem, unless the database carries the admits-node-group mark."""
    private2 = res("AWS::EC2::Subnet", VpcId=ref("Vpc"), CidrBlock="10.0.2.0/24", AvailabilityZone="az2")
    assoc2 = res("AWS::EC2::SubnetRouteTableAssociation", SubnetId=ref("Private2"), RouteTableId=ref("PrivateTable"))
    queue = {"Name": "q", "Networking": {"SubnetIds": [ref("Private")], "SecurityGroups": [gid("Workers")]}}
    config = {
        "HeadNode": {"Networking": {"SubnetId": ref("Private"), "AdditionalSecurityGroups": [gid("Nodes")]}},
        "Scheduling": {"SlurmQueues": [queue]},
    }
    admitted = [tcp(3306, SourceSecurityGroupId=gid("Nodes")), tcp(3306, SourceSecurityGroupId=gid("RotationGroup"))]
    good = _database(
        Private2=private2,
        Assoc2=assoc2,
        DbSubnets=res("AWS::RDS::DBSubnetGroup", SubnetIds=[ref("Private"), ref("Private2")]),
        DbGroup=sg(ingress=admitted),
        RotationGroup=sg(egress=[tcp(443, CidrIp="0.0.0.0/0"), tcp(3306, DestinationSecurityGroupId=gid("DbGroup"))]),
        Workers=sg(),
    )
    assert _problems(config, **good) == []
    widened = {**good, "DbGroup": sg(ingress=[*admitted, tcp(3306, SourceSecurityGroupId=gid("Workers"))])}
    assert _problems(config, **widened) == [
        "env: accounting database ${env/Net|Db}: its security groups admit TCP 3306 from queue q, which does not run slurmdbd"
    ]
    marked = copy.deepcopy(widened)
    marked["Db"]["Metadata"] = {ADMITS_NODE_GROUP: True}
    assert _problems(config, **marked) == []
    marked["Db"]["Metadata"] = {ADMITS_NODE_GROUP: "true"}
    assert len(_problems(config, **marked)) == 1


def test_a_database_in_one_subnet_and_a_rotation_function_without_internet() -> None:
    """One subnet is too few for Aurora; a rotation function subnet without a way out (or not a subnet of the
    environment) cannot reach Secrets Manager."""
    a = assembly(
        head(),
        **_database(
            DbSubnets=res("AWS::RDS::DBSubnetGroup", SubnetIds=[ref("Private")]),
            DbGroup=sg(ingress=[tcp(3306, SourceSecurityGroupId=gid("RotationGroup"))]),
            RotationGroup=sg(),
            Rotation=res(
                "AWS::Serverless::Application",
                Parameters={
                    "vpcSecurityGroupIds": {"Fn::GetAtt": ["RotationGroup", "GroupId"]},
                    "vpcSubnetIds": "subnet-x,",
                },
            ),
        ),
    )
    name = "env: accounting database ${env/Net|Db}"
    assert database_problems(a, ENV, []) == [
        f"{name}: its subnet group has 1 subnet(s); Aurora needs two zones",
        "env: rotation function ${env/Net|Rotation}: subnet subnet-x has no way to Secrets Manager's endpoint",
    ]
    assert database_problems(assembly(head()), ENV, []) == []


EXPORTER = 9100


def _exporters(nodes: dict[str, Any], workers: dict[str, Any], ports: tuple[int, ...] = (EXPORTER,)) -> list[str]:
    queue = {"Name": "q", "Networking": {"SubnetIds": [ref("Private")], "SecurityGroups": [gid("Workers")]}}
    return exporter_problems(
        assembly({**head(), "Scheduling": {"SlurmQueues": [queue]}}, Nodes=nodes, Workers=workers),
        ENV,
        "head node",
        ports,
    )


def test_the_collector_reaches_each_exporter_and_nothing_wider_does() -> None:
    """Each port of each other group: admitted from the collector's groups and let out by them (to the group or a
    range covering its subnets); an ingress from a range on an attached group is wider than the cluster."""
    assert (
        _exporters(
            sg(egress=[tcp(EXPORTER, DestinationSecurityGroupId=gid("Workers"))]),
            sg(ingress=[tcp(EXPORTER, SourceSecurityGroupId=gid("Nodes"))]),
        )
        == []
    )
    assert (
        _exporters(
            sg(egress=[tcp(EXPORTER, CidrIp="10.0.1.0/24")]),
            sg(ingress=[tcp(EXPORTER, SourceSecurityGroupId=gid("Nodes"))]),
        )
        == []
    )
    assert _exporters(
        sg(egress=[], ingress=[tcp(9000, 9200, CidrIp="10.0.0.0/16")]),
        sg(ingress=[tcp(9101, SourceSecurityGroupId=gid("Nodes"))]),
        (EXPORTER, 9101),
    ) == [
        "env: queue q port 9100: no security group of it admits the collector's groups ['${env/Net|Nodes}']",
        "env: queue q port 9100: no security group of head node lets the collector out to it",
        "env: security group ${env/Net|Nodes} admits port 9100 from 10.0.0.0/16, wider than the cluster's own security groups",
        "env: queue q port 9101: no security group of head node lets the collector out to it",
        "env: security group ${env/Net|Nodes} admits port 9101 from 10.0.0.0/16, wider than the cluster's own security groups",
    ]


def test_an_unknown_collector_group_is_named_with_the_groups_there_are() -> None:
    """A collector group name that matches no node group: one problem listing the names."""
    assert exporter_problems(assembly(head()), ENV, "queue x", [EXPORTER]) == [
        "env: no node group named 'queue x'; groups: ['head node']"
    ]


def test_a_hyperpod_cluster_outside_a_vpc_is_reported_not_a_crash() -> None:
    """VpcConfig is optional for a HyperPod cluster: without it (and without an override) a group has no subnet
    and no security group, which the gate reports instead of proving anything."""
    cluster = res("AWS::SageMaker::Cluster", InstanceGroups=[{"InstanceGroupName": "a"}])
    report = check_environment(Assembly({STACK: {"Resources": {"H": cluster}}}), ENV)
    assert report.groups == [NodeGroup(ENV, "hyperpod", "instance group a", (), (), efa=True, slurm_controller=True)]
    assert report.problems == ["env: instance group a: no subnet"]

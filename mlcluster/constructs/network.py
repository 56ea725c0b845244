"""The cluster network: VPC, subnets in chosen zones, NAT, endpoints, flow logs, node security group.

Built from L1 resources because the L2 ``ec2.Vpc`` cannot place a subnet by
availability zone ID, which is how HyperPod users name the zone their
capacity is promised in. Consumers get L2 interfaces (``ec2.IVpc``,
``ec2.ISubnet``, ``ec2.ISecurityGroup``) either way, and ``ImportedNetwork``
offers the same surface for a VPC that already exists.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Sequence
from typing import Literal, Protocol

import aws_cdk as cdk
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_iam as iam
from aws_cdk import aws_logs as logs
from constructs import Construct

from mlcluster.config.network import AZ_ID, AZ_NAME, MAX_ZONES, RTB_ID, SG_ID, SUBNET_ID, VPC_ID, Peering, Zone
from mlcluster.constructs.nag import acknowledge, acknowledge_compliance


class NetworkRef(Protocol):
    """What the rest of mlcluster needs from a network, created or imported."""

    @property
    def vpc(self) -> ec2.IVpc: ...

    @property
    def vpc_cidr_blocks(self) -> list[str]: ...

    @property
    def public_subnet(self) -> ec2.ISubnet | None: ...

    @property
    def private_subnets(self) -> list[ec2.ISubnet]: ...

    @property
    def security_group(self) -> ec2.ISecurityGroup: ...

    def node_subnet_cidrs(self, *, include_public: bool) -> list[str]: ...


def _net(value: str, what: str) -> ipaddress.IPv4Network:
    try:
        net = ipaddress.ip_network(value, strict=True)
    except ValueError:
        raise ValueError(f"{what}: {value!r} is not an IPv4 CIDR block such as '10.0.0.0/16'") from None
    if not isinstance(net, ipaddress.IPv4Network):
        raise ValueError(f"{what}: {value!r} is not an IPv4 CIDR block")
    return net


class ClusterNetwork(Construct):
    """A VPC laid out for distributed training.

    Creates a VPC with a public and a private subnet in the primary zone (and
    private subnets in any extra zones), an internet gateway, NAT gateways, an
    S3 gateway endpoint on every route table (optionally DynamoDB too) whose
    policy lets writes reach only this account's buckets, VPC flow logs to a
    CloudWatch log group, optional peering with an existing VPC, and the
    cluster nodes' security group (file systems have groups of their own).

    Default settings:
    - VPC ``10.0.0.0/16`` with DNS support and hostnames.
    - Subnets are carved from the VPC CIDR unless given: public subnets from
      the first quarter of ``cidr`` (one sixteenth of it each), private
      subnets the next quarters, or quarters of ``secondary_cidr`` when given.
    - One NAT gateway in the primary zone; ``nat_gateways="per_zone"`` adds a
      public subnet and NAT gateway in every zone.
    - Public subnets do not assign public IPs on launch.
    - Flow logs capture ALL traffic, aggregated every 600 s, kept for one year,
      and the log group is retained when the stack is deleted.
    - The security group allows all traffic in from itself, all traffic out to
      itself (EFA fails its health check without both) and all traffic out to
      the internet, each rule with a description.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        availability_zone: str | None = None,
        availability_zone_id: str | None = None,
        cidr: str = "10.0.0.0/16",
        secondary_cidr: str | None = None,
        public_subnet_cidr: str | None = None,
        private_subnet_cidr: str | None = None,
        extra_zones: Sequence[Zone] = (),
        nat_gateways: Literal["one", "per_zone"] = "one",
        dynamodb_endpoint: bool = False,
        flow_log_traffic_type: Literal["ALL", "ACCEPT", "REJECT"] = "ALL",
        flow_log_max_aggregation_interval_seconds: int = 600,
        flow_log_retention: logs.RetentionDays = logs.RetentionDays.ONE_YEAR,
        flow_log_removal_policy: cdk.RemovalPolicy = cdk.RemovalPolicy.RETAIN,
        peering: Peering | None = None,
        public_ip_on_launch: bool = False,
    ) -> None:
        """Create the network.

        :param availability_zone: the primary zone by name, e.g. ``us-east-1a``
            (give this or ``availability_zone_id``).
        :param availability_zone_id: the primary zone by ID, e.g. ``use1-az4``.
        :param cidr: the VPC's primary CIDR block. Default: ``10.0.0.0/16``.
        :param secondary_cidr: a second CIDR block for the private subnets.
            Default: none; private subnets come from ``cidr``.
        :param public_subnet_cidr: the primary zone's public subnet. Default: carved.
        :param private_subnet_cidr: the primary zone's private subnet. Default: carved.
        :param extra_zones: more zones for private subnets. Default: none.
        :param nat_gateways: ``one`` (default) or ``per_zone``.
        :param dynamodb_endpoint: add a DynamoDB gateway endpoint. Default: false.
        :param flow_log_traffic_type: which traffic flow logs record. Default: ALL.
        :param flow_log_max_aggregation_interval_seconds: 60 or 600. Default: 600.
        :param flow_log_retention: how long flow logs are kept. Default: one year.
        :param flow_log_removal_policy: what happens to the log group on delete. Default: RETAIN.
        :param peering: peer with an existing VPC, routes both ways. Default: none.
        :param public_ip_on_launch: the public subnets map public IPs on launch; only for
            ParallelCluster login nodes behind an internet-facing load balancer, whose
            launch template asks for none and which have no other way out. Default: false.
        """
        super().__init__(scope, construct_id)
        self._public_ip_on_launch = public_ip_on_launch
        primary = Zone(
            availability_zone=availability_zone,
            availability_zone_id=availability_zone_id,
            private_subnet_cidr=private_subnet_cidr,
            public_subnet_cidr=public_subnet_cidr,
        )
        zones = [primary, *extra_zones]
        layout = _plan_subnets(zones, cidr, secondary_cidr, nat_gateways)
        if flow_log_max_aggregation_interval_seconds not in (60, 600):
            raise ValueError(
                f"flow_log_max_aggregation_interval_seconds: {flow_log_max_aggregation_interval_seconds} "
                "is not allowed; use 60 or 600"
            )

        self.resource = ec2.CfnVPC(
            self, "Resource", cidr_block=cidr, enable_dns_hostnames=True, enable_dns_support=True
        )
        cdk.Tags.of(self.resource).add("Name", cdk.Names.unique_id(self))
        acknowledge_compliance(
            self.resource,
            "VPCDefaultSecurityGroupClosed",
            "Nothing mlcluster creates uses the VPC's default security group: nodes and file systems use the "
            "cluster security group. Closing it would need a custom resource Lambda in every environment.",
        )
        self._cidr_blocks = [cidr]
        secondary_block: ec2.CfnVPCCidrBlock | None = None
        if secondary_cidr is not None:
            secondary_block = ec2.CfnVPCCidrBlock(
                self, "SecondaryCidr", vpc_id=self.resource.ref, cidr_block=secondary_cidr
            )
            self._cidr_blocks.append(secondary_cidr)

        igw = ec2.CfnInternetGateway(self, "InternetGateway")
        attachment = ec2.CfnVPCGatewayAttachment(
            self, "InternetGatewayAttachment", vpc_id=self.resource.ref, internet_gateway_id=igw.ref
        )

        self._route_tables: list[ec2.CfnRouteTable] = []
        public_subnets: list[ec2.CfnSubnet] = []
        public_tables: list[ec2.CfnRouteTable] = []
        nat_ids: list[str] = []
        for index, (zone, public_block) in enumerate(zip(zones, layout.public, strict=True)):
            if public_block is None:
                continue
            subnet, table = self._subnet(f"Public{index + 1}", zone, public_block, public=True)
            route = ec2.CfnRoute(
                self,
                f"Public{index + 1}DefaultRoute",
                route_table_id=table.ref,
                destination_cidr_block="0.0.0.0/0",
                gateway_id=igw.ref,
            )
            route.node.add_dependency(attachment)
            acknowledge_compliance(
                route,
                "VPCNoUnrestrictedRouteToIGW",
                "The public subnet's default route is how its NAT gateway reaches the internet (and a public head "
                "node's Elastic IP, or internet-facing login nodes' public IPs, when the file asks for them); "
                "nodes sit in the private subnets behind NAT by default.",
            )
            eip = ec2.CfnEIP(self, f"Public{index + 1}NatIp", domain="vpc")
            nat = ec2.CfnNatGateway(
                self, f"Public{index + 1}NatGateway", subnet_id=subnet.ref, allocation_id=eip.attr_allocation_id
            )
            nat.node.add_dependency(route)
            public_subnets.append(subnet)
            public_tables.append(table)
            nat_ids.append(nat.ref)

        private_subnets: list[ec2.CfnSubnet] = []
        private_tables: list[ec2.CfnRouteTable] = []
        for index, (zone, private_block) in enumerate(zip(zones, layout.private, strict=True)):
            subnet, table = self._subnet(f"Private{index + 1}", zone, private_block, public=False)
            if secondary_block is not None and _within(private_block, secondary_cidr):
                subnet.node.add_dependency(secondary_block)
            nat_id = nat_ids[index] if nat_gateways == "per_zone" else nat_ids[0]
            ec2.CfnRoute(
                self,
                f"Private{index + 1}DefaultRoute",
                route_table_id=table.ref,
                destination_cidr_block="0.0.0.0/0",
                nat_gateway_id=nat_id,
            )
            private_subnets.append(subnet)
            private_tables.append(table)

        route_table_ids = [t.ref for t in self._route_tables]
        self.s3_endpoint = ec2.CfnVPCEndpoint(
            self,
            "S3Endpoint",
            vpc_id=self.resource.ref,
            service_name=cdk.Fn.sub("com.amazonaws.${AWS::Region}.s3"),
            vpc_endpoint_type="Gateway",
            route_table_ids=route_table_ids,
            policy_document=s3_endpoint_policy().to_json(),
        )
        if dynamodb_endpoint:
            ec2.CfnVPCEndpoint(
                self,
                "DynamoDbEndpoint",
                vpc_id=self.resource.ref,
                service_name=cdk.Fn.sub("com.amazonaws.${AWS::Region}.dynamodb"),
                vpc_endpoint_type="Gateway",
                route_table_ids=route_table_ids,
            )

        self.flow_log_group = self._flow_logs(
            flow_log_traffic_type,
            flow_log_max_aggregation_interval_seconds,
            flow_log_retention,
            flow_log_removal_policy,
        )

        zone_attrs = [s.attr_availability_zone for s in private_subnets]
        self._vpc = ec2.Vpc.from_vpc_attributes(
            self,
            "Vpc",
            vpc_id=self.resource.ref,
            vpc_cidr_block=cidr,
            availability_zones=zone_attrs,
            # L2 lookups by subnet type need one public subnet per zone; with a
            # single NAT only the primary zone has one, so it is exposed below.
            public_subnet_ids=[s.ref for s in public_subnets] if len(public_subnets) == len(zones) else None,
            public_subnet_route_table_ids=[t.ref for t in public_tables] if len(public_subnets) == len(zones) else None,
            private_subnet_ids=[s.ref for s in private_subnets],
            private_subnet_route_table_ids=[t.ref for t in private_tables],
        )
        self._public = [
            ec2.Subnet.from_subnet_attributes(
                self,
                f"Public{i + 1}Ref",
                subnet_id=s.ref,
                availability_zone=s.attr_availability_zone,
                route_table_id=public_tables[i].ref,
                ipv4_cidr_block=s.cidr_block,
            )
            for i, s in enumerate(public_subnets)
        ]
        self._private = [
            ec2.Subnet.from_subnet_attributes(
                self,
                f"Private{i + 1}Ref",
                subnet_id=s.ref,
                availability_zone=s.attr_availability_zone,
                route_table_id=private_tables[i].ref,
                ipv4_cidr_block=s.cidr_block,
            )
            for i, s in enumerate(private_subnets)
        ]
        self._security_group = ClusterSecurityGroup(self, "SecurityGroup", vpc=self._vpc)
        self.peering_connection: ec2.CfnVPCPeeringConnection | None = None
        if peering is not None:
            self.peering_connection = self._peer(peering)

    # -- building blocks ------------------------------------------------

    def _subnet(self, name: str, zone: Zone, block: str, *, public: bool) -> tuple[ec2.CfnSubnet, ec2.CfnRouteTable]:
        subnet = ec2.CfnSubnet(
            self,
            f"{name}Subnet",
            vpc_id=self.resource.ref,
            cidr_block=block,
            availability_zone=zone.availability_zone,
            availability_zone_id=zone.availability_zone_id,
            map_public_ip_on_launch=public and self._public_ip_on_launch,
            tags=[cdk.CfnTag(key="mlcluster:subnet-type", value="public" if public else "private")],
        )
        if public and self._public_ip_on_launch:
            acknowledge_compliance(
                subnet,
                "VPCSubnetAutoAssignPublicIpDisabled",
                "The file asks for internet-facing ParallelCluster login nodes: they sit in this subnet behind an "
                "internet-facing load balancer, and ParallelCluster's launch template gives them no public IP, "
                "their only way out here. The private subnets map none.",
            )
        if zone.availability_zone is not None:
            # cfn-lint W3010 (hard-coded zone) is the design here, as the reason below says.
            subnet.add_metadata("cfn-lint", {"config": {"ignore_checks": ["W3010"]}})
            acknowledge(
                subnet,
                "CloudFormation-Validate::W3010",
                "The zone is pinned on purpose: capacity reservations, FSx and the nodes must share one named zone.",
            )
        table = ec2.CfnRouteTable(self, f"{name}RouteTable", vpc_id=self.resource.ref)
        ec2.CfnSubnetRouteTableAssociation(
            self, f"{name}RouteTableAssociation", subnet_id=subnet.ref, route_table_id=table.ref
        )
        self._route_tables.append(table)
        return subnet, table

    def _flow_logs(
        self,
        traffic_type: str,
        interval: int,
        retention: logs.RetentionDays,
        removal_policy: cdk.RemovalPolicy,
    ) -> logs.LogGroup:
        group = logs.LogGroup(self, "FlowLogGroup", retention=retention, removal_policy=removal_policy)
        role = iam.Role(
            self,
            "FlowLogRole",
            description="Lets VPC Flow Logs write this VPC's flow log group",
            assumed_by=iam.ServicePrincipal(
                "vpc-flow-logs.amazonaws.com",
                conditions={
                    "StringEquals": {"aws:SourceAccount": cdk.Aws.ACCOUNT_ID},
                    "ArnLike": {
                        "aws:SourceArn": cdk.Fn.sub(
                            "arn:${AWS::Partition}:ec2:${AWS::Region}:${AWS::AccountId}:vpc-flow-log/*"
                        )
                    },
                },
            ),
        )
        policy = iam.ManagedPolicy(
            self,
            "FlowLogPolicy",
            description="Write access to this VPC's flow log group only",
            statements=[
                iam.PolicyStatement(
                    actions=["logs:CreateLogStream", "logs:PutLogEvents", "logs:DescribeLogStreams"],
                    resources=[group.log_group_arn],
                )
            ],
            roles=[role],
        )
        flow_log = ec2.CfnFlowLog(
            self,
            "FlowLog",
            resource_id=self.resource.ref,
            resource_type="VPC",
            traffic_type=traffic_type,
            log_destination_type="cloud-watch-logs",
            log_group_name=group.log_group_name,
            deliver_logs_permission_arn=role.role_arn,
            max_aggregation_interval=interval,
        )
        flow_log.node.add_dependency(policy)
        acknowledge_compliance(
            group,
            "CloudWatchLogGroupEncrypted",
            "Flow log records hold addresses, ports and byte counts only; CloudWatch Logs encrypts them at rest "
            "with service keys, and a customer key would add key-policy coupling to every environment.",
        )
        return group

    def _peer(self, peering: Peering) -> ec2.CfnVPCPeeringConnection:
        _check_ids("peer_route_table_ids", peering.peer_route_table_ids, RTB_ID)
        _check_ids("peer_vpc_id", [peering.peer_vpc_id], VPC_ID)
        connection = ec2.CfnVPCPeeringConnection(
            self,
            "Peering",
            vpc_id=self.resource.ref,
            peer_vpc_id=peering.peer_vpc_id,
            peer_owner_id=peering.peer_owner_id,
            peer_region=peering.peer_region,
            peer_role_arn=peering.peer_role_arn,
        )
        for index, table in enumerate(self._route_tables):
            ec2.CfnRoute(
                self,
                f"PeeringRoute{index + 1}",
                route_table_id=table.ref,
                destination_cidr_block=peering.peer_cidr,
                vpc_peering_connection_id=connection.ref,
            )
        for t_index, table_id in enumerate(peering.peer_route_table_ids):
            for c_index, block in enumerate(self._cidr_blocks):
                ec2.CfnRoute(
                    self,
                    f"PeerReturnRoute{t_index + 1}Cidr{c_index + 1}",
                    route_table_id=table_id,
                    destination_cidr_block=block,
                    vpc_peering_connection_id=connection.ref,
                )
        return connection

    # -- NetworkRef -----------------------------------------------------

    @property
    def vpc(self) -> ec2.IVpc:
        """The VPC as an L2 interface."""
        return self._vpc

    @property
    def vpc_cidr_blocks(self) -> list[str]:
        """The VPC's CIDR blocks: primary first, then the secondary if any."""
        return list(self._cidr_blocks)

    @property
    def public_subnet(self) -> ec2.ISubnet:
        """The primary zone's public subnet (head nodes, NAT)."""
        return self._public[0]

    @property
    def public_subnets(self) -> list[ec2.ISubnet]:
        """Every public subnet, primary zone first."""
        return list(self._public)

    @property
    def private_subnets(self) -> list[ec2.ISubnet]:
        """Every private subnet, primary zone first (FSx and compute nodes use the first)."""
        return list(self._private)

    @property
    def security_group(self) -> ec2.ISecurityGroup:
        """The cluster nodes' security group (file systems have groups of their own)."""
        return self._security_group.security_group

    def node_subnet_cidrs(self, *, include_public: bool) -> list[str]:
        """The CIDR blocks of the subnets cluster nodes may use: every private subnet, and the primary
        zone's public subnet when ``include_public`` (a head or login node placed there)."""
        subnets = self._private + (self._public[:1] if include_public else [])
        return [s.ipv4_cidr_block for s in subnets]


class ClusterSecurityGroup(Construct):
    """The cluster nodes' security group (file systems have groups of their own that admit it).

    Its description still names file systems: a group's description cannot
    change without replacing the group, which every deployed environment
    exports to its other stacks.

    All traffic in from itself and out to itself: EFA requires both on every
    group attached to an EFA interface, or node creation fails its health
    check. All traffic out to the internet (through NAT) for package installs
    and AWS APIs. Every rule has a description.
    """

    def __init__(self, scope: Construct, construct_id: str, *, vpc: ec2.IVpc) -> None:
        """Create the group in ``vpc``."""
        super().__init__(scope, construct_id)
        self.resource = ec2.CfnSecurityGroup(
            self,
            "Resource",
            vpc_id=vpc.vpc_id,
            group_description="mlcluster nodes and file systems: all traffic within the group (EFA, Slurm, Lustre)",
            security_group_egress=[
                ec2.CfnSecurityGroup.EgressProperty(
                    ip_protocol="-1",
                    cidr_ip="0.0.0.0/0",
                    description="Outbound to the internet through NAT: packages, AWS APIs",
                )
            ],
        )
        self_ingress = ec2.CfnSecurityGroupIngress(
            self,
            "SelfIngress",
            group_id=self.resource.attr_group_id,
            ip_protocol="-1",
            source_security_group_id=self.resource.attr_group_id,
            description="All traffic from cluster members (EFA, Slurm, Lustre, NFS)",
        )
        acknowledge_compliance(
            self_ingress,
            "EC2RestrictedCommonPorts",
            "The source is this security group itself, not an address range: only cluster members reach these "
            "ports, and EFA requires all-traffic self ingress.",
        )
        ec2.CfnSecurityGroupEgress(
            self,
            "SelfEgress",
            group_id=self.resource.attr_group_id,
            ip_protocol="-1",
            destination_security_group_id=self.resource.attr_group_id,
            description="All traffic to cluster members (EFA requires self egress)",
        )
        self.security_group = ec2.SecurityGroup.from_security_group_id(
            self, "Ref", self.resource.attr_group_id, allow_all_outbound=True
        )


class ImportedNetwork(Construct):
    """An existing VPC, subnets and security group used by ID.

    Nothing is created. The IDs are checked for their form; that they exist
    and fit (private subnets route through NAT, the group has the self rules
    EFA needs) is checked by the services at deploy time.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        vpc_id: str,
        vpc_cidr: str,
        private_subnet_ids: Sequence[str],
        security_group_id: str,
        availability_zone: str | None = None,
        availability_zone_id: str | None = None,
        public_subnet_id: str | None = None,
    ) -> None:
        """Import the network.

        :param vpc_id: the VPC, e.g. ``vpc-0abc1234``.
        :param vpc_cidr: the VPC's primary CIDR (NFS exports are limited to it).
        :param private_subnet_ids: private subnets; the first holds FSx and the nodes.
        :param security_group_id: a group with all-traffic self ingress and egress.
        :param availability_zone: the first private subnet's zone name, if known.
        :param availability_zone_id: its zone ID, if the name is not given.
        :param public_subnet_id: a public subnet for head nodes. Default: none.
        """
        super().__init__(scope, construct_id)
        _check_ids("vpc_id", [vpc_id], VPC_ID)
        _check_ids("private_subnet_ids", private_subnet_ids, SUBNET_ID)
        _check_ids("security_group_id", [security_group_id], SG_ID)
        if public_subnet_id is not None:
            _check_ids("public_subnet_id", [public_subnet_id], SUBNET_ID)
        if not private_subnet_ids:
            raise ValueError("private_subnet_ids: give at least one private subnet ID")
        _net(vpc_cidr, "vpc_cidr")
        self._cidr = vpc_cidr
        zone_label = availability_zone or availability_zone_id or cdk.Aws.NO_VALUE
        self._vpc = ec2.Vpc.from_vpc_attributes(
            self,
            "Vpc",
            vpc_id=vpc_id,
            vpc_cidr_block=vpc_cidr,
            availability_zones=[zone_label],
            private_subnet_ids=[private_subnet_ids[0]],
        )
        self._private = [
            ec2.Subnet.from_subnet_attributes(self, f"Private{i + 1}Ref", subnet_id=sid, availability_zone=zone_label)
            for i, sid in enumerate(private_subnet_ids)
        ]
        self._public = (
            ec2.Subnet.from_subnet_attributes(self, "Public1Ref", subnet_id=public_subnet_id)
            if public_subnet_id is not None
            else None
        )
        self._security_group = ec2.SecurityGroup.from_security_group_id(
            self, "SecurityGroup", security_group_id, mutable=False
        )
        acknowledge(
            self,
            "Annotation::@aws-cdk/aws-ec2:noSubnetRouteTableId",
            "The existing subnets' route tables are managed outside mlcluster and nothing here reads them.",
        )

    @property
    def vpc(self) -> ec2.IVpc:
        """The VPC as an L2 interface."""
        return self._vpc

    @property
    def vpc_cidr_blocks(self) -> list[str]:
        """The VPC's primary CIDR block."""
        return [self._cidr]

    @property
    def public_subnet(self) -> ec2.ISubnet | None:
        """The public subnet, if one was given."""
        return self._public

    @property
    def private_subnets(self) -> list[ec2.ISubnet]:
        """The private subnets in the order given."""
        return list(self._private)

    @property
    def security_group(self) -> ec2.ISecurityGroup:
        """The existing cluster security group."""
        return self._security_group

    def node_subnet_cidrs(self, *, include_public: bool) -> list[str]:
        """The VPC's CIDR: an existing network's subnet blocks are not given, so this is the narrowest known."""
        return [self._cidr]


#: S3 actions that only read; through the endpoint they reach any bucket (packages, ECR layers,
#: ParallelCluster's and the region's public buckets).
S3_READ_ACTIONS = (
    "s3:GetObject",
    "s3:GetObjectVersion",
    "s3:GetBucketLocation",
    "s3:ListBucket",
    "s3:ListAllMyBuckets",
)


def s3_endpoint_policy() -> iam.PolicyDocument:
    """The S3 gateway endpoint's policy: reads of any bucket, everything else only on this account's buckets.

    A process on a node (any job) can then not copy data out to a bucket of
    another account through the endpoint: writes, deletes, multipart
    uploads, ACL and policy changes need ``aws:ResourceAccount`` to be this
    account. The endpoint policy does not grant anything by itself; the
    caller's IAM policy still has to allow the request.
    """
    return iam.PolicyDocument(
        statements=[
            iam.PolicyStatement(
                sid="ReadAnyBucket",
                principals=[iam.AnyPrincipal()],
                actions=list(S3_READ_ACTIONS),
                resources=["*"],
            ),
            iam.PolicyStatement(
                sid="AnythingOnThisAccountsBuckets",
                principals=[iam.AnyPrincipal()],
                actions=["s3:*"],
                resources=["*"],
                conditions={"StringEquals": {"aws:ResourceAccount": cdk.Aws.ACCOUNT_ID}},
            ),
        ]
    )


class _Layout:
    def __init__(self, public: list[str | None], private: list[str]) -> None:
        self.public = public
        self.private = private


def _plan_subnets(zones: Sequence[Zone], cidr: str, secondary_cidr: str | None, nat_gateways: str) -> _Layout:
    """Choose every subnet's CIDR block and check that they fit and do not overlap."""
    for i, zone in enumerate(zones):
        where = "primary zone" if i == 0 else f"extra_zones[{i - 1}]"
        if (zone.availability_zone is None) == (zone.availability_zone_id is None):
            raise ValueError(f"{where}: give exactly one of availability_zone or availability_zone_id")
        if zone.availability_zone is not None and not re.fullmatch(AZ_NAME, zone.availability_zone):
            raise ValueError(
                f"{where}: availability_zone {zone.availability_zone!r} is not an AZ name like 'us-east-1a'"
            )
        if zone.availability_zone_id is not None and not re.fullmatch(AZ_ID, zone.availability_zone_id):
            raise ValueError(
                f"{where}: availability_zone_id {zone.availability_zone_id!r} is not an AZ ID like 'use1-az4'"
            )
    if len(zones) > MAX_ZONES:
        raise ValueError(f"zones: {len(zones)} zones given; at most {MAX_ZONES} are supported")
    if nat_gateways not in ("one", "per_zone"):
        raise ValueError(f"nat_gateways: {nat_gateways!r} is not allowed; use 'one' or 'per_zone'")
    primary = _net(cidr, "cidr")
    if not 16 <= primary.prefixlen <= 24:
        raise ValueError(f"cidr: {cidr!r} must be a /16 to /24 block")
    secondary = _net(secondary_cidr, "secondary_cidr") if secondary_cidr is not None else None
    blocks = [primary] + ([secondary] if secondary is not None else [])
    if secondary is not None and secondary.overlaps(primary):
        raise ValueError(f"secondary_cidr: {secondary_cidr!r} overlaps cidr {cidr!r}")

    quarters = list(primary.subnets(prefixlen_diff=2))
    public_pool = list(quarters[0].subnets(prefixlen_diff=2))
    private_pool = list(secondary.subnets(prefixlen_diff=2)) if secondary is not None else quarters[1:]

    public: list[str | None] = []
    private: list[str] = []
    for i, zone in enumerate(zones):
        wants_public = i == 0 or nat_gateways == "per_zone"
        public.append((zone.public_subnet_cidr or str(public_pool[i])) if wants_public else None)
        if zone.private_subnet_cidr is not None:
            private.append(zone.private_subnet_cidr)
        elif i < len(private_pool):
            private.append(str(private_pool[i]))
        else:
            raise ValueError(
                f"extra_zones[{i - 1}]: no room for a private subnet in cidr {cidr}; "
                "add secondary_cidr or give private_subnet_cidr for this zone"
            )

    chosen = [(f"public subnet {p}", p) for p in public if p is not None] + [
        (f"private subnet {p}", p) for p in private
    ]
    nets = []
    for label, block in chosen:
        net = _net(block, label)
        if not any(net.subnet_of(b) for b in blocks):
            raise ValueError(f"{label}: not inside the VPC's CIDR blocks {[str(b) for b in blocks]}")
        if net.prefixlen > 28:
            raise ValueError(f"{label}: subnets must be /28 or larger")
        nets.append((label, net))
    for i, (label_a, a) in enumerate(nets):
        for label_b, b in nets[i + 1 :]:
            if a.overlaps(b):
                raise ValueError(f"{label_a} overlaps {label_b}; give non-overlapping subnet CIDRs")
    return _Layout(public, private)


def _within(block: str, outer: str | None) -> bool:
    return outer is not None and ipaddress.ip_network(block).subnet_of(ipaddress.ip_network(outer))  # type: ignore[arg-type]


def _check_ids(name: str, values: Sequence[str], pattern: str) -> None:
    for value in values:
        if cdk.Token.is_unresolved(value):
            continue
        if not re.fullmatch(pattern, value):
            raise ValueError(f"{name}: {value!r} is not a valid ID; expected the form {pattern}")
